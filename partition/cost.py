"""Per-node latency: an estimate from MACs and a profile, or onnxruntime's per-node profile
(``targets.onnxruntime.profiling``: on this host, or on the device by edge's agent) calibrated
here."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import onnx

from devices.device import Device, open_device
from devices.transport import Transport
from edge.core import estimate
from edge.core.errors import UsageError
from edge.core.model import load_named, node_macs, value_shapes
from edge.core.profile import Profile
from partition.graph import tensor_bytes
from targets.onnxruntime import profiling

__all__ = ["estimate_costs", "measure_costs", "measure_costs_on_device", "node_costs"]


def node_costs(model_path: str | Path, profile: Profile, *, measured: bool) -> dict[str, float]:
    """Latency per node name in ms: measured on this host with onnxruntime, or estimated."""
    if measured:
        return measure_costs(model_path, threads=profile.compute.default_threads)
    return estimate_costs(model_path, profile)


def estimate_costs(model_path: str | Path, profile: Profile) -> dict[str, float]:
    """Estimate (not measured): 2*MACs / fp32 peak, plus bytes moved / bandwidth and overhead."""
    model = load_named(model_path)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = _shapes(inferred)
    sizes = tensor_bytes(model)
    gops = estimate.peak_gops(profile, "fp32")  # one roofline: edge.core.estimate's figures
    return {node.name: _estimate_node(node, shapes, sizes, gops) for node in model.graph.node}


def measure_costs(model_path: str | Path, *, threads: int = 1, runs: int = 10) -> dict[str, float]:
    """Per-node ms measured on this host (ORT profiling, no graph optimization), calibrated to
    the optimized whole-model median."""
    return _measured(Path(model_path), None, threads, runs)


def measure_costs_on_device(
    model_path: str | Path, device: Device | Transport, *, threads: int = 1, runs: int = 10,
    python: str | None = None, work_dir: str = "~/.edge",
) -> dict[str, float]:
    """Per-node ms measured ON the device by its agent, calibrated as ``measure_costs`` does.

    Nodes are named as ``load_named`` names them; the named model is pushed to the device
    (once: it is stored there by content) and profiled by the agent's ``profile``, whose
    per-node kernel ms are scaled to sum to the optimized whole-model median it measured.
    ``device`` is an opened ``Device``, or a transport opened here with ``python`` (default:
    this python for the local device, ``python3`` over SSH) and ``work_dir``.
    """
    path = Path(model_path)
    if not path.is_file():
        raise UsageError(f"{path}: no such model file")
    if not isinstance(device, Device):
        default = sys.executable if device.is_local else "python3"
        device = open_device(device, python=python or default, work_dir=work_dir)
    return _measured(path, device, threads, runs)


def _measured(path: Path, device: Device | None, threads: int, runs: int) -> dict[str, float]:
    """The named model profiled by ``targets.onnxruntime.profiling`` (here or on ``device``),
    calibrated."""
    if not path.is_file():
        raise UsageError(f"{path}: no such model file")
    try:
        model = load_named(path)
    except Exception as exc:  # noqa: BLE001 - protobuf/onnx errors vary; one line for the user
        raise UsageError(f"{path}: not a readable ONNX model ({type(exc).__name__})") from None
    with tempfile.TemporaryDirectory(prefix="edge-partition-") as tmp:
        named = Path(tmp) / "named.onnx"
        _save(model, named)
        measured = profiling.node_profile(named, threads=threads, runs=runs, device=device)
    return _calibrated(measured.nodes, measured.whole_ms, [n.name for n in model.graph.node])


def _estimate_node(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
                   sizes: Mapping[str, int], gops: float) -> float:
    """One node's estimated ms."""
    macs = _node_macs(node, shapes)
    moved = sum(sizes.get(n, 0) for n in list(node.input) + list(node.output) if n)
    compute_ms = 2.0 * macs / (gops * 1e9) * 1e3
    memory_ms = moved / (estimate.MEMORY_GBPS * 1e9) * 1e3
    return compute_ms + memory_ms + estimate.NODE_OVERHEAD_MS


def _node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """MACs of a Conv/ConvTranspose/Gemm/MatMul node by edge.core.model's rules (the project's
    single MAC rule set); 0 otherwise."""
    return node_macs(node, shapes)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of all values and weights (symbolic dims as 1)."""
    return value_shapes(model)


def _save(model: onnx.ModelProto, path: Path) -> None:
    onnx.save(model, str(path))


def _calibrated(raw: Mapping[str, float], whole_ms: float, names: list[str]) -> dict[str, float]:
    """Per-node ms scaled so they sum to the optimized whole-model ms; unseen nodes cost 0."""
    total = sum(raw.get(n, 0.0) for n in names)
    scale = whole_ms / total if total > 0 else 0.0
    return {n: raw.get(n, 0.0) * scale for n in names}
