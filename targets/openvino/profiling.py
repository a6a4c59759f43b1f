"""OpenVINO's per-node times from the CPU plugin's performance counters, on this host or ON a
device, by the same agent code (``targets.openvino.agent``: ``openvino_perf``).

On a device the .xml and its .bin are pushed once to ``<work>/models/`` (by content).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from devices.device import Device, store
from devices.measure import here, host_label
from edge.core import progress
from edge.core.errors import UsageError
from edge.core.model import sha256_file
from targets.openvino import agent

__all__ = ["openvino_counters"]


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
        reply = here(agent.openvino_perf, str(ir), threads, runs, hold=progress.hold)
        return {**reply, "where": host_label()}
    # one name for the pair: the same .xml with other weights must not reuse a stale .bin
    stem = hashlib.sha256((sha256_file(ir) + sha256_file(weights)).encode()).hexdigest()[:16]
    store(device, weights, stem)
    remote, _ = store(device, ir, stem)
    with progress.step(f"{device.label}: reading OpenVINO counters ({runs} runs)"):
        reply = device.call("perf", "--model", remote, "--threads", str(threads),
                            "--runs", str(runs))
    return {**reply, "where": device.label}
