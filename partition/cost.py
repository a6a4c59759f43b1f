"""Per-node latency: an estimate from MACs and a profile, or a measurement with onnxruntime."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from partition.graph import load_named, tensor_bytes

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from edge.profile import Profile

__all__ = ["estimate_costs", "measure_costs", "node_costs"]

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


def _estimate_node(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
                   sizes: Mapping[str, int], gops: float) -> float:
    """One node's estimated ms."""
    macs = _node_macs(node, shapes)
    moved = sum(sizes.get(n, 0) for n in list(node.input) + list(node.output) if n)
    compute_ms = 2.0 * macs / (gops * 1e9) * 1e3
    memory_ms = moved / (MEMORY_GBPS * 1e9) * 1e3
    return compute_ms + memory_ms + NODE_OVERHEAD_MS


def _node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """MACs of a Conv/ConvTranspose/Gemm/MatMul node by edge.model's rules; 0 otherwise."""
    from edge.model import node_macs  # the project's single MAC rule set

    return node_macs(node, shapes)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of all values and weights (symbolic dims as 1)."""
    from edge.model import value_shapes

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
    """Random inputs for every graph input, symbolic dims as 1."""
    import numpy as np

    session = _session(path, 1, optimize=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        dtype = _np_dtype(arg.type)
        feeds[arg.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                           else np.zeros(shape, dtype))
    return feeds


def _np_dtype(ort_type: str) -> np.dtype:
    """numpy dtype of an ORT type string such as 'tensor(float)'."""
    import numpy as np

    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return np.dtype({"float": "float32", "double": "float64", "float16": "float16"}.get(name, name))


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
    """Sum kernel durations per node name from an ORT trace, dropping the first (warm-up) run."""
    per_run: dict[str, list[float]] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        name = args.get("node_name") or event["name"].removesuffix("_kernel_time")
        if name:
            per_run.setdefault(name, []).append(event["dur"] / 1e3)
    return {name: sum(ds[-runs:]) / runs for name, ds in per_run.items()}


def _whole_model_ms(path: Path, feeds: Mapping[str, np.ndarray], threads: int, runs: int) -> float:
    """Median wall ms of the optimized model."""
    session = _session(path, threads, optimize=True)
    session.run(None, dict(feeds))
    times = []
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
