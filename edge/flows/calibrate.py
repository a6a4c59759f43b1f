"""``edge devices probe TARGET --calibrate``: time the probe models on the device and keep the
timings under its profile's id (``edge.core.latency.store``), so that ``edge devices compare``
and later estimates for that profile rest on the device's own latency model.

Each runtime the device has that runs an ONNX model as it is (ONNX Runtime) is timed at fp32
and at int8 (each probe quantized with calibration on random inputs: the arithmetic, not the
accuracy, is timed), every probe of a precision in one interleaved bench under the device's
measurement lock, at the profile's threads. A device whose agent runs under an emulator (an
aarch64 python on an x86 CPU) is calibrated as a mechanism only: its timings are kept marked
emulated and never fitted.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from devices.connect import AccessOnly, DeviceTarget, transport_for
from devices.device import Device, open_device, store
from devices.lock import deploy_lock
from devices.measure import Rounds, time_on_device
from edge.core.latency.model import Fitted, features
from edge.core.latency.probes import write_probes
from edge.core.latency.store import Calibration, ProbeTiming, emulated, fitted, keep, key
from edge.core.model import inspect_model
from edge.core.values import BenchResult, Dataset
from edge.flows.probe_build import WORK_DIR
from targets import get_target

__all__ = ["CALIBRATED", "calibrate", "calibrate_target", "emulated"]

#: (runtime, precision) pairs calibrated where the device has the runtime.
CALIBRATED = (("onnxruntime", "fp32"), ("onnxruntime", "int8"))
#: Random calibration samples a probe is quantized with (its speed, not its accuracy, counts).
SAMPLES = 4


def calibrate_target(target: DeviceTarget, profile_id: str, *, threads: int,
                     rounds: Rounds) -> tuple[Calibration, Path]:
    """Reach the device as ``edge devices probe`` does, calibrate it, keep the timings."""
    with transport_for(target, AccessOnly()) as transport:
        python = target.python or (sys.executable if transport.is_local else "python3")
        device = open_device(transport, python=python, work_dir=WORK_DIR)
        found = calibrate(device, profile_id, threads=threads, rounds=rounds)
    return found, keep(found)


def calibrate(device: Device, profile_id: str, *, threads: int, rounds: Rounds,
              pairs: tuple[tuple[str, str], ...] = CALIBRATED) -> Calibration:
    """The probe timings of every calibrated (runtime, precision) of ``pairs`` the device
    runs."""
    timed: dict[str, tuple[ProbeTiming, ...]] = {}
    seen: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="edge-probes-") as scratch, \
            deploy_lock(device, "measurement"):
        probes = write_probes(Path(scratch) / "fp32")
        for runtime, precision in pairs:
            if runtime not in device.runtimes:
                continue
            files = probes if precision == "fp32" else _converted(
                runtime, precision, probes, Path(scratch) / precision)
            benches = _timed(device, files, rounds, threads)
            seen = dict(next(iter(benches.values())).device)
            timed[key(runtime, precision)] = tuple(
                ProbeTiming(name=name, features=features(probes[name]), ms=bench.p50_ms)
                for name, bench in benches.items())
    return Calibration(profile=profile_id, device=device.label,
                       machine=str(seen.get("machine", "")), cpu=str(seen.get("cpu", "")),
                       threads=threads, when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       emulated=emulated(seen), timed=timed)


def _converted(runtime: str, precision: str, probes: Mapping[str, Path],
               folder: Path) -> dict[str, Path]:
    """Each probe converted by the runtime's target at ``precision``."""
    target, files = get_target(runtime), {}
    for name, path in probes.items():
        model = inspect_model(path)
        rng = np.random.default_rng(0)
        feeds = tuple({t.name: rng.standard_normal(
            [d if isinstance(d, int) and d > 0 else 1 for d in t.shape]).astype(np.float32)
            for t in model.inputs} for _ in range(SAMPLES))
        files[name], _ = target.convert(model, precision, calib=Dataset(feeds=feeds),
                                        workdir=folder / name)
    return files


def _timed(device: Device, files: Mapping[str, Path], rounds: Rounds,
           threads: int) -> dict[str, BenchResult]:
    """The files stored on the device and timed in one interleaved bench."""
    remote = {name: store(device, path, f"probe-{name}-{path.stem}")[0]
              for name, path in files.items()}
    return time_on_device(device, remote, rounds, threads=threads, observe=False)


def summary(calibration: Calibration) -> list[str]:
    """One line per calibrated runtime and precision: its probes and held-out error."""
    if calibration.emulated:
        return [f"{calibration.device} runs under an emulator ({calibration.machine} python "
                f"on {calibration.cpu}): its {len(calibration.timed)} calibration(s) are kept "
                "but never fitted (they time the emulator, not the device)"]
    lines = []
    for found in calibration.timed:
        runtime, precision = found.split("|")
        model = fitted(calibration, runtime, precision)
        lines.append(f"{runtime} {precision}: {_line(model, model.probes if model else 0)}")
    return lines


def _line(model: Fitted | None, probes: int) -> str:
    if model is None:
        return "too few timings to fit"
    errors = sorted(abs(e) for e in model.loo_errors)
    return (f"{probes} timings; held out one at a time, the median error "
            f"{100 * errors[len(errors) // 2]:.0f}%, the largest {100 * errors[-1]:.0f}%")
