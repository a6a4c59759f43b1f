"""Per-layer precision by measurement: which layers of an int8 artifact stay float.

Two ways, as the target declares (``Capabilities.layer_plan``):

* ``"layers"`` (OpenVINO): the int8 and fp32 artifacts are timed per layer by the runtime that
  runs them (``devices.layers``: OpenVINO's performance counters); layers of a kind (the
  runtime's operator type) whose int8 kernels are, together, not ``MIN_GAIN`` faster than
  their float ones (depthwise convolutions on many CPUs) gain nothing from int8 and pay its
  quantize/dequantize, so the plan keeps that kind float (``layer_plan``).
* ``"kinds"`` (ONNX Runtime): its optimizer fuses a QDQ model's quantize/dequantize pairs into
  int8 kernels whose names no longer map to the model's nodes, so per-node times say nothing
  of a kind's int8 cost. Instead the whole model is timed with each kind of layer between the
  int8 convolutions and matrix products in float, one kind at a time and all of them at once,
  interleaved with all-int8; the plan keeps float the kinds whose trial was ``TRIAL_GAIN``
  faster (``kind_trials``, ``kind_plan``).

The plan is a candidate like any other: converted, verified, then timed beside all-int8 and
fp32, and chosen only if it is the fastest that keeps fidelity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from edge.core.model import layer_owner, node_bases
from edge.core.values import ModelInfo

__all__ = ["ALL_KINDS", "DOING", "MIN_GAIN", "TRIAL_GAIN", "KindTrial", "LayerChoice",
           "MixedPlan", "by_kinds", "by_layers", "describe", "describe_trial", "kind_plan",
           "kind_trials", "layer_plan", "slow_kinds", "trial_kinds"]

#: int8 must take at most this share of a kind's float time to keep that kind int8.
MIN_GAIN = 0.9
#: Profiled runs of each artifact.
RUNS = 20
#: Layers named in a note (the rest are counted).
SHOWN = 6
#: A kind trial must time at most this share of all-int8 for its kinds to stay float.
TRIAL_GAIN = 0.97
#: The trial with every kind in float at once.
ALL_KINDS = "every kind"
#: Kinds int8 is for (their weights and products), and kinds that only move data: not tried.
_NOT_TRIED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Reshape", "Flatten",
                        "Squeeze", "Unsqueeze", "Transpose", "Identity", "QuantizeLinear",
                        "DequantizeLinear"})
#: Interleaved rounds of the trials' timing (fewer if the first says they take longer).
TRIAL_ROUNDS = 7
TRIAL_BUDGET_S = 20.0


#: What the progress line says while each way plans.
DOING = {"layers": "timing int8 and fp32 per layer",
         "kinds": "timing the model with each kind of layer in float"}


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


def by_kinds(int8: Path, convert: Callable[[tuple[str, ...]], Path], *,
             threads: int) -> MixedPlan | str:
    """The plan from whole-model trials (``kind_trials``), or why there is none."""
    kinds = trial_kinds(int8)
    if not kinds:
        return "the int8 artifact runs no kind of layer in int8 but convolutions and products"
    trials = kind_trials(int8, kinds, convert, threads=threads)
    plan = kind_plan(trials)
    if plan is None:
        return (f"no kind of layer in float made the model {100 * (1 - TRIAL_GAIN):.0f}% "
                f"faster than all-int8 ({trials[0].int8_ms:.3f} ms) here: {_times(trials)}")
    return MixedPlan(nodes=plan.nodes, note=describe_trial(plan, trials, threads))


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


@dataclass(frozen=True, kw_only=True, slots=True)
class KindTrial:
    """The whole int8 model timed with ``kinds`` of layer (``nodes``) in float, beside
    all-int8 in the same interleaved rounds (medians)."""

    label: str  # the kind, or ALL_KINDS
    kinds: tuple[str, ...]
    nodes: tuple[str, ...]
    trial_ms: float
    int8_ms: float


def trial_kinds(int8: Path) -> dict[str, tuple[str, ...]]:
    """Kind -> nodes of the kinds a QDQ artifact runs in int8 (a node fed by a
    DequantizeLinear), but for the compute kinds int8 is for and those that only move data."""
    graph = onnx.load(int8, load_external_data=False).graph
    dequantized = {out for n in graph.node if n.op_type == "DequantizeLinear" for out in n.output}
    kinds: dict[str, list[str]] = {}
    for node in graph.node:
        if node.op_type not in _NOT_TRIED and dequantized.intersection(node.input) and node.name:
            kinds.setdefault(node.op_type, []).append(node.name)
    return {kind: tuple(nodes) for kind, nodes in sorted(kinds.items())}


def kind_trials(int8: Path, kinds: Mapping[str, tuple[str, ...]],
                convert: Callable[[tuple[str, ...]], Path], *, threads: int) -> list[KindTrial]:
    """Each kind in float alone, and all of them at once (with two kinds or more), converted
    by ``convert(nodes kept float)`` and timed beside all-int8 on this host."""
    from devices.measure import Rounds, time_files_here

    groups: dict[str, tuple[str, ...]] = {kind: (kind,) for kind in kinds}
    if len(kinds) > 1:
        groups[ALL_KINDS] = tuple(kinds)
    nodes = {label: tuple(n for k in group for n in kinds[k]) for label, group in groups.items()}
    files = {label: convert(kept) for label, kept in nodes.items()}
    rounds = Rounds(rounds=TRIAL_ROUNDS, calls=20, warmup=3, idle_s=0.0,
                    budget_s=TRIAL_BUDGET_S, min_rounds=3)
    timed = time_files_here({"int8": int8, **files}, rounds, threads=threads)
    return [KindTrial(label=label, kinds=groups[label], nodes=nodes[label],
                      trial_ms=timed[label].p50_ms, int8_ms=timed["int8"].p50_ms)
            for label in files]


def kind_plan(trials: Sequence[KindTrial]) -> KindTrial | None:
    """The faster of: the kinds whose trial alone was ``TRIAL_GAIN`` faster than all-int8
    (their summed gain, as a trial of them together was not timed), and every kind at once
    when that trial was; None when neither gains."""
    alone = [t for t in trials if t.label != ALL_KINDS and _gains(t)]
    together = [t for t in trials if t.label == ALL_KINDS and _gains(t)]
    picked = [] if not alone else [KindTrial(
        label=", ".join(t.label for t in alone), kinds=tuple(k for t in alone for k in t.kinds),
        nodes=tuple(n for t in alone for n in t.nodes), int8_ms=alone[0].int8_ms,
        trial_ms=alone[0].int8_ms - sum(t.int8_ms - t.trial_ms for t in alone))]
    return min([*picked, *together], key=lambda t: t.trial_ms, default=None)


def _gains(trial: KindTrial) -> bool:
    return trial.trial_ms <= TRIAL_GAIN * trial.int8_ms


def describe_trial(plan: KindTrial, trials: Sequence[KindTrial], threads: int) -> str:
    """The manifest note: the kinds kept float, and every trial's time."""
    times = _times(trials)
    estimate = " (estimated: the sum of their gains)" if len(plan.kinds) > 1 and \
        plan.label != ALL_KINDS else ""
    return (f"per-kind plan: {len(plan.nodes)} layer(s) of the kind(s) {', '.join(plan.kinds)} "
            f"kept float - the whole model with them in float timed {plan.trial_ms:.3f} ms"
            f"{estimate} vs all-int8 {plan.int8_ms:.3f} ms on this host ({threads} "
            f"thread{'s' if threads > 1 else ''}, interleaved trials, at least "
            f"{100 * (1 - TRIAL_GAIN):.0f}% faster to count); every trial: {times}")


def _times(trials: Sequence[KindTrial]) -> str:
    return "; ".join(f"{t.label} in float {t.trial_ms:.3f} ms" for t in trials)
