"""A candidate's latency on the profile's device, estimated before anything is converted: the
first piece of a latency model.

Per node of the reference ONNX: its multiply-accumulates against the profile's peak for the
candidate's precision, and the bytes it moves (weights and activations at that precision)
against a memory bandwidth; summed, plus a dispatch overhead per node. That roofline figure is
then corrected by the timings edge kept of earlier candidates of the same runtime and precision
for the same profile (``Corrections``: measured over estimated), which gives an interval; with
kept timings of fewer than ``MIN_KEPT`` models the interval is open above (nothing known of the
runtime's efficiency) and its low end is the compute at peak alone, a bound no runtime beats.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from edge.core.model import load_onnx, node_macs, value_shapes
from edge.core.profile import Profile

__all__ = ["MIN_KEPT", "Corrections", "Estimate", "Roofline", "Work", "estimate", "key",
           "inferred", "peak_gops", "roofline", "value_bytes", "work"]

#: Guessed memory bandwidth, GB/s, when a profile says nothing about it.
MEMORY_GBPS = 10.0
#: Fixed per-node dispatch overhead, ms.
NODE_OVERHEAD_MS = 0.002
#: fp32 FLOP per cycle per core assumed when a profile has no fp32 peak.
FLOPS_PER_CYCLE = 8.0
#: Bytes of a weight and of an activation value at each precision.
_BYTES = {"int8": (1, 1), "int8-dynamic": (1, 4), "fp16": (2, 2), "bf16": (2, 2),
          "fp32": (4, 4)}
#: Models with kept timings of a (profile, runtime, precision) before they correct its
#: estimates ...
MIN_KEPT = 3
#: ... and the margin their spread is widened by on each side (models differ).
MARGIN = 1.25
#: Models kept per key (the newest).
MAX_KEPT = 50


@dataclass(frozen=True, kw_only=True, slots=True)
class Roofline:
    """A model's work at one precision on one profile: ms at peak compute, ms moving bytes."""

    compute_ms: float
    memory_ms: float
    nodes: int

    @property
    def ms(self) -> float:
        return self.compute_ms + self.memory_ms + self.nodes * NODE_OVERHEAD_MS


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """An estimated latency: the figure, its interval (``high_ms`` inf: unknown) and what it
    rests on."""

    ms: float
    low_ms: float
    high_ms: float
    basis: str

    def to_json(self) -> dict[str, object]:
        high = None if math.isinf(self.high_ms) else round(self.high_ms, 4)
        return {"ms": round(self.ms, 4), "low_ms": round(self.low_ms, 4), "high_ms": high,
                "basis": self.basis}


def _peak(profile: Profile, precision: str) -> float:
    return peak_gops(profile, precision)


def peak_gops(profile: Profile, precision: str) -> float:
    """The profile's peak GOPS at ``precision``: its own figure, else fp32's (int8: twice)."""
    peaks = profile.compute.peak_gops
    fp32 = peaks.get("fp32") or (profile.compute.cores * profile.compute.clock_ghz
                                 * FLOPS_PER_CYCLE)
    if precision.startswith("int8"):
        return float(peaks.get("int8") or 2 * fp32)
    return float(peaks.get(precision) or fp32)  # type: ignore[call-overload]


@dataclass(frozen=True, kw_only=True, slots=True)
class Work:
    """What a model does, whatever its precision: MACs, and the values its nodes read and
    write (weights apart from activations), counted per node."""

    macs: int
    weight_values: int
    other_values: int
    nodes: int


def inferred(model_path: str | Path) -> tuple[onnx.ModelProto, dict[str, tuple[int, ...]],
                                              set[str]]:
    """The ONNX model at ``model_path`` with its shapes inferred (symbolic dims as 1; as
    declared where onnx cannot infer them), every value's shape, and its weights' names."""
    model = load_onnx(model_path)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001, S110 - onnx's own errors vary: shapes as declared
        pass
    return model, value_shapes(model), {init.name for init in model.graph.initializer}


def work(model_path: str | Path) -> Work:
    """The work of the ONNX model at ``model_path`` (shapes inferred; symbolic dims as 1)."""
    model, shapes, weights = inferred(model_path)
    names = [name for node in model.graph.node for name in (*node.input, *node.output) if name]
    return Work(macs=sum(node_macs(node, shapes) for node in model.graph.node),
                weight_values=sum(_numel(shapes.get(n, ())) for n in names if n in weights),
                other_values=sum(_numel(shapes.get(n, ())) for n in names if n not in weights),
                nodes=len(model.graph.node))


def roofline(done: Work, profile: Profile, precision: str,
             peak_gops: float | None = None) -> Roofline:
    """The roofline figures of ``done`` at ``precision`` on ``profile`` (``peak_gops``: the
    unit's, when not the CPU's figure for the precision)."""
    weight_bytes, values = value_bytes(precision)
    moved = done.weight_values * weight_bytes + done.other_values * values
    peak = peak_gops or _peak(profile, precision)
    return Roofline(compute_ms=2.0 * done.macs / (peak * 1e9) * 1e3,
                    memory_ms=moved / (MEMORY_GBPS * 1e9) * 1e3, nodes=done.nodes)


def value_bytes(precision: str) -> tuple[int, int]:
    """Bytes of a weight and of an activation value at ``precision``."""
    return _BYTES.get(precision, (4, 4))


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


class Corrections:
    """Kept ratios of measured to estimated latency per (profile, runtime, precision), one per
    model (its latest: the same model timed again is one model, not more evidence), in one JSON
    file of the cache (written atomically; a torn or foreign file reads as empty)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, dict[str, float]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): {str(m): float(x) for m, x in v.items()
                         if isinstance(x, (int, float)) and math.isfinite(x) and x > 0}
                for k, v in data.items() if isinstance(v, dict)}

    def ratios(self, key: str) -> list[float]:
        """The kept ratios of ``key``, one per model."""
        return list(self._read().get(key, {}).values())

    def add(self, found: Mapping[str, float], model: str) -> None:
        """Keep more ratios (key -> measured over estimated) of the model ``model`` (its
        sha256)."""
        data = self._read()
        for key, ratio in found.items():
            if math.isfinite(ratio) and ratio > 0:
                kept = {m: r for m, r in data.get(key, {}).items() if m != model[:16]}
                data[key] = dict(list(kept.items())[-(MAX_KEPT - 1):]) | {model[:16]: ratio}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".estimates-")
            with os.fdopen(handle, "w") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except OSError:
            return  # a cache that cannot be written keeps nothing; estimates stay open


def key(profile: Profile, target: str, precision: str) -> str:
    """The corrections key of a candidate on a profile."""
    return f"{profile.id}|{target}|{precision}"


def estimate(line: Roofline, ratios: Sequence[float]) -> Estimate:
    """The estimate of a roofline, corrected by kept ``ratios`` when there are enough."""
    if len(ratios) < MIN_KEPT:
        return Estimate(ms=line.ms, low_ms=line.compute_ms, high_ms=math.inf,
                        basis="roofline of the profile's peak figures (no kept timings yet)")
    ordered = sorted(ratios)
    middle = ordered[len(ordered) // 2]
    return Estimate(ms=line.ms * middle, low_ms=line.ms * ordered[0] / MARGIN,
                    high_ms=line.ms * ordered[-1] * MARGIN,
                    basis=f"roofline corrected by kept timings of {len(ordered)} models")
