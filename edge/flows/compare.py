"""``edge devices compare``: which catalog device runs a model fast enough, answered offline.

For every profile asked (every catalog profile by default): the candidates edge would try for
it (``edge.flows.planning``, as optimize plans them), each one's latency estimated
(``edge.core.estimate``: the model's work against the profile's peak figures, or an
accelerator's TOPS for a candidate made for it, corrected by the timings edge kept of that
runtime and precision), the fastest estimate kept; with its interval, the working memory its
weights and activations take, and the energy of one inference from the profile's power figures.

A profile is **calibrated** for a candidate when edge kept measured timings of enough models of
that runtime and precision on it; else the nearest calibrated profile of the same arch (by
peak) lends its corrections, said so, the interval widened; else the roofline alone, its
interval open above (nothing bounds a runtime's inefficiency there). Nothing is converted or
verified here: fidelity is optimize's to judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edge.core import estimate as est
from edge.core.errors import UsageError, first_line
from edge.core.json_value import JsonValue
from edge.core.profile import Profile, catalog_ids, load_profile
from edge.core.select import may_be_fastest
from edge.core.values import Candidate, ModelInfo
from edge.flows.planning import plan_for
from edge.flows.worklist import corrections
from targets import get_target

__all__ = ["Compared", "CompareReport", "compare"]

#: The interval of corrections borrowed from another profile is widened by this on each side.
BORROWED = 1.5


@dataclass(frozen=True, kw_only=True, slots=True)
class Compared(JsonValue):
    """One profile's best estimated candidate for the model (none: ``why``)."""

    profile: str
    name: str
    candidate: str | None = None
    unit: str = "CPU"
    ms: float | None = None
    low_ms: float | None = None
    high_ms: float | None = None  # None: open above (nothing kept to bound it)
    calibration: str = ""  # "calibrated", "from <profile>", "roofline"
    basis: str = ""
    memory_mb: float | None = None
    energy_mj: float | None = None
    why: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompareReport(JsonValue):
    """Every profile asked, the fastest estimate first."""

    model: str
    macs: int
    rows: tuple[Compared, ...]
    note: str


def compare(reference: Path, model_info: ModelInfo,
            profile_ids: Sequence[str] = ()) -> CompareReport:
    """The model's estimated best candidate on every profile (``profile_ids``; none: the
    catalog's), fastest first; a profile edge plans nothing for says why."""
    done = est.work(reference)
    profiles = [load_profile(p) for p in (profile_ids or catalog_ids())]
    rows = [_best(profile, done, model_info) for profile in profiles]
    rows.sort(key=lambda r: (r.ms is None, r.ms if r.ms is not None else 0.0, r.profile))
    return CompareReport(model=str(reference), macs=done.macs, rows=tuple(rows), note=(
        "estimated, not measured: each device's best candidate by its roofline (peak figures, "
        "an accelerator's TOPS), corrected by timings edge kept; fidelity is not verified here "
        "(edge optimize --profile P verifies it)"))


def _best(profile: Profile, done: est.Work, model_info: ModelInfo) -> Compared:
    try:
        plan = [p.candidate for p in plan_for(profile, model_info) if p.keep]
    except UsageError as exc:
        return Compared(profile=profile.id, name=profile.name, why=first_line(exc))
    if not plan:
        return Compared(profile=profile.id, name=profile.name,
                        why="no candidate is planned for it (see edge optimize --dry-run)")
    found = [_estimated(profile, done, c) for c in plan]
    return _first_of_contenders(found, [c.id for c in plan])


def _first_of_contenders(found: list[Compared], order: list[str]) -> Compared:
    """The estimate that may be the fastest (``select.may_be_fastest``), by the plan's order
    (the profile's) among those that may: with nothing kept, the order alone, as optimize's."""
    spans = {r.candidate or "": (r.low_ms or 0.0, r.high_ms if r.high_ms is not None
                                 else math.inf) for r in found}
    best = may_be_fastest(spans, order)
    return next(r for r in found if r.candidate == best)


def _estimated(profile: Profile, done: est.Work, candidate: Candidate) -> Compared:
    unit, peak = _unit(profile, candidate)
    line = est.roofline(done, profile, candidate.precision, peak_gops=peak)
    label, ratios, margin = _ratios(profile, candidate)
    guess = est.estimate(line, ratios)
    low, high = guess.low_ms / margin, guess.high_ms * margin
    return Compared(profile=profile.id, name=profile.name, candidate=candidate.id, unit=unit,
                    ms=guess.ms, low_ms=low, high_ms=None if math.isinf(high) else high,
                    calibration=label, basis=guess.basis, memory_mb=_memory_mb(done, candidate),
                    energy_mj=_energy_mj(profile, guess.ms))


def _unit(profile: Profile, candidate: Candidate) -> tuple[str, float | None]:
    """Where the candidate runs, and that unit's peak GOPS at its precision when it is an
    accelerator with a TOPS figure (None: the CPU's figures)."""
    try:
        accelerated = bool(get_target(candidate.target).caps.accelerator)
    except ImportError:
        accelerated = False
    found = next((a for a in profile.accelerators if a.runtime == candidate.target), None)
    if not accelerated or found is None:
        return "CPU", None
    if found.tops is None:
        return found.name, None
    scale = 1.0 if candidate.precision.startswith("int8") else 0.5
    return found.name, found.tops * 1000 * scale


def _ratios(profile: Profile, candidate: Candidate) -> tuple[str, list[float], float]:
    """The kept corrections of (profile, runtime, precision) and how they are labelled: its
    own ("calibrated"), else the nearest calibrated profile's (widened), else none."""
    kept = corrections()
    own = kept.ratios(est.key(profile, candidate.target, candidate.precision))
    if len(own) >= est.MIN_KEPT:
        return "calibrated", own, 1.0
    near = _nearest(profile, candidate, kept)
    if near is None:
        return "roofline", own, 1.0
    other, ratios = near
    return f"from {other}", ratios, BORROWED


def _nearest(profile: Profile, candidate: Candidate,
             kept: est.Corrections) -> tuple[str, list[float]] | None:
    """The calibrated profile of the same arch nearest ``profile`` (by fp32 peak) for the
    candidate's runtime and precision (another arch's runtime builds and kernels differ: its
    corrections do not stand in)."""
    found = []
    for other in catalog_ids():
        ratios = kept.ratios(f"{other}|{candidate.target}|{candidate.precision}")
        if other == profile.id or len(ratios) < est.MIN_KEPT:
            continue
        them = load_profile(other)
        if them.compute.arch == profile.compute.arch:
            apart = abs(math.log(est.peak_gops(them, "fp32") / est.peak_gops(profile, "fp32")))
            found.append((apart, other, ratios))
    return (min(found)[1], min(found)[2]) if found else None


def _memory_mb(done: est.Work, candidate: Candidate) -> float:
    """The weights at the candidate's precision and the activations its nodes read and write
    (an upper bound of its working set: a runtime reuses activation buffers)."""
    weight, value = est.value_bytes(candidate.precision)
    return (done.weight_values * weight + done.other_values * value) / 1e6


def _energy_mj(profile: Profile, ms: float) -> float:
    """One inference's energy at the profile's threads, from its idle and full-load power."""
    idle, top = profile.power.idle_w, profile.power.max_w
    watts = idle + (top - idle) * min(1.0, profile.compute.default_threads / profile.compute.cores)
    return watts * ms
