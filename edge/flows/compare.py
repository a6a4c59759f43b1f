"""``edge devices compare``: which catalog device runs a model fast enough, answered offline.

For every profile asked (every catalog profile by default): the candidates edge would try for
it (``edge.flows.planning``, as optimize plans them), each one's latency estimated
(``edge.core.estimate``: the model's work against the profile's peak figures, or an
accelerator's TOPS for a candidate made for it, corrected by the timings edge kept of that
runtime and precision), the fastest estimate kept; with its interval, the working memory its
weights and activations take, and the energy of one inference from the profile's power figures.

A profile is **calibrated** for a candidate when its device was calibrated (``edge devices
probe --calibrate``: the candidate's runtime and precision fitted on the probe models' timings
there, with a conformal interval), or when edge kept measured timings of enough models of that
runtime and precision on it; else the nearest calibrated profile of the same arch (by
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
from edge.core.latency.model import Fitted, features
from edge.core.latency.store import Calibration, calibrated_ids, fitted, kept
from edge.core.plan import runs_faster
from edge.core.profile import Profile, catalog_ids, load_profile
from edge.core.select import TIE, may_be_fastest, preference
from edge.core.values import Candidate, CandidateResult, ModelInfo
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
    done, found = est.work(reference), features(reference)
    profiles = [load_profile(p) for p in (profile_ids or catalog_ids())]
    rows = [_best(profile, done, found, model_info) for profile in profiles]
    rows.sort(key=lambda r: (r.ms is None, r.high_ms is None,
                             r.ms if r.ms is not None else 0.0, r.profile))
    return CompareReport(model=str(reference), macs=done.macs, rows=tuple(rows), note=(
        "estimated, not measured: each device's best candidate by its latency model where it "
        "was calibrated (edge devices probe --calibrate), else by its roofline (peak figures, "
        "an accelerator's TOPS) corrected by timings edge kept; those with an interval first, "
        "fastest first, then those by the roofline alone (an optimistic figure, open above); "
        "fidelity is not verified here (edge optimize --profile P verifies it)"))


def _best(profile: Profile, done: est.Work, found: dict[str, float],
          model_info: ModelInfo) -> Compared:
    try:
        plan = [p.candidate for p in plan_for(profile, model_info) if p.keep]
    except UsageError as exc:
        return Compared(profile=profile.id, name=profile.name, why=first_line(exc))
    if not plan:
        return Compared(profile=profile.id, name=profile.name,
                        why="no candidate is planned for it (see edge optimize --dry-run)")
    calibration = kept(profile.id)
    estimated = [_estimated(profile, done, c, found, calibration) for c in plan]
    rank = preference(profile.runtimes, runs_faster(profile, TIE))  # optimize's, by order
    order = sorted(plan, key=lambda c: rank(CandidateResult(candidate=c, status="skipped",
                                                            reason="")))
    return _first_of_contenders(estimated, [c.id for c in order])


def _first_of_contenders(found: list[Compared], order: list[str]) -> Compared:
    """The estimate that may be the fastest (``select.may_be_fastest``), by the order optimize
    ranks candidates in for a device not at hand among those that may (with nothing kept:
    that order alone)."""
    spans = {r.candidate or "": (r.low_ms or 0.0, r.high_ms if r.high_ms is not None
                                 else math.inf) for r in found}
    best = may_be_fastest(spans, order)
    return next(r for r in found if r.candidate == best)


def _estimated(profile: Profile, done: est.Work, candidate: Candidate, found: dict[str, float],
               calibration: Calibration | None) -> Compared:
    unit, peak = _unit(profile, candidate)
    own = fitted(calibration, candidate.target, candidate.precision)
    if own is not None and calibration is not None:  # its own device's probes (and models)
        label, margin = _calibrated_label(calibration, candidate), 1.0
        guess = own.predict(found, basis=f"latency model fitted on {own.probes} timings on "
                                         f"{calibration.device} (interval: held-out timings'; "
                                         "see docs/latency-model.md for real models)")
    elif peak is not None:  # an accelerator's TOPS: kept CPU corrections do not apply
        label, margin = "roofline (TOPS)", 1.0
        guess = est.estimate(est.roofline(done, profile, candidate.precision, peak_gops=peak),
                             ())
    else:  # its own kept timings, else a neighbour's probes or kept timings, else nothing
        label, ratios, margin = _ratios(profile, candidate)
        lent = None if label == "calibrated" else _borrowed(profile, candidate, found)
        label, guess, margin = lent or (label, est.estimate(est.roofline(
            done, profile, candidate.precision, peak_gops=peak), ratios), margin)
    low, high = guess.low_ms / margin, guess.high_ms * margin
    return Compared(profile=profile.id, name=profile.name, candidate=candidate.id, unit=unit,
                    ms=guess.ms, low_ms=low, high_ms=None if math.isinf(high) else high,
                    calibration=label, basis=guess.basis, memory_mb=_memory_mb(done, candidate),
                    energy_mj=_energy_mj(profile, guess.ms))


def _calibrated_label(calibration: Calibration, candidate: Candidate) -> str:
    """'calibrated (11 probes)', '... + 3 models' deployed there since."""
    wanted = f"{candidate.target}|{candidate.precision}"
    probes, models = len(calibration.timed.get(wanted, ())), len(calibration.models.get(wanted, ()))
    return f"calibrated ({probes} probes" + (f" + {models} models)" if models else ")")


def _borrowed(profile: Profile, candidate: Candidate,
              found: dict[str, float]) -> tuple[str, est.Estimate, float] | None:
    """The nearest calibrated profile's latency model (same arch, by fp32 peak), its estimate
    scaled by their peaks and widened ("from P (probes)"); None when there is none."""
    near = _nearest_fitted(profile, candidate)
    if near is None:
        return None
    other, model, scale = near
    guess = model.predict(found, basis=f"{other}'s latency model ({model.probes} probes), "
                                       f"scaled by the fp32 peaks ({scale:.2f}x)")
    return (f"from {other} (probes)", est.Estimate(
        ms=guess.ms * scale, low_ms=guess.low_ms * scale, high_ms=guess.high_ms * scale,
        basis=guess.basis), BORROWED)


def _nearest_fitted(profile: Profile, candidate: Candidate) -> tuple[str, Fitted, float] | None:
    """The calibrated profile of the same arch nearest by fp32 peak with a fitted model of the
    candidate's runtime and precision, that model, and this profile's slowdown against it."""
    found = []
    for other in calibrated_ids():
        them = _profile(other) if other != profile.id else None
        model = fitted(kept(other), candidate.target, candidate.precision) if them else None
        if them is None or model is None or them.compute.arch != profile.compute.arch:
            continue
        scale = est.peak_gops(them, "fp32") / est.peak_gops(profile, "fp32")
        found.append((abs(math.log(scale)), other, model, scale))
    return min(found, key=lambda f: (f[0], f[1]))[1:] if found else None


def _profile(profile_id: str) -> Profile | None:
    """A calibrated profile's definition: the catalog's (a calibration of another file's
    profile is used only where that file is compared)."""
    try:
        return load_profile(profile_id)
    except UsageError:
        return None


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
    best = "int8" if "int8" in found.precisions else "fp16"  # its TOPS are at its best
    ours = "int8" if candidate.precision.startswith("int8") else candidate.precision
    scale = 1.0 if ours == best else 0.5 if "fp32" not in (ours, best) else 0.25
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
