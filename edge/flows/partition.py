"""``edge partition``: cost the model on both sides, cut it optimally, split and verify it."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from devices.connect import DeviceTarget
from edge.core import progress
from edge.core.cache import cache_root
from edge.core.data import load_dataset
from edge.core.errors import CheckFailed, UsageError
from edge.core.files import staged_dir
from edge.core.intake import dynamic_inputs, pin_from_sample, reference_model
from edge.core.model import inspect_model, load_named, ort_refusal, unrunnable
from edge.core.profile import Profile
from edge.flows.deploy import measuring_device
from partition.compress import check_mode, compress_split
from partition.cost import measure_costs_on_device, node_costs
from partition.graph import SINK, SOURCE, Graph, build_graph, with_compression
from partition.solve import OBJECTIVES, EnergyModel, ObjectiveName, energy_model, evaluate, solve
from partition.split import (
    CutOption,
    SplitModels,
    model_outputs,
    run_split,
    split_model,
    verify_split,
    write_split_yaml,
)

__all__ = ["PartitionOptions", "PartitionReport", "partition", "bandwidth_table"]

#: bandwidths (Mbps) at which the best cut is precomputed, log-spaced 0.1 .. 10,000
SWEEP = tuple(round(10 ** (e / 4), 4) for e in range(-4, 17))
TOLERANCE = 1e-5
#: where the cuts other than the chosen one are written, inside the split directory
CUTS_DIR = "cuts"
#: device measurements are repeated in this many agent processes and the medians kept: one
#: process's timing on a shared or throttled board drifts by 10-20 %
DEVICE_REPEATS = 3
#: the chosen cut's tail is served under this name; the others as MODEL-<cut id>
MODEL = "tail"
#: lowest output cosine (vs the whole model) a compressed transfer may give
MIN_COSINE = {"fp16": 0.9999, "int8": 0.99}


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionOptions:
    """What ``edge partition`` was asked."""

    bandwidth_mbps: float | None = None  # default: the edge profile's uplink
    rtt_ms: float | None = None  # default: the edge profile's RTT
    measured: bool = False  # per-node costs measured on this host instead of estimated
    shapes: dict[str, tuple[int, ...]] | None = None
    args: dict[str, str] | None = None  # a PyTorch forward's non-tensor values (--arg)
    compression: str = "none"  # transfer compression of float cut tensors: none, fp16, int8
    samples: Path | None = None  # data for int8 scales and the fidelity check (--calib)
    objective: ObjectiveName = "latency"  # latency, energy (device mJ), throughput (slowest stage)
    device: DeviceTarget | None = None  # edge costs measured ON this device by the agent
    trust_code: bool = False  # read a model that runs code when loaded (--trust-model-code)


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
    compression: str = "none"
    compressed_cosine: float | None = None
    cuts: tuple[dict[str, Any], ...] = ()
    objective: str = "latency"
    energy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self) | {"bandwidth_table": list(self.bandwidth_table),
                               "cuts": list(self.cuts)}


def partition(model_path: Path, edge: Profile, cloud: Profile, out: Path,
              options: PartitionOptions) -> PartitionReport:
    """Cost, solve, split, verify; write head.onnx, tail.onnx and split.yaml into ``out``.

    Every other cut in the bandwidth table is written too (``out/cuts/<id>/``), so a running
    client can switch cut when the measured bandwidth changes. Everything is written into a
    temporary directory beside ``out`` that replaces it only when every check passed: a failure
    leaves an earlier split in ``out`` untouched and no partial one.
    """
    check_mode(options.compression)
    _check_objective(options.objective)
    out = Path(out)
    _check_out(out)
    with staged_dir(out) as work:
        report = _partition(model_path, edge, cloud, work, options)
    return replace(report, out=str(out))


def _check_out(out: Path) -> None:
    """Refuse to replace a file, or a directory that is not an earlier split."""
    if out.is_file() or out.is_symlink():
        raise UsageError(f"-o {out} is a file; give a directory for the split")
    if out.is_dir() and any(out.iterdir()) and not (out / "split.yaml").is_file():
        raise UsageError(f"-o {out} exists and is not a split directory; choose another")
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write into {parent}")


def _partition(model_path: Path, edge: Profile, cloud: Profile, out: Path,
               options: PartitionOptions) -> PartitionReport:
    """The work of ``partition``, writing into ``out`` (a fresh directory)."""
    objective = options.objective
    reference = _named_reference(model_path, options, out)
    measuring = options.measured or options.device is not None
    with progress.step(f"{'measuring' if measuring else 'estimating'} per-node costs"):
        edge_costs, cloud_costs, costs = _costs(reference, edge, cloud, options)
    graph = with_compression(build_graph(reference, edge_costs, cloud_costs),
                             options.compression)
    bandwidth = options.bandwidth_mbps or edge.link.uplink_mbps
    rtt = options.rtt_ms if options.rtt_ms is not None else edge.link.rtt_ms
    down = max(edge.link.downlink_mbps, bandwidth)  # as in the table: down >= up
    energy = energy_model(edge.power, edge.link)
    best = solve(graph, bandwidth, rtt, down, objective=objective, energy=energy)
    table = bandwidth_table(graph, rtt, down, objective=objective, energy=energy)
    samples = _samples(reference, options.samples)
    built = _build_cuts(reference, graph, best, table, out, options.compression, samples)
    chosen = built[0]
    rows = tuple(r | {"cut_id": _id_of(built, r["edge_nodes"])} for r in table)
    rows = tuple({k: v for k, v in r.items() if k != "edge_nodes"} for r in rows)
    link = {"bandwidth_mbps": bandwidth, "downlink_mbps": down, "rtt_ms": rtt,
            "objective": objective, "energy": _energy_doc(energy)}
    write_split_yaml(out, chosen.option.split, predicted=_predicted(best, costs) | link,
                     bandwidth_table=list(rows), cuts=[b.option for b in built],
                     compression=options.compression, inputs=_input_specs(reference),
                     serving=cloud.serving.model_dump() | {"cloud": cloud.id})
    reference.unlink(missing_ok=True)
    names = [n.name for n in graph.nodes]
    return PartitionReport(
        out=str(out), costs=costs, bandwidth_mbps=bandwidth, rtt_ms=rtt,
        chosen=_predicted(best, costs) | {"cut": list(best.cut), "cut_id": chosen.option.id,
                                          "edge_nodes": len(best.edge),
                                          "cloud_nodes": len(best.cloud)},
        all_edge_ms=evaluate(graph, names, bandwidth, rtt, down).total_ms,
        all_cloud_ms=evaluate(graph, (), bandwidth, rtt, down).total_ms,
        max_abs_diff=max(b.max_abs_diff for b in built), bandwidth_table=rows,
        compression=options.compression,
        compressed_cosine=_worst_cosine(built),
        cuts=tuple(_cut_summary(b) for b in built),
        objective=objective, energy=_energy_doc(energy))


def bandwidth_table(graph: Graph, rtt_ms: float, downlink_mbps: float, *,
                    objective: ObjectiveName = "latency",
                    energy: EnergyModel | None = None) -> tuple[dict[str, Any], ...]:
    """The best cut per bandwidth range, so a running client can switch cut at once."""
    rows: list[dict[str, Any]] = []
    for mbps in SWEEP:
        best = solve(graph, mbps, rtt_ms, max(downlink_mbps, mbps), objective=objective,
                     energy=energy)
        cut = sorted(best.cut)
        if rows and rows[-1]["cut"] == cut and rows[-1]["kind"] == best.kind:
            rows[-1]["max_mbps"] = mbps
            continue
        rows.append({"min_mbps": mbps, "max_mbps": mbps, "kind": best.kind, "cut": cut,
                     "edge_nodes": sorted(best.edge), "predicted_ms": round(best.total_ms, 3)})
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class _Built:
    """A cut written to disk, verified, and the edge nodes it was made from."""

    edge: frozenset[str]
    option: CutOption
    max_abs_diff: float
    cosine: float | None


def _build_cuts(reference: Path, graph: Any, best: Any, table: Sequence[dict[str, Any]],
                out: Path, compression: str,
                samples: list[dict[str, np.ndarray]]) -> list[_Built]:
    """Write and verify the chosen cut (into ``out``), every other cut of the bandwidth table and
    the all-edge and all-cloud baselines (out/cuts/ID): a client can fall back to either when
    the link's RTT or bandwidth moves outside what the table was planned for."""
    everything = frozenset(n.name for n in graph.nodes)
    sets = list(dict.fromkeys([frozenset(best.edge)]
                              + [frozenset(r["edge_nodes"]) for r in table]
                              + [everything, frozenset()]))  # both baselines, always
    built = []
    with progress.step("writing cuts", total=len(sets)) as bar:
        for index, edge in enumerate(sets):
            bar.update(f"writing and verifying cut c{index} ({index + 1}/{len(sets)})")
            where = out if index == 0 else out / CUTS_DIR / f"c{index}"
            built.append(_build_cut(reference, graph, edge, f"c{index}", where, compression,
                                    samples))
            bar.advance()
    return built


