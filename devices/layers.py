"""Per-layer time of one artifact, measured by the runtime that runs it (its folder's
profiler, ``targets/<runtime>/layers.py``, picked by ``targets.layers.measure_layers``): the
values every profiler returns and the helpers they share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devices.device import Device

__all__ = ["LayerProfile", "LayerTime", "profile_of", "scaled", "threads_text", "where"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerTime:
    """One layer's share of an inference (``detail``: the kernel or operator range, if any)."""

    name: str
    op: str
    ms: float
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerProfile:
    """Per-layer times of one artifact, slowest first; they sum to ``total_ms``."""

    runtime: str
    method: str
    total_ms: float
    layers: tuple[LayerTime, ...]


def profile_of(runtime: str, method: str, total_ms: float,
               layers: Sequence[LayerTime]) -> LayerProfile:
    """A profile with its layers sorted slowest first."""
    return LayerProfile(runtime=runtime, method=method, total_ms=total_ms,
                        layers=tuple(sorted(layers, key=lambda layer: -layer.ms)))


def scaled(raw: Sequence[float], whole_ms: float) -> list[float]:
    """``raw`` scaled to sum to ``whole_ms`` (all zeros when they sum to 0)."""
    total = sum(raw)
    return [ms * whole_ms / total if total > 0 else 0.0 for ms in raw]


def threads_text(threads: int) -> str:
    """'1 thread', '4 threads'."""
    return f"{threads} thread{'s' if threads > 1 else ''}"


def where(device: Device | None) -> str:
    """How a method sentence names where it ran."""
    return "this host" if device is None else f"ON {device.label} by the edge agent"
