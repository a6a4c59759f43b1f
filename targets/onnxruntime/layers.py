"""ONNX Runtime's per-layer profiler: its per-node trace (``targets.onnxruntime.profiling``),
every node named first so no unnamed node's time is lost, scaled to the optimized model's
median; on this host or ON a device by its agent."""

from __future__ import annotations

import tempfile
from pathlib import Path

from devices.device import Device
from devices.layers import LayerProfile, LayerTime, profile_of, scaled, threads_text, where
from edge.core.model import load_named, save_onnx_atomic
from targets.onnxruntime.profiling import node_profile

__all__ = ["measure"]


def measure(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
    with tempfile.TemporaryDirectory(prefix="edge-layers-") as tmp:
        named = Path(tmp) / path.name  # every node named: unnamed nodes' time is not lost
        save_onnx_atomic(load_named(path), named)
        measured = node_profile(named, threads=threads, runs=runs, device=device)
    names = list(measured.nodes)
    shares = scaled([measured.nodes[n] for n in names], measured.whole_ms)
    layers = [LayerTime(name=name, op=measured.ops.get(name, "?"), ms=ms)
              for name, ms in zip(names, shares, strict=True)]
    runtime = (f"onnxruntime {measured.runtime_version} CPU" if device is None
               else f"onnxruntime on {device.label}")
    method = (f"measured {where(device)} with the onnxruntime CPU profiler "
              f"({threads_text(threads)}): mean kernel time per node over {runs} runs without "
              f"graph optimizations, scaled to the median of {runs} runs of the optimized model")
    return profile_of(runtime, method, measured.whole_ms, layers)
