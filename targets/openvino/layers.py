"""OpenVINO's per-layer profiler: the CPU plugin's performance counters (PERF_COUNT), the median
real time per executed node, scaled to the median of an unprofiled compile timed in interleaved
rounds beside it (``targets.openvino.profiling``); on this host or ON a device by its agent."""

from __future__ import annotations

from pathlib import Path

from devices.device import Device
from devices.layers import LayerProfile, LayerTime, profile_of, scaled, threads_text, where
from edge.core.errors import UsageError
from targets.openvino.profiling import openvino_counters

__all__ = ["measure"]


def measure(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
    if not path.with_suffix(".bin").is_file():
        raise UsageError(f"{path.with_suffix('.bin')} is missing: an OpenVINO IR needs its "
                         ".bin beside the .xml")
    reply = openvino_counters(path, threads=threads, runs=runs, device=device)
    runtime = (f"OpenVINO {reply['runtime_version']} CPU" if device is None
               else f"OpenVINO {reply['runtime_version']} on {device.label}")
    nodes = {name: n for name, n in reply["nodes"].items() if float(n["ms"]) > 0}
    shares = scaled([float(n["ms"]) for n in nodes.values()], float(reply["whole_ms"]))
    layers = [LayerTime(name=name, op=n["op"], detail=n["kernel"], ms=ms)
              for (name, n), ms in zip(nodes.items(), shares, strict=True)]
    method = (f"measured {where(device)} from the OpenVINO CPU performance counters "
              f"(PERF_COUNT, {threads_text(threads)}, the precision hint the IR records, as edge "
              f"runs it): median "
              f"real time per executed node over {runs} runs, scaled to the median of {runs} "
              "unprofiled runs timed in interleaved rounds beside them")
    return profile_of(runtime, method, float(reply["whole_ms"]), layers)
