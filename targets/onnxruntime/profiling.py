"""ONNX Runtime's per-node times, on this host or ON a device, by the same agent code
(``targets.onnxruntime.agent``): its per-node trace with the optimized model's median
(``node_profile``; partition's measured costs and the per-layer profiler read it).

On a device the model is pushed once to ``<work>/models/`` (by content, sha256-checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.agent.info import device_info
from devices.device import Device, store
from devices.measure import here, host_label
from edge.core import progress
from edge.core.errors import UsageError
from targets.onnxruntime import agent

__all__ = ["NodeProfile", "node_profile"]


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeProfile:
    """ONNX Runtime's per-node kernel ms (graph optimizations off, mean over ``runs``), each
    node's operator, and the optimized whole model's median ms, measured ``where``."""

    nodes: dict[str, float]
    ops: dict[str, str]
    whole_ms: float
    runs: int
    threads: int
    where: str
    runtime_version: str
    device: dict[str, Any] = field(default_factory=dict)
    model: str = ""  # the profiled file (on the device: its path there)
    uploaded: bool = False  # this call pushed the model to the device


def node_profile(model: Path, *, threads: int = 1, runs: int = 10,
                 device: Device | None = None) -> NodeProfile:
    """Profile an .onnx model's nodes on this host, or ON ``device`` by its agent."""
    model = Path(model)
    if not model.is_file():
        raise UsageError(f"{model}: no such model file")
    if model.suffix != ".onnx":
        raise UsageError(f"{model}: per-node profiling needs an .onnx model")
    if device is None:
        reply = here(agent.ort_profile, str(model), threads, runs, hold=progress.hold)
        return _node_profile(dict(reply, device=device_info()), host_label(), str(model), False)
    remote, uploaded = store(device, model)
    with progress.step(f"{device.label}: profiling every node ({runs} runs)"):
        reply = device.call("profile", "--model", remote, "--threads", str(threads),
                            "--runs", str(runs))
    return _node_profile(reply, device.label, remote, uploaded)


def _node_profile(reply: dict, where: str, model: str, uploaded: bool) -> NodeProfile:
    return NodeProfile(nodes=dict(reply["nodes"]), ops=dict(reply.get("ops") or {}),
                       whole_ms=float(reply["whole_ms"]), runs=int(reply["runs"]),
                       threads=int(reply["threads"]), where=where,
                       runtime_version=reply["runtime"]["onnxruntime"],
                       device=dict(reply.get("device") or {}), model=model, uploaded=uploaded)
