"""Per-node latency: an estimate from MACs and a profile, or a measurement with onnxruntime
(on this host, or on the device through edge's agent)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from devices.agent import kernel_ms, profile_feeds
from edge.core import progress
from edge.core.errors import UsageError
from partition.graph import load_named, tensor_bytes

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from devices.deploy import Device
    from devices.transport import Transport
    from edge.core.profile import Profile

__all__ = ["estimate_costs", "measure_costs", "measure_costs_on_device", "node_costs"]

#: Guessed memory bandwidth for non-MAC ops, GB/s, when a profile says nothing about it.
MEMORY_GBPS = 10.0
#: Fixed per-node dispatch overhead, ms.
NODE_OVERHEAD_MS = 0.002
#: Flops per cycle per core assumed when a profile has no fp32 peak.
FLOPS_PER_CYCLE = 8.0


def node_costs(model_path: str | Path, profile: Profile, *, measured: bool) -> dict[str, float]:
    """Latency per node name in ms: measured on this host with onnxruntime, or estimated."""
    if measured:
        return measure_costs(model_path, threads=profile.compute.default_threads)
    return estimate_costs(model_path, profile)


def estimate_costs(model_path: str | Path, profile: Profile) -> dict[str, float]:
    """Estimate (not measured): 2*MACs / fp32 peak, plus bytes moved / bandwidth and overhead."""
    import onnx

    model = load_named(model_path)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = _shapes(inferred)
    sizes = tensor_bytes(model)
    gops = _peak_fp32_gops(profile)
    return {node.name: _estimate_node(node, shapes, sizes, gops) for node in model.graph.node}


def measure_costs(model_path: str | Path, *, threads: int = 1, runs: int = 10) -> dict[str, float]:
    """Measured per-node ms (ORT profiling, no graph optimization) scaled to the optimized run."""
    model = load_named(model_path)
    with tempfile.TemporaryDirectory(prefix="edge-partition-") as tmp:
        path = Path(tmp) / "named.onnx"
        _save(model, path)
        feeds = _random_feeds(path)
        raw = _profiled_node_ms(path, feeds, threads, runs, Path(tmp))
        whole = _whole_model_ms(path, feeds, threads, runs)
    return _calibrated(raw, whole, [n.name for n in model.graph.node])


def measure_costs_on_device(
    model_path: str | Path, device: Device | Transport, *, threads: int = 1, runs: int = 10,
    python: str | None = None, work_dir: str = "~/.edge",
) -> dict[str, float]:
    """Per-node ms measured ON the device by its agent, calibrated as ``measure_costs`` does.

    Nodes are named as ``load_named`` names them; the named model is pushed to the device
    (once: it is stored there by content) and profiled by ``edge_agent.py profile``, whose
    per-node kernel ms are scaled to sum to the optimized whole-model median it measured.
    ``device`` is an opened ``Device``, or a transport opened here with ``python`` (default:
    this python for the local device, ``python3`` over SSH) and ``work_dir``.
    """
    from devices.deploy import Device, open_device, profile_on_device

    path = Path(model_path)
    if not path.is_file():
        raise UsageError(f"{path}: no such model file")
    if not isinstance(device, Device):
        default = sys.executable if device.is_local else "python3"
        device = open_device(device, python=python or default, work_dir=work_dir)
    try:
        model = load_named(path)
    except Exception as exc:  # noqa: BLE001 - protobuf/onnx errors vary; one line for the user
        raise UsageError(f"{path}: not a readable ONNX model ({type(exc).__name__})") from None
    with tempfile.TemporaryDirectory(prefix="edge-partition-") as tmp:
        named = Path(tmp) / "named.onnx"
        _save(model, named)
        reply = profile_on_device(device, named, threads=threads, runs=runs)
    return _calibrated(reply["nodes"], float(reply["whole_ms"]), [n.name for n in model.graph.node])


def _estimate_node(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
                   sizes: Mapping[str, int], gops: float) -> float:
    """One node's estimated ms."""
    macs = _node_macs(node, shapes)
    moved = sum(sizes.get(n, 0) for n in list(node.input) + list(node.output) if n)
    compute_ms = 2.0 * macs / (gops * 1e9) * 1e3
    memory_ms = moved / (MEMORY_GBPS * 1e9) * 1e3
    return compute_ms + memory_ms + NODE_OVERHEAD_MS


def _node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """MACs of a Conv/ConvTranspose/Gemm/MatMul node by edge.core.model's rules; 0 otherwise."""
    from edge.core.model import node_macs  # the project's single MAC rule set

    return node_macs(node, shapes)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of all values and weights (symbolic dims as 1)."""
    from edge.core.model import value_shapes

    return value_shapes(model)


def _peak_fp32_gops(profile: Profile) -> float:
    """The profile's fp32 peak GOPS, or cores * clock * FLOPS_PER_CYCLE when not given."""
    compute = profile.compute
    return compute.peak_gops.get("fp32") or compute.cores * compute.clock_ghz * FLOPS_PER_CYCLE


def _save(model: onnx.ModelProto, path: Path) -> None:
    import onnx

    onnx.save(model, str(path))


def _session(path: Path, threads: int, *, optimize: bool,
             profile_dir: Path | None = None) -> ort.InferenceSession:
    """A CPU session; graph optimizations off and profiling on when profile_dir is given."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if profile_dir is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(profile_dir / "ort-profile")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _random_feeds(path: Path) -> dict[str, np.ndarray]:
    """Random inputs for every graph input, symbolic dims as 1 (as the agent makes them)."""
    import numpy as np

    return profile_feeds(np, _session(path, 1, optimize=False).get_inputs())


def _profiled_node_ms(path: Path, feeds: Mapping[str, np.ndarray], threads: int, runs: int,
                      tmp: Path) -> dict[str, float]:
    """Mean kernel ms per node name over ``runs`` runs (one warm-up run excluded)."""
    session = _session(path, threads, optimize=False, profile_dir=tmp)
    session.run(None, dict(feeds))
    for _ in range(runs):
        session.run(None, dict(feeds))
    trace = Path(session.end_profiling())
    return _kernel_ms(json.loads(trace.read_text()), runs)


def _kernel_ms(events: list[dict], runs: int) -> dict[str, float]:
    """Kernel ms per node name from an ORT trace, the first (warm-up) run dropped: the agent's
    parser, so host and device measurements count the same events."""
    return kernel_ms(events, runs)


def _whole_model_ms(path: Path, feeds: Mapping[str, np.ndarray], threads: int, runs: int) -> float:
    """Median wall ms of the optimized model."""
    session = _session(path, threads, optimize=True)
    session.run(None, dict(feeds))
    times = []
    with progress.hold():
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, dict(feeds))
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _calibrated(raw: Mapping[str, float], whole_ms: float, names: list[str]) -> dict[str, float]:
    """Per-node ms scaled so they sum to the optimized whole-model ms; unseen nodes cost 0."""
    total = sum(raw.get(n, 0.0) for n in names)
    scale = whole_ms / total if total > 0 else 0.0
    return {n: raw.get(n, 0.0) * scale for n in names}
