"""Calibrations kept in the cache: ``$EDGE_CACHE_DIR/latency/<profile id>.json``, one per
profile, each the probe timings of every (runtime, precision) calibrated there. Validated when
read (a device's numbers are not trusted: finite, positive, bounded); a torn or foreign file
reads as no calibration. An emulated device's timings are kept, for the mechanism, but never
fitted: they time the emulator, not the device.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from edge.core.cache import cache_root
from edge.core.json_value import JsonValue
from edge.core.latency.model import FEATURES, Fitted, Timed, fit

__all__ = ["HOST_CPUS", "Calibration", "add_model", "calibrated_ids", "emulated", "fitted",
           "keep", "kept", "key"]

#: CPU names that betray an emulator when the python says it is another arch.
HOST_CPUS = ("Intel", "AMD", "EPYC", "Xeon", "Ryzen")

#: The most probe timings kept per (runtime, precision), and the longest text.
MAX_TIMED, MAX_TEXT = 64, 300
Ms = Annotated[float, Field(gt=0, le=86_400_000, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class ProbeTiming(JsonValue):
    """One probe's timing as kept (validated)."""

    name: Annotated[str, Field(max_length=MAX_TEXT)]
    features: dict[Annotated[str, Field(max_length=64)], Amount] = Field(max_length=len(FEATURES))
    ms: Ms

    def timed(self) -> Timed:
        return Timed(name=self.name, features=dict(self.features), ms=self.ms)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Calibration(JsonValue):
    """A profile's device as calibrated: where, when, at how many threads, and the probe
    timings of each runtime and precision (``key``)."""

    profile: Annotated[str, Field(max_length=MAX_TEXT)]
    device: Annotated[str, Field(max_length=MAX_TEXT)]
    machine: Annotated[str, Field(max_length=MAX_TEXT)] = ""
    cpu: Annotated[str, Field(max_length=MAX_TEXT)] = ""
    threads: int = Field(ge=0, le=4096)
    when: Annotated[str, Field(max_length=64)] = ""
    emulated: bool = False
    timed: dict[Annotated[str, Field(max_length=MAX_TEXT)],
                Annotated[tuple[ProbeTiming, ...], Field(max_length=MAX_TIMED)]] = Field(
        default_factory=dict, max_length=64)
    #: real models timed on the same device since (edge deploy): each a model's features and
    #: its p50, by key, the newest ``MAX_TIMED``; they join the probes in the fit
    models: dict[Annotated[str, Field(max_length=MAX_TEXT)],
                 Annotated[tuple[ProbeTiming, ...], Field(max_length=MAX_TIMED)]] = Field(
        default_factory=dict, max_length=64)


def key(runtime: str, precision: str) -> str:
    """A calibration's key of a runtime at a precision."""
    return f"{runtime}|{precision}"


def _path(profile_id: str) -> Path:
    return cache_root() / "latency" / f"{profile_id}.json"


def kept(profile_id: str) -> Calibration | None:
    """The profile's kept calibration; None when there is none or it does not read."""
    try:
        data = json.loads(_path(profile_id).read_text(encoding="utf-8"))
        return Calibration.from_json(data)
    except (OSError, ValueError, TypeError, ValidationError):
        return None


def calibrated_ids() -> list[str]:
    """The ids of the profiles with a kept calibration, sorted."""
    folder = cache_root() / "latency"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def keep(calibration: Calibration) -> Path:
    """Write the calibration for its profile (atomically; it replaces an earlier one)."""
    path = _path(calibration.profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(calibration.to_json(), out, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def fitted(calibration: Calibration | None, runtime: str, precision: str) -> Fitted | None:
    """The latency model of ``runtime`` at ``precision`` fitted on the kept probe timings;
    None when there are none, too few, or the device was emulated."""
    if calibration is None or calibration.emulated:
        return None
    wanted = key(runtime, precision)
    found = (*calibration.timed.get(wanted, ()), *calibration.models.get(wanted, ()))
    if len(found) < 3 or not all(math.isfinite(t.ms) for t in found):
        return None
    return fit([t.timed() for t in found])


def emulated(device_info: Mapping[str, object]) -> bool:
    """Whether the agent's python runs under an emulator: an ARM python on an x86 CPU (as
    qemu's user mode shows the host's /proc/cpuinfo)."""
    machine, cpu = str(device_info.get("machine", "")), str(device_info.get("cpu", ""))
    return machine.startswith(("aarch64", "arm")) and any(h in cpu for h in HOST_CPUS)


def add_model(profile_id: str, device: str, wanted: str, timing: ProbeTiming) -> bool:
    """Add a real model's timing to the profile's calibration when that calibration was made
    on this very ``device`` (a deploy with the profile to another device, the local one for
    a try, must not teach it); the same model again replaces its earlier timing. Whether it
    was added."""
    calibration = kept(profile_id)
    if calibration is None or calibration.device != device or calibration.emulated:
        return False
    earlier = [t for t in calibration.models.get(wanted, ()) if t.name != timing.name]
    models = dict(calibration.models) | {wanted: (*earlier, timing)[-MAX_TIMED:]}
    keep(replace(calibration, models=models))
    return True
