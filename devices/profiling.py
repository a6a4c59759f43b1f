"""Per-node times by the runtime's own profiler, on this host or ON a device, by the same agent
code (``devices.agent.profiling``): ONNX Runtime's per-node trace with the optimized model's
median (``node_profile``) and OpenVINO's CPU performance counters (``openvino_counters``).

On a device the model is pushed once to ``<work>/models/`` (by content, sha256-checked).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.agent import profiling as agent_profiling
from devices.agent.info import device_info
from devices.device import Device, store
from devices.measure import here, host_label
from edge.core import progress
from edge.core.errors import UsageError
from edge.core.model import sha256_file

__all__ = ["NodeProfile", "node_profile", "openvino_counters"]


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
        reply = here(agent_profiling.ort_profile, str(model), threads, runs, hold=progress.hold)
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


def openvino_counters(ir: Path, *, threads: int = 1, runs: int = 20,
                      device: Device | None = None) -> dict[str, Any]:
    """Each executed node's median real time from the CPU plugin's counters and the median of an
    unprofiled compile, on this host or ON ``device``. There the .xml and its .bin go to
    ``models/<sha16 of both>.xml|.bin`` unless already there."""
    ir = Path(ir)
    weights = ir.with_suffix(".bin")
    if ir.suffix != ".xml" or not ir.is_file() or not weights.is_file():
        raise UsageError(f"{ir}: an OpenVINO IR needs its .xml and .bin side by side")
    if device is None:
        reply = here(agent_profiling.openvino_perf, str(ir), threads, runs, hold=progress.hold)
        return {**reply, "where": host_label()}
    # one name for the pair: the same .xml with other weights must not reuse a stale .bin
    stem = hashlib.sha256((sha256_file(ir) + sha256_file(weights)).encode()).hexdigest()[:16]
    store(device, weights, stem)
    remote, _ = store(device, ir, stem)
    with progress.step(f"{device.label}: reading OpenVINO counters ({runs} runs)"):
        reply = device.call("perf", "--model", remote, "--threads", str(threads),
                            "--runs", str(runs))
    return {**reply, "where": device.label}
