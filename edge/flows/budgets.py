"""Budgets: candidates over the latency (on a host of the device's kind) or size budget are
rejected; with a budget the choice is among the least fidelity loss within it."""

from __future__ import annotations

import logging
import platform
from dataclasses import replace
from pathlib import Path

from devices.cpus import cpu_isa
from devices.readings import parse_cpuinfo
from edge.core.profile import Profile
from edge.core.select import LOSS_BAND, Budget
from edge.core.units import MB
from edge.core.values import CandidateResult

__all__ = ["budget_for", "host_is", "host_isa", "loss_band", "none_within", "within_budgets"]

log = logging.getLogger("edge")


def within_budgets(results: list[CandidateResult], profile: Profile, latency: Budget | None,
                   size_mb: float | None) -> tuple[list[CandidateResult], bool]:
    """Passed candidates over the latency budget (on a host of the device's kind) or the size
    budget (``size_mb``, else the profile's) rejected; and whether a budget applied."""
    size = budget_for(size_mb, profile.budgets.size_mb, "size", "MB")
    if latency is not None and not host_is(profile):
        log.warning("%s not applied here: this host is %s, the device %s (edge deploy "
                    "--on-device applies it to the device's own timings)", latency.name,
                    platform.machine(), profile.compute.arch)
        latency = None
    return [_sized(_budgeted(r, latency), size) for r in results], bool(latency or size)


def budget_for(flag: float | None, profiled: float | None, kind: str,
               unit: str) -> Budget | None:
    """The flag's budget, else the profile's, else None; named as the reasons name it."""
    if flag is not None:
        return Budget(limit=flag, name=f"--{kind}-budget", unit=unit)
    if profiled is None:
        return None
    return Budget(limit=profiled, name=f"the profile's {kind} budget", unit=unit)


def _budgeted(result: CandidateResult, budget: Budget | None) -> CandidateResult:
    if budget is None or result.status != "passed":
        return result
    if result.bench is None:
        return replace(result, status="rejected", reason=f"not timed on this host: cannot be "
                       f"judged against {budget}")
    if budget.holds(result.bench.p50_ms):
        return result
    return replace(result, status="rejected", reason=budget.over(result.bench.p50_ms))


def _sized(result: CandidateResult, budget: Budget | None) -> CandidateResult:
    """A passed candidate whose files take more than the budget (MB) is rejected."""
    if budget is None or result.status != "passed" or result.artifact is None:
        return result
    size = result.artifact.total_bytes / MB
    if budget.holds(size):
        return result
    return replace(result, status="rejected", reason=budget.over(size))


def loss_band(max_drop: float, samples: int) -> float:
    """Allowance shares this close are equally faithful: 10 points, or one held-out sample's
    share of --max-drop when that is more (one flip among 400 is a quarter of 1 point)."""
    one = 100.0 / max(samples, 1) / max_drop if max_drop else 0.0
    return max(LOSS_BAND, one)


def none_within(before: list[CandidateResult]) -> str:
    """Why nothing was chosen when budgets rejected every faithful candidate."""
    faithful = [b for b in before if b.status == "passed"]
    if not faithful:
        return "no candidate kept fidelity; see each candidate's reason"
    return (f"{len(faithful)} candidate(s) kept fidelity but none is within the budget; see "
            f"each candidate's reason")


def host_isa() -> frozenset[str]:
    """This host's instruction sets in the profiles' vocabulary (none known off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(cpu_isa(platform.machine(), parse_cpuinfo(text))[0])


def host_is(profile: Profile) -> bool:
    """Whether this host's timings stand for the profile's device (same architecture)."""
    return platform.machine() == profile.compute.arch
