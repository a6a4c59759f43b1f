"""Which candidates ``edge optimize`` converts, and in which order: the likely winners first,
and a candidate that cannot be chosen skipped with the reason (``--exhaustive`` converts every
one as before; ``--time-budget`` stops trying when the time is spent).

Two regimes, by what will decide the choice:

* **by the profile's order** (a device not at hand, its timings not measured here, no budget):
  the first faithful candidate in the profile's runtime order at the lowest precision is chosen
  (``edge.core.select``), so candidates are tried in that order and, once one keeps fidelity
  and no host timing can set it aside, every candidate ranking after it cannot be chosen;
* **by a measurement** (this host is the device's kind, or the device measures the bundle's
  candidates): candidates are tried by their estimated latency (``edge.core.estimate``), and
  one whose best case cannot beat the best faithful one's worst case by the tie margin, nor tie
  with it ranking first, is skipped; while the estimates' intervals are open (no kept
  timings of that runtime and precision) nothing is skipped.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge.core import estimate as est
from edge.core.cache import cache_root
from edge.core.plan import MIXED, Planned, runs_faster
from edge.core.profile import Profile
from edge.core.select import (
    TIE,
    Faster,
    any_lower,
    faithful_first,
    may_win,
    preference,
    without_gain,
)
from edge.core.values import ORIGINAL, CandidateResult, Fidelity

__all__ = ["Policy", "cannot_win", "corrections", "describe", "estimates", "keep_timings", "policy",
           "work_order"]

log = logging.getLogger("edge")

Rank = Callable[[CandidateResult], tuple[int, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """How one optimize run orders and skips its candidates."""

    runtimes: tuple[str, ...]
    profile: str
    by_order: bool  # the profile's order chooses (no measurement decides)
    exhaustive: bool = False  # convert every kept candidate (--exhaustive)
    budget_s: float | None = None  # --time-budget
    started: float = field(default_factory=time.monotonic)
    #: candidate id -> its estimated latency on the device
    estimates: Mapping[str, est.Estimate] = field(default_factory=dict)
    #: whether the device runs (runtime, precision) faster than fp32 (edge.core.plan)
    faster: Faster = any_lower

    @property
    def rank(self) -> Rank:
        """As the choice ranks: by the profile's order, else measured ties (most faithful)."""
        if not self.by_order:
            return faithful_first(self.runtimes)
        return preference(self.runtimes, self.faster)


def policy(plan: Sequence[Planned], profile: Profile, model_path: str | Path, *, by_order: bool,
           exhaustive: bool, budget_s: float | None, started: float) -> Policy:
    """The Policy of an optimize run for ``profile`` (its estimates, its order's precisions)."""
    return Policy(runtimes=tuple(profile.runtimes), profile=profile.id, by_order=by_order,
                  exhaustive=exhaustive, budget_s=budget_s, started=started,
                  estimates=estimates(plan, model_path, profile),
                  faster=runs_faster(profile, TIE))


def corrections() -> est.Corrections:
    """The kept corrections of this machine's cache."""
    return est.Corrections(cache_root() / "estimates.json")


