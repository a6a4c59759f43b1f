"""Per-layer precision by measurement: which layers of an int8 artifact stay float.

The int8 and fp32 artifacts of one target are timed per layer by the runtime that runs them
(``devices.layers``: OpenVINO's performance counters); layers of a kind (the runtime's
operator type) whose int8 kernels are, together, not ``MIN_GAIN`` faster than their float ones
(depthwise convolutions on many CPUs) gain nothing from int8 and pay its quantize/dequantize,
so the plan keeps that kind float. The plan is a candidate like any other: converted,
verified, then timed beside all-int8 and fp32, and chosen only if it is the fastest that keeps
fidelity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from edge.core.model import layer_owner, node_bases
from edge.core.values import ModelInfo

__all__ = ["MIN_GAIN", "LayerChoice", "describe", "layer_plan", "slow_kinds"]

#: int8 must take at most this share of a kind's float time to keep that kind int8.
MIN_GAIN = 0.9
#: Profiled runs of each artifact.
RUNS = 20
#: Layers named in a note (the rest are counted).
SHOWN = 6


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerChoice:
    """A reference node's layer: its kind and its int8 and float times."""

    node: str
    kind: str  # the runtime's operator type of its int8 layer
    int8_ms: float
    float_ms: float


def layer_plan(int8: Path, fp32: Path, model: ModelInfo, *, threads: int) -> list[LayerChoice]:
    """The layers to keep float: every layer of a kind whose int8 layers, together, are not
    ``MIN_GAIN`` faster than in float (a kind stays float whole, so the model does not switch
    between int8 and float at every other layer)."""
    from devices.layers import measure_layers

    quantized = measure_layers(int8, threads=threads, runs=RUNS).layers
    floats = {t.name: t.ms for t in measure_layers(fp32, threads=threads, runs=RUNS).layers}
    bases = node_bases(onnx.load(model.path, load_external_data=False))
    return slow_kinds([LayerChoice(node=bases[key], kind=t.op, int8_ms=t.ms,
                                   float_ms=floats[t.name]) for t in quantized
                       if t.name in floats and (key := layer_owner(t.name, bases)) is not None])


def slow_kinds(layers: Sequence[LayerChoice]) -> list[LayerChoice]:
    """The layers of the kinds int8 does not speed up by ``MIN_GAIN``, most slowed first."""
    slow = {kind for kind in {c.kind for c in layers} if _no_gain(_of(layers, kind))}
    return sorted((c for c in layers if c.kind in slow), key=lambda c: c.float_ms - c.int8_ms)


def _of(layers: Sequence[LayerChoice], kind: str) -> list[LayerChoice]:
    return [c for c in layers if c.kind == kind]


def _no_gain(layers: Sequence[LayerChoice]) -> bool:
    """Whether int8 takes more than ``MIN_GAIN`` of the float time over these layers."""
    return sum(c.int8_ms for c in layers) > MIN_GAIN * sum(c.float_ms for c in layers)


def describe(plan: Sequence[LayerChoice], threads: int) -> str:
    """The manifest note: which layers stay float and the times that decided it."""
    kinds = "; ".join(f"{kind} x{len(of)}: int8 {sum(c.int8_ms for c in of):.3f} ms vs float "
                      f"{sum(c.float_ms for c in of):.3f} ms"
                      for kind in sorted({c.kind for c in plan}) if (of := _of(plan, kind)))
    names = ", ".join(c.node for c in plan[:SHOWN])
    more = f" and {len(plan) - SHOWN} more" if len(plan) > SHOWN else ""
    return (f"per-layer plan: {len(plan)} layer(s) kept float, of the kinds whose int8 layers "
            f"measured less than {100 * (1 - MIN_GAIN):.0f}% faster than float on this host "
            f"({threads} thread{'s' if threads > 1 else ''}, {RUNS} profiled runs each) - "
            f"{kinds}: {names}{more}")