def _build_cut(reference: Path, graph: Any, edge: frozenset[str], cut_id: str, where: Path,
               compression: str, samples: list[dict[str, np.ndarray]]) -> _Built:
    """Split at ``edge``, check head->tail against the model, then compress and check again."""
    split = split_model(reference, set(edge), where)
    diff = verify_split(reference, split, samples)
    if not diff <= TOLERANCE:
        raise CheckFailed(f"cut {cut_id}: head->tail differs from the model by {diff:g} "
                          f"(> {TOLERANCE})")
    split = compress_split(split, compression, samples)
    cosine = _check_compressed(reference, split, samples, compression, cut_id)
    names = [n.name for n in graph.nodes]
    up, down = _link_bytes(graph, edge)
    model = "" if split.tail is None else (MODEL if cut_id == "c0" else f"{MODEL}-{cut_id}")
    kind = "all-edge" if split.tail is None else "all-cloud" if not edge else "split"
    option = CutOption(
        id=cut_id, kind=kind, model=model, split=split,
        edge_ms=sum(graph.node(n).edge_ms for n in names if n in edge),
        cloud_ms=sum(graph.node(n).cloud_ms for n in names if n not in edge),
        up_bytes=up, down_bytes=down)
    return _Built(edge, option, diff, cosine)