def _work(model_path: str | Path) -> est.Work:
    """The model's work, read once per file version (the plan's estimates and the kept timings
    of the same run read it alike)."""
    stat = Path(model_path).stat()
    return _work_of(str(model_path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _work_of(path: str, mtime_ns: int, size: int) -> est.Work:
    return est.work(path)


def estimates(plan: Sequence[Planned], model_path: str | Path,
              profile: Profile) -> dict[str, est.Estimate]:
    """Candidate id -> its estimate on the profile's device (none when the model cannot be
    read as ONNX: the order alone then decides the work)."""
    try:
        done = _work(model_path)
    except Exception as exc:  # noqa: BLE001 - onnx's own errors: no estimate, said once
        log.info("no latency estimate: %s", exc)
        return {}
    kept = corrections()
    return {p.candidate.id: est.estimate(est.roofline(done, profile, p.candidate.precision),
                                         kept.ratios(est.key(profile, p.candidate.target,
                                                             p.candidate.precision)))
            for p in plan}


def keep_timings(results: Sequence[CandidateResult], model_path: str | Path,
                 profile: Profile, model_sha: str) -> None:
    """Keep measured-over-estimated ratios of candidates timed where the device's timings are
    (this host, when it is the device's kind)."""
    timed = [r for r in results if r.bench is not None and r.bench.measured
             and r.candidate.target != ORIGINAL and not r.candidate.variant]
    if not timed:
        return
    try:
        done = _work(model_path)
    except Exception:  # noqa: BLE001 - onnx's own errors: nothing kept
        return
    corrections().add({est.key(profile, r.candidate.target, r.candidate.precision):
                       r.bench.p50_ms / est.roofline(done, profile, r.candidate.precision).ms
                       for r in timed if r.bench is not None}, model_sha)


def _optimistic(planned: Planned) -> CandidateResult:
    """A candidate not tried yet, as ranked before its artifact is known (no CPU fallbacks,
    exact: its best rank)."""
    return CandidateResult(candidate=planned.candidate, status="skipped", reason="",
                           fidelity=_EXACT)


#: The fidelity an untried candidate may turn out to have, at best.
_EXACT = Fidelity(samples=0, cosine=1.0, max_abs=0.0, allowance_used=0.0)


def work_order(plan: Sequence[Planned], policy: Policy) -> list[int]:
    """Indices of ``plan`` in the order to try them: the user's file first (nothing to
    convert, the baseline), mixed plans after the candidates they are made from, then by the
    profile's order or by the estimate."""
    def by_order(i: int) -> tuple[object, ...]:
        return (*_first(plan[i]), policy.rank(_optimistic(plan[i])))

    def by_estimate(i: int) -> tuple[object, ...]:
        found = policy.estimates.get(plan[i].candidate.id)
        return (*_first(plan[i]), found.ms if found else math.inf,
                policy.rank(_optimistic(plan[i])))

    key = by_order if policy.by_order or not policy.estimates else by_estimate
    return sorted(range(len(plan)), key=key)


def _first(planned: Planned) -> tuple[int, int]:
    return (planned.candidate.target != ORIGINAL, planned.candidate.variant == MIXED)


def cannot_win(planned: Planned, done: Sequence[CandidateResult], policy: Policy) -> str | None:
    """Why ``planned`` is not tried (it cannot be chosen, or the time is spent), else None."""
    if not planned.keep or planned.candidate.target == ORIGINAL:  # the user's file: no work
        return None
    if policy.budget_s is not None and time.monotonic() - policy.started > policy.budget_s:
        return _spent(done, policy)
    if policy.exhaustive:
        return None
    if policy.by_order:
        return _after_settled(planned, done, policy)
    return _estimated_slower(planned, done, policy)


def _spent(done: Sequence[CandidateResult], policy: Policy) -> str:
    best = [r.candidate.id for r in done if r.status == "passed"]
    found = f"; faithful so far: {', '.join(best)}" if best else "; none faithful so far"
    return (f"not tried: the --time-budget of {policy.budget_s:g} s was spent (candidates are "
            f"tried likely winners first){found}")


def _after_settled(planned: Planned, done: Sequence[CandidateResult],
                   policy: Policy) -> str | None:
    """Ranks after a faithful candidate that the profile's order chooses over it."""
    settled = _settled(done, policy.rank)
    if settled is None or policy.rank(_optimistic(planned)) <= policy.rank(settled):
        return None
    return (f"cannot be chosen: {settled.candidate.id} keeps fidelity and ranks before it in "
            f"{policy.profile}'s order, which decides for a device not at hand (--exhaustive "
            "converts it)")


def _settled(done: Sequence[CandidateResult], rank: Rank) -> CandidateResult | None:
    """The best-ranked faithful candidate that no host timing can set aside: the original, or
    one on another runtime than the original's (edge.core.select sets aside a candidate on the
    original's runtime that this host times slower than it), and not one the choice would set
    aside for having nothing to show against the original (``without_gain``)."""
    original = next((r for r in done if r.candidate.target == ORIGINAL
                     and r.status == "passed" and r.artifact is not None), None)
    mine = original.artifact.runtime if original and original.artifact else None
    aside = without_gain([r for r in done if r.status == "passed"], original)
    firm = [r for r in done if r.status == "passed" and r.artifact is not None
            and (r is original or r.artifact.runtime != mine)
            and r.candidate.id not in aside]
    return min(firm, key=rank, default=None)


def _estimated_slower(planned: Planned, done: Sequence[CandidateResult],
                      policy: Policy) -> str | None:
    """Its best case loses to a faithful candidate's worst case beyond the tie margin, or
    cannot beat it by the margin while ranking after it."""
    mine = policy.estimates.get(planned.candidate.id)
    if mine is None or math.isinf(mine.low_ms):
        return None
    rank = policy.rank(_optimistic(planned))
    for result in done:
        theirs = policy.estimates.get(result.candidate.id)
        if result.status != "passed" or theirs is None or math.isinf(theirs.high_ms):
            continue
        if not may_win(mine.low_ms, theirs.high_ms, ranks_first=rank < policy.rank(result)):
            return (f"not converted: estimated at best {mine.low_ms:.3f} ms on the device, "
                    f"{result.candidate.id} (faithful) at worst {theirs.high_ms:.3f} ms "
                    f"({mine.basis}): it cannot win by the {TIE:.0%} tie margin "
                    "(--exhaustive converts it)")
    return None


def describe(plan: Sequence[Planned], policy: Policy) -> tuple[list[dict[str, object]], str]:
    """The plan as ``--dry-run`` shows it: per candidate its place in the work order and its
    estimate (JSON), and one line saying how the work is ordered and cut."""
    kept = [i for i in work_order(plan, policy) if plan[i].keep]
    order = {i: n for n, i in enumerate(kept, 1)}
    rows: list[dict[str, object]] = [
        {"candidate": p.candidate.id, "keep": p.keep, "reason": p.reason, "order": order.get(i),
         "estimate": policy.estimates[p.candidate.id].to_json()
         if p.candidate.id in policy.estimates else None} for i, p in enumerate(plan)]
    tried = [plan[i].candidate.id for i in kept]
    if policy.exhaustive:
        how = "every candidate kept is converted (--exhaustive)"
    elif policy.by_order:
        how = (f"once one keeps fidelity, those ranking after it in {policy.profile}'s order "
               "are skipped (--exhaustive converts them)")
    else:
        how = ("a candidate whose estimated best case cannot beat a faithful one's worst case "
               "is skipped (--exhaustive converts them)")
    return rows, f"tried in this order: {', '.join(tried)}; {how}"
