"""Per-layer precision by measurement: which layers of an int8 artifact stay float.

Two ways, as the target declares (``Capabilities.layer_plan``):

* ``"layers"`` (OpenVINO): the int8 and fp32 artifacts are timed per layer by the runtime that
  runs them (``devices.layers``: OpenVINO's performance counters); layers of a kind (the
  runtime's operator type) whose int8 kernels are, together, not ``MIN_GAIN`` faster than
  their float ones (depthwise convolutions on many CPUs) gain nothing from int8 and pay its
  quantize/dequantize, so the plan keeps that kind float (``layer_plan``).
* ``"kinds"`` (ONNX Runtime): its optimizer fuses a QDQ model's quantize/dequantize pairs into
  int8 kernels whose names no longer map to the model's nodes, so per-node times say nothing
  of a kind's int8 cost. Instead the whole model is converted once more with every layer its
  quantizer runs in int8 between the convolutions and matrix products (LeakyRelu, Add,
  MaxPool, ...) kept float, and timed beside all-int8; the plan keeps them float when that
  trial was faster by more than the tie band the choice uses (``TRIAL_GAIN``: a plan within
  it could never be chosen over all-int8) (``float_trial``; the layers:
  ``targets.onnxruntime.float_kinds``).

The plan is a candidate like any other: converted, verified, then timed beside all-int8 and
fp32, and chosen only if it is the fastest that keeps fidelity, beyond the tie band.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from devices.measure import Rounds, time_files_here
from edge.core.model import layer_owner, node_bases
from edge.core.select import BEYOND_TIE, TIE
from edge.core.values import ModelInfo
from targets.layers import measure_layers
from targets.onnxruntime import float_kinds

__all__ = ["DOING", "MIN_GAIN", "TRIAL_GAIN", "KindTrial", "LayerChoice", "MixedPlan",
           "by_kinds", "by_layers", "describe", "describe_trial", "float_trial", "layer_plan",
           "slow_kinds"]

#: int8 must take at most this share of a kind's float time to keep that kind int8.
MIN_GAIN = 0.9
#: Profiled runs of each artifact.
RUNS = 20
#: Layers named in a note (the rest are counted).
SHOWN = 6
#: The trial must time at most this share of all-int8 for its layers to stay float: faster by
#: more than the choice's tie band, or the plan could never be chosen over all-int8.
TRIAL_GAIN = BEYOND_TIE
#: The trial's timing: interleaved rounds, calls of each model in all.
TRIAL_ROUNDS, TRIAL_CALLS = 7, 140
TRIAL_BUDGET_S = 20.0


#: What the progress line says while each way plans.
DOING = {"layers": "timing int8 and fp32 per layer",
         "kinds": "converting and timing the model with the layers between its convolutions "
                  "in float"}


@dataclass(frozen=True, kw_only=True, slots=True)
class MixedPlan:
    """The reference nodes a mixed plan keeps float, and the manifest note that says why."""

    nodes: tuple[str, ...]
    note: str


def by_layers(int8: Path, fp32: Path, model: ModelInfo, *, threads: int) -> MixedPlan | str:
    """The plan from per-layer times (``layer_plan``), or why there is none."""
    plan = layer_plan(int8, fp32, model, threads=threads)
    if not plan:
        return (f"int8 is at least {100 * (1 - MIN_GAIN):.0f}% faster than float on every "
                "kind of layer here: nothing to keep float")
    return MixedPlan(nodes=tuple(c.node for c in plan), note=describe(plan, threads))


def by_kinds(int8: Path, model: ModelInfo, kept: tuple[str, ...],
             convert: Callable[[tuple[str, ...]], Path], *, threads: int) -> MixedPlan | str:
    """The plan from a whole-model trial (``float_trial``), or why there is none."""
    kinds = float_kinds(onnx.load(model.path, load_external_data=False), kept)
    if not kinds:
        return "no layer runs in int8 here but convolutions, matrix products and data moves"
    trial = float_trial(int8, kinds, convert, threads=threads)
    if trial.trial_ms > TRIAL_GAIN * trial.int8_ms:
        return (f"with {_kinds(trial)} in float the model took {trial.trial_ms:.3f} ms against "
                f"all-int8's {trial.int8_ms:.3f} ms here: not {100 * TIE:.0f}% faster, the "
                "margin it needs to be chosen over all-int8")
    return MixedPlan(nodes=trial.nodes, note=describe_trial(trial, threads))


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


@dataclass(frozen=True, kw_only=True, slots=True)
class KindTrial:
    """The whole int8 model timed with ``kinds`` of layer (``nodes``) in float, beside
    all-int8 in the same interleaved rounds (medians)."""

    kinds: tuple[tuple[str, int], ...]  # (kind, layers of it kept float)
    nodes: tuple[str, ...]
    trial_ms: float
    int8_ms: float


def float_trial(int8: Path, kinds: Mapping[str, tuple[str, ...]],
                convert: Callable[[tuple[str, ...]], Path], *, threads: int) -> KindTrial:
    """``kinds`` all in float, converted by ``convert(nodes kept float)`` and timed beside
    all-int8 on this host."""
    nodes = tuple(n for of in kinds.values() for n in of)
    rounds = Rounds(rounds=TRIAL_ROUNDS, calls=TRIAL_CALLS, warmup=3, idle_s=0.0,
                    budget_s=TRIAL_BUDGET_S, min_rounds=3)
    timed = time_files_here({"int8": int8, "trial": convert(nodes)}, rounds, threads=threads,
                            observe=False)
    return KindTrial(kinds=tuple((k, len(of)) for k, of in kinds.items()), nodes=nodes,
                     trial_ms=timed["trial"].p50_ms, int8_ms=timed["int8"].p50_ms)


def describe_trial(trial: KindTrial, threads: int) -> str:
    """The manifest note: the kinds kept float and the times that decided it."""
    return (f"per-kind plan: {len(trial.nodes)} layer(s) kept float ({_kinds(trial)}) - the "
            f"whole model with them in float timed {trial.trial_ms:.3f} ms vs all-int8 "
            f"{trial.int8_ms:.3f} ms on this host ({threads} thread{'s' if threads > 1 else ''}, "
            f"interleaved; more than {100 * TIE:.0f}% faster to count)")


def _kinds(trial: KindTrial) -> str:
    return ", ".join(f"{kind} x{count}" for kind, count in trial.kinds)
