"""Per-layer time of one artifact, measured by the runtime that runs it (the profiler its folder
declares, ``Runtime.profiler``): on this host, or ON a device by its edge agent (``device``: an
opened ``devices.device.Device``). Random inputs as the agent makes them."""

from __future__ import annotations

from pathlib import Path

from devices.device import Device
from devices.layers import LayerProfile, LayerTime
from edge.core.errors import UsageError
from edge.core.plugins import full_suffix
from targets import load_object, runtime_for_suffix, runtimes

__all__ = ["LayerProfile", "LayerTime", "measure_layers", "profiled_suffixes"]


def profiled_suffixes() -> tuple[str, ...]:
    """The suffixes of the files some runtime's profiler times per layer."""
    return tuple(s for r in runtimes().values() if r.profiler for s in r.suffixes)


def measure_layers(path: Path, *, threads: int = 1, runs: int = 20,
                   device: Device | None = None) -> LayerProfile:
    """Measure the time per layer of a file on this host, or ON ``device`` by its agent, with
    the profiler of the runtime that runs its suffix."""
    path = Path(path)
    if threads < 1 or runs < 1:
        raise UsageError(f"threads ({threads}) and runs ({runs}) must be at least 1")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    owner = runtime_for_suffix(full_suffix(path.name))
    if owner is None or owner.profiler is None:
        raise UsageError(f"{path.name}: no per-layer timing for '{path.suffix}' files; "
                         f"choose one of {', '.join(profiled_suffixes())}")
    profile: LayerProfile = load_object(owner.profiler)(path, threads, runs, device)
    return profile
