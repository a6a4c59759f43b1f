"""A device's latency model for one runtime and precision, fitted on its probe timings.

A model's **features** are read from its ONNX graph (shapes inferred): its dense-convolution,
depthwise-convolution and matrix-product MACs, the activation values its layers with MACs read
and write and those the other nodes do, its node count, and the call itself. A device's cost
of each is fitted on the eleven probe models' timings (``probes``), non-negative and in
relative error (a 0.1 ms probe weighs as much as a 50 ms one). The interval is conformal:
from each probe's error when the others alone fit the model (leave-one-out), in log space,
the bound that held ``COVERAGE`` (80 %) of the held-out probes, on both sides of the
prediction (it holds the probes, not every model: docs/latency-model.md measures that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from edge.core.estimate import Estimate, inferred
from edge.core.json_value import JsonValue
from edge.core.model import node_macs

__all__ = ["FEATURES", "Fitted", "Timed", "features", "fit"]

#: What a model's latency is fitted on, each per million (MACs, values) or per one.
FEATURES = ("call", "nodes", "values_m", "layer_values_m", "dense_mmacs", "depthwise_mmacs",
            "matmul_mmacs")
#: The share of held-out probes the interval must hold (split conformal: with n probes, the
#: ceil((n + 1) * COVERAGE)-th smallest held-out log error bounds it).
COVERAGE = 0.8
#: Operators whose MACs are a convolution's (the rest with MACs: matrix products, RNNs).
CONVOLUTIONS = frozenset({"Conv", "ConvInteger", "QLinearConv", "ConvTranspose"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Timed(JsonValue):
    """One probe (or model) as timed on the device: its features and median ms."""

    name: str
    features: dict[str, float]
    ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Fitted(JsonValue):
    """A device's fitted costs (ms per feature unit) and its conformal log-error bound."""

    costs: dict[str, float]
    bound: float  # the |log(measured / predicted)| that held COVERAGE of the probes held out
    probes: int
    loo_errors: tuple[float, ...]  # each held-out probe's relative error, signed

    def predict(self, found: Mapping[str, float], basis: str) -> Estimate:
        """The estimate of a model with ``found`` features, with the interval."""
        ms = max(sum(self.costs.get(k, 0.0) * found.get(k, 0.0) for k in FEATURES), 1e-6)
        spread = math.exp(self.bound)
        return Estimate(ms=ms, low_ms=ms / spread, high_ms=ms * spread, basis=basis)


def features(path: str | Path) -> dict[str, float]:
    """The features of the ONNX model at ``path`` (symbolic dims as 1)."""
    model, shapes, weights = inferred(path)
    found = dict.fromkeys(FEATURES, 0.0) | {"call": 1.0, "nodes": float(len(model.graph.node))}
    for node in model.graph.node:
        macs = node_macs(node, shapes)
        found[_kind(node)] += macs / 1e6
        moved = sum(_numel(shapes.get(n, ())) for n in (*node.input, *node.output)
                    if n and n not in weights) / 1e6
        found["layer_values_m" if macs else "values_m"] += moved
    return found


def _kind(node: onnx.NodeProto) -> str:
    if node.op_type not in CONVOLUTIONS:
        return "matmul_mmacs"
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return "depthwise_mmacs" if group > 1 else "dense_mmacs"


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def fit(timed: Sequence[Timed]) -> Fitted:
    """The non-negative costs that best predict ``timed`` in relative error, and the
    leave-one-out bound (needs at least three timings)."""
    if len(timed) < 3:
        raise ValueError("a latency model needs at least three timed probes")
    costs = _solve(timed)
    held_out = [_held_out(timed, k) for k in range(len(timed))]
    logs = sorted(abs(math.log1p(max(e, -0.999999))) for e in held_out)
    rank = min(len(logs), math.ceil((len(logs) + 1) * COVERAGE)) - 1
    return Fitted(costs=costs, bound=logs[rank], probes=len(timed), loo_errors=tuple(held_out))


def _held_out(timed: Sequence[Timed], k: int) -> float:
    """The relative error on probe ``k`` of the costs fitted on the others."""
    costs = _solve([t for j, t in enumerate(timed) if j != k])
    predicted = sum(costs[f] * timed[k].features.get(f, 0.0) for f in FEATURES)
    return timed[k].ms / max(predicted, 1e-9) - 1.0


def _solve(timed: Sequence[Timed]) -> dict[str, float]:
    """Non-negative least squares on relative error: an active set, dropping the most
    negative cost and solving again (at most one pass per feature)."""
    rows = np.array([[t.features.get(f, 0.0) / t.ms for f in FEATURES] for t in timed])
    active = [k for k in range(len(FEATURES)) if rows[:, k].any()]
    solution = np.zeros(len(FEATURES))
    while active:
        found, *_ = np.linalg.lstsq(rows[:, active], np.ones(len(timed)), rcond=None)
        if (found >= 0).all():
            solution[active] = found
            break
        active.pop(int(np.argmin(found)))
    return {f: float(solution[k]) for k, f in enumerate(FEATURES)}