def _check_compressed(reference: Path, split: SplitModels, samples: list[dict[str, np.ndarray]],
                      compression: str, cut_id: str) -> float | None:
    """Worst output cosine of the compressed split vs the model; refuse below the floor."""
    if compression == "none" or split.head is None or split.tail is None:
        return None
    worst = 1.0
    for feeds in samples:
        want = model_outputs(reference, feeds)
        got = run_split(split, feeds)
        worst = min(worst, _cosine([want[n] for n in split.outputs],
                                   [got[n] for n in split.outputs]))
    floor = MIN_COSINE[compression]
    if worst < floor:
        raise CheckFailed(f"cut {cut_id}: {compression} transfer compression gives output "
                          f"cosine {worst:.5f} < {floor}; use --compress fp16 or none")
    return worst


def _cosine(want: list[np.ndarray], got: list[np.ndarray]) -> float:
    a = np.concatenate([np.asarray(w, np.float64).ravel() for w in want])
    b = np.concatenate([np.asarray(g, np.float64).ravel() for g in got])
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norm) if norm else float(np.array_equal(a, b))


def _link_bytes(graph: Graph, edge: frozenset[str]) -> tuple[int, int]:
    """Bytes sent up (tensors the cloud reads from the device) and down (cloud-made outputs)."""
    up = down = 0
    for tensor in graph.tensors:
        on_edge = tensor.producer == SOURCE or tensor.producer in edge
        if on_edge and any(c != SINK and c not in edge for c in tensor.consumers):
            up += tensor.bytes
        if not on_edge and tensor.is_output:
            down += tensor.bytes
    return up, down


def _id_of(built: list[_Built], edge_nodes: list[str]) -> str:
    wanted = frozenset(edge_nodes)
    return next(b.option.id for b in built if b.edge == wanted)


def _worst_cosine(built: list[_Built]) -> float | None:
    values = [b.cosine for b in built if b.cosine is not None]
    return min(values) if values else None


def _cut_summary(built: _Built) -> dict[str, Any]:
    option = built.option
    return {"id": option.id, "kind": option.kind, "model": option.model,
            "edge_ms": _ms(option.edge_ms), "cloud_ms": _ms(option.cloud_ms),
            "up_bytes": option.up_bytes, "down_bytes": option.down_bytes,
            "cut": list(option.split.cut_tensors)}


def _named_reference(model_path: Path, options: PartitionOptions, out: Path) -> Path:
    """The reference ONNX with every node named (the split works by node name)."""
    _, reference = reference_model(model_path, shapes=options.shapes,
                                   trust_code=options.trust_code, args=options.args)
    reference = _pinned(reference, options.samples)
    _refuse_unrunnable(reference, model_path.name)
    out.mkdir(parents=True, exist_ok=True)
    named = out / ".reference.onnx"
    onnx.save(load_named(reference), str(named))
    return named


