"""The options of each model of a pack (``edge.core.pack``): the units of a profile, and each
candidate on each unit with its figures, estimated (before anything is converted) or timed on
the device.

Estimates (``--dry-run``, and the check made before connecting): the roofline of
``edge.core.estimate`` at the candidate's precision, for the CPU at each thread count (the
profile's peak shared by its cores), for an accelerator core at its share of the
accelerator's TOPS. The check before connecting uses the optimistic end (compute at peak, no
memory traffic, no overhead: a bound no runtime beats) and the smallest memory, so a pack it
refuses cannot be met by any plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edge.core import estimate as est
from edge.core.errors import UsageError
from edge.core.pack import CPU, Option, Unit
from edge.core.plan import BYTES_PER_PARAM, CANNOT_CONVERT_HERE, Planned
from edge.core.profile import Accelerator, Profile
from edge.core.values import ORIGINAL, ModelInfo, TensorSpec
from targets import get_target

__all__ = ["BASE_MB", "P99_OVER_P50", "accelerator_of", "estimated_options", "thread_counts",
           "units_of"]

#: Memory a runtime takes beside the model's weights, MB (estimate).
BASE_MB = 40.0
#: p99 over p50 assumed for an estimate (nothing is timed yet).
P99_OVER_P50 = 1.3
#: Activations held at once, as a multiple of the model's largest input and output (estimate).
ACTIVATIONS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class Figures:
    """A model's work and weights, read once."""

    work: est.Work
    params: int
    io_bytes: int


def units_of(profile: Profile, cores: int | None = None) -> tuple[Unit, ...]:
    """The CPU (``cores``: the device's when known, else the profile's), then each
    accelerator core: an NPU of 3 cores is npu0, npu1, npu2; the profile's GPU entries (one
    chip, reached through several runtimes) are one unit."""
    found = [Unit(name=CPU, kind=CPU, cores=cores or profile.compute.cores)]
    for accel in profile.accelerators:
        for name in _accel_units(profile, accel):
            if all(u.name != name for u in found):
                found.append(Unit(name=name, kind=accel.kind, runtime=accel.runtime))
    return tuple(found)


def _accel_units(profile: Profile, accel: Accelerator) -> list[str]:
    same = [a for a in profile.accelerators if a.kind == accel.kind]
    if accel.kind == "gpu":
        return ["gpu"]
    start = sum(a.cores for a in same[:same.index(accel)])
    return [f"{accel.kind}{start + i}" for i in range(accel.cores)]


def accelerator_of(profile: Profile, runtime: str) -> Accelerator | None:
    """The profile's accelerator a runtime (or target) reaches, if it is one's."""
    return next((a for a in profile.accelerators if a.runtime == runtime), None)


def thread_counts(profile: Profile, cores: int) -> tuple[int, ...]:
    """The CPU thread counts worth planning: 1 up to the profile's threads (or the cores)."""
    return tuple(range(1, min(profile.compute.threads or cores, cores) + 1))


def estimated_options(profile: Profile, info: ModelInfo, name: str,
                      plan: Sequence[Planned], cores: int, *,
                      optimistic: bool = False) -> list[Option]:
    """Every kept candidate of ``plan`` on every unit it can use, with estimated figures (also
    those this host lacks the toolchain for: the device could run them)."""
    figures = _figures(info)
    options = []
    for planned in plan:
        if not planned.keep and not planned.reason.startswith(CANNOT_CONVERT_HERE):
            continue
        options += _candidate_options(profile, figures, name, planned, cores, optimistic)
    return options


def _figures(info: ModelInfo) -> Figures:
    io = [*info.inputs, *info.outputs]
    return Figures(work=_work(info), params=info.params,
                   io_bytes=max((_bytes(t) for t in io), default=0))


def _work(info: ModelInfo) -> est.Work:
    """The model's work from its ONNX file; from the figures a manifest keeps when the file is
    not here (a bundle made elsewhere): its MACs, weights, inputs and outputs, op count."""
    try:
        return est.work(info.path)
    except Exception:  # noqa: BLE001 - onnx's own errors: the manifest's figures instead
        io = sum(_bytes(t) // 4 for t in (*info.inputs, *info.outputs))
        return est.Work(macs=info.macs, weight_values=info.params, other_values=io,
                        nodes=max(sum(info.ops.values()), 1))


def _bytes(spec: TensorSpec) -> int:
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]
    return 4 * math.prod(dims)


def _candidate_options(profile: Profile, figures: Figures, name: str, planned: Planned,
                       cores: int, optimistic: bool) -> list[Option]:
    cand = planned.candidate
    accel = None if cand.target == ORIGINAL else _accelerator(profile, cand.target)
    peak = _peak_mb(figures, cand.precision, optimistic)
    if accel is None:
        return [_option(name, cand.id, CPU, t, _cpu_ms(profile, figures, cand.precision, t,
                                                       cores, optimistic), peak, optimistic)
                for t in thread_counts(profile, cores)]
    ms = _accel_ms(profile, accel, figures, cand.precision, optimistic)
    if ms is None:
        return []
    return [_option(name, cand.id, unit, 1, ms, peak, optimistic)
            for unit in _accel_units(profile, accel)]


def _accelerator(profile: Profile, target: str) -> Accelerator | None:
    try:
        caps = get_target(target).caps
    except (ImportError, UsageError):
        return None
    if not caps.accelerator:
        return None
    return accelerator_of(profile, target) or accelerator_of(profile, caps.runtime)


def _option(model: str, candidate: str, unit: str, threads: int, ms: float, peak: float,
            optimistic: bool) -> Option:
    source = ("estimate: the bound no runtime beats" if optimistic
              else "estimate: roofline of the profile's figures")
    return Option(model=model, candidate=candidate, unit=unit, threads=threads, p50_ms=ms,
                  p99_ms=ms if optimistic else ms * P99_OVER_P50, peak_mb=peak, source=source)


def _cpu_ms(profile: Profile, figures: Figures, precision: str, threads: int, cores: int,
            optimistic: bool) -> float:
    line = est.roofline(figures.work, profile, precision)
    compute = line.compute_ms * profile.compute.cores / threads  # the peak is all cores'
    if optimistic:
        return line.compute_ms * profile.compute.cores / min(threads, cores)
    return compute + line.memory_ms + line.nodes * est.NODE_OVERHEAD_MS


def _accel_ms(profile: Profile, accel: Accelerator, figures: Figures, precision: str,
              optimistic: bool) -> float | None:
    """The roofline on one core of the accelerator (its TOPS shared by its cores; half at
    fp16, a quarter at fp32); None when the profile gives no TOPS."""
    if accel.tops is None:
        return None
    share = {"fp16": 0.5, "bf16": 0.5, "fp32": 0.25}.get(precision, 1.0)
    ops = accel.tops * 1e12 * share / accel.cores
    compute = 2.0 * figures.work.macs / ops * 1e3
    if optimistic:
        return compute
    line = est.roofline(figures.work, profile, precision)
    return compute + line.memory_ms + line.nodes * est.NODE_OVERHEAD_MS


def _peak_mb(figures: Figures, precision: str, optimistic: bool) -> float:
    weights = figures.params * BYTES_PER_PARAM.get(precision, 4) / 1e6
    if optimistic:
        return weights
    return BASE_MB + weights + ACTIVATIONS * figures.io_bytes / 1e6
