"""``edge partition``: cost the model on both sides, cut it optimally, split and verify it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import CheckFailed
from edge.profile import Profile

__all__ = ["PartitionOptions", "PartitionReport", "partition", "bandwidth_table"]

#: bandwidths (Mbps) at which the best cut is precomputed, log-spaced 0.1 .. 10,000
SWEEP = tuple(round(10 ** (e / 4), 4) for e in range(-4, 17))
TOLERANCE = 1e-5


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionOptions:
    """What ``edge partition`` was asked."""

    bandwidth_mbps: float | None = None  # default: the edge profile's uplink
    rtt_ms: float | None = None  # default: the edge profile's RTT
    measured: bool = False  # per-node costs measured on this host instead of estimated
    shapes: dict[str, tuple[int, ...]] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionReport:
    """The chosen placement, the alternatives, and where the split models are."""

    out: str
    costs: str
    bandwidth_mbps: float
    rtt_ms: float
    chosen: dict[str, Any]
    all_edge_ms: float
    all_cloud_ms: float
    max_abs_diff: float
    bandwidth_table: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        from dataclasses import asdict

        return asdict(self) | {"bandwidth_table": list(self.bandwidth_table)}


def partition(model_path: Path, edge: Profile, cloud: Profile, out: Path,
              options: PartitionOptions) -> PartitionReport:
    """Cost, solve, split, verify; write head.onnx, tail.onnx and split.yaml into ``out``."""
    from partition.graph import build_graph
    from partition.solve import evaluate, solve
    from partition.split import split_model, verify_split, write_split_yaml

    reference = _named_reference(model_path, options, out)
    graph = build_graph(reference, *_costs(reference, edge, cloud, options.measured))
    bandwidth = options.bandwidth_mbps or edge.link.uplink_mbps
    rtt = options.rtt_ms if options.rtt_ms is not None else edge.link.rtt_ms
    down = edge.link.downlink_mbps
    best = solve(graph, bandwidth, rtt, down)
    names = [n.name for n in graph.nodes]
    split = split_model(reference, set(best.edge), out)
    diff = verify_split(reference, split, _samples(reference))
    if not diff <= TOLERANCE:
        raise CheckFailed(f"head->tail differs from the model by {diff:g} (> {TOLERANCE})")
    table = bandwidth_table(graph, rtt, down)
    costs = "measured on this host" if options.measured else "estimated from MACs and peak GOPS"
    write_split_yaml(out, split, predicted=_predicted(best, costs), bandwidth_table=list(table))
    reference.unlink(missing_ok=True)
    return PartitionReport(
        out=str(out), costs=costs, bandwidth_mbps=bandwidth, rtt_ms=rtt,
        chosen=_predicted(best, costs) | {"cut": list(best.cut),
                                          "edge_nodes": len(best.edge),
                                          "cloud_nodes": len(best.cloud)},
        all_edge_ms=evaluate(graph, names, bandwidth, rtt, down).total_ms,
        all_cloud_ms=evaluate(graph, (), bandwidth, rtt, down).total_ms,
        max_abs_diff=diff, bandwidth_table=table)


def bandwidth_table(graph: Any, rtt_ms: float, downlink_mbps: float) -> tuple[dict[str, Any], ...]:
    """The best cut per bandwidth range, so a running client can switch cut at once."""
    from partition.solve import solve

    rows: list[dict[str, Any]] = []
    for mbps in SWEEP:
        best = solve(graph, mbps, rtt_ms, max(downlink_mbps, mbps))
        cut = sorted(best.cut)
        if rows and rows[-1]["cut"] == cut and rows[-1]["kind"] == best.kind:
            rows[-1]["max_mbps"] = mbps
            continue
        rows.append({"min_mbps": mbps, "max_mbps": mbps, "kind": best.kind, "cut": cut,
                     "edge_nodes": sorted(best.edge), "predicted_ms": round(best.total_ms, 3)})
    return tuple(rows)


def _named_reference(model_path: Path, options: PartitionOptions, out: Path) -> Path:
    """The reference ONNX with every node named (the split works by node name)."""
    import onnx

    from edge.optimize import reference_model
    from partition.graph import load_named

    _, reference = reference_model(model_path, shapes=options.shapes)
    out.mkdir(parents=True, exist_ok=True)
    named = out / ".reference.onnx"
    onnx.save(load_named(reference), str(named))
    return named


def _costs(reference: Path, edge: Profile, cloud: Profile,
           measured: bool) -> tuple[dict[str, float], dict[str, float]]:
    from partition.cost import node_costs

    return (node_costs(reference, edge, measured=measured),
            node_costs(reference, cloud, measured=measured))


def _samples(reference: Path, count: int = 3) -> list[dict[str, np.ndarray]]:
    """Random feeds for the parity check (dynamic dims as 1)."""
    from edge.model import inspect_model

    info = inspect_model(reference)
    rng = np.random.default_rng(0)
    return [{s.name: _random(rng, s.static_shape, s.dtype) for s in info.inputs}
            for _ in range(count)]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _predicted(best: Any, costs: str) -> dict[str, Any]:
    return {"kind": best.kind, "edge_ms": _ms(best.edge_ms), "transfer_ms": _ms(best.transfer_ms),
            "cloud_ms": _ms(best.cloud_ms), "total_ms": _ms(best.total_ms), "costs": costs}


def _ms(value: float) -> float:
    return round(value, 4) if math.isfinite(value) else value