def _refuse_unrunnable(reference: Path, shown: str) -> None:
    """Non-numeric or absurdly large tensors are one clear error, not a crash in a runtime."""
    odd = unrunnable(inspect_model(reference)) or ort_refusal(reference)
    if odd:
        raise UsageError(f"{shown}: {odd}")


def _pinned(reference: Path, samples: Path | None) -> Path:
    """The reference with its dynamic dims pinned to the first --calib sample's shapes;
    without --calib a dynamic dim is a UsageError: every cost and transfer would be priced
    at a guessed size (1)."""
    dynamic = dynamic_inputs(reference)
    if not dynamic:
        return reference
    if samples is None:
        spec = next(s for s in inspect_model(reference).inputs if s.name == dynamic[0])
        dims = ",".join(str(d) if isinstance(d, int) and d > 0 else "1" if i == 0 else "N"
                        for i, d in enumerate(spec.shape))
        raise UsageError(f"input(s) {', '.join(dynamic)} have dynamic dims, and a split is "
                         f"priced at one size: give --shape {spec.name}={dims} (each N a "
                         "number) or --calib data to pin them")
    sample = load_dataset(samples, inspect_model(reference)).feeds[0]
    return pin_from_sample(reference, cache_root() / "reference", sample)


def _costs(reference: Path, edge: Profile, cloud: Profile,
           options: PartitionOptions) -> tuple[dict[str, float], dict[str, float], str]:
    """Per-node ms on each side and how they were obtained."""
    cloud_costs = node_costs(reference, cloud, measured=options.measured)
    cloud_how = "measured on this host" if options.measured else "estimated from MACs and peak"
    if options.device is not None:
        edge_costs, where = _device_costs(reference, edge, options.device)
        edge_how = f"measured on {where}"
    else:
        edge_costs, edge_how = node_costs(reference, edge, measured=options.measured), cloud_how
    return edge_costs, cloud_costs, f"edge {edge_how}; cloud {cloud_how}"


def _device_costs(reference: Path, profile: Profile,
                  target: DeviceTarget) -> tuple[dict[str, float], str]:
    """Per-node ms measured ON the device by its agent (opened as deploy opens it; the
    per-node profile needs onnxruntime there); and where that was."""
    threads = target.threads if target.threads is not None else profile.compute.default_threads
    runs = max(3, min(target.runs, 100) // DEVICE_REPEATS)
    with measuring_device(target, profile, "onnxruntime") as device:
        repeats = []
        with progress.step(f"{device.label}: measuring per-node costs",
                           total=DEVICE_REPEATS) as bar:
            for _ in range(DEVICE_REPEATS):
                repeats.append(measure_costs_on_device(reference, device, threads=threads,
                                                       runs=runs))
                bar.advance()
        return _median_costs(repeats), device.label


def _median_costs(repeats: list[dict[str, float]]) -> dict[str, float]:
    """Per-node median of several measurements (one agent process each)."""
    return {name: statistics.median(r[name] for r in repeats) for name in repeats[0]}


def _check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    return objective


def _energy_doc(energy: EnergyModel) -> dict[str, Any]:
    return {"idle_w": energy.idle_w, "max_w": energy.max_w,
            "tx_nj_per_bit": energy.tx_nj_per_bit, "assumed": energy.assumed}


def _samples(reference: Path, data: Path | None, count: int = 3) -> list[dict[str, np.ndarray]]:
    """Feeds for the parity check and int8 scales: up to 16 from ``data``, else random ones."""
    info = inspect_model(reference)
    if data is not None:
        return [dict(f) for f in load_dataset(data, info).feeds[:16]]
    rng = np.random.default_rng(0)
    return [{s.name: _random(rng, s.static_shape, s.dtype) for s in info.inputs}
            for _ in range(count)]


def _input_specs(reference: Path) -> list[dict[str, Any]]:
    """Name, shape and dtype of every model input (what the client must be fed)."""
    return [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
            for i in inspect_model(reference).inputs]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _predicted(best: Any, costs: str) -> dict[str, Any]:
    return {"kind": best.kind, "edge_ms": _ms(best.edge_ms), "transfer_ms": _ms(best.transfer_ms),
            "cloud_ms": _ms(best.cloud_ms), "total_ms": _ms(best.total_ms),
            "energy_mj": _ms(best.energy_mj), "stage_ms": _ms(best.stage_ms),
            "exact": best.exact, "costs": costs}


def _ms(value: float) -> float:
    return round(value, 4) if math.isfinite(value) else value
