"""A device's latency model learns from every deploy to it: the deployed model's p50 on the
device, with its features (from the bundle's reference ONNX), joins the probe timings of the
profile's calibration — only when that calibration was made on this very device, never an
emulator's, and only for a runtime and precision the device was calibrated for."""

from __future__ import annotations

import logging
from pathlib import Path

from edge.core.latency.model import features
from edge.core.latency.store import ProbeTiming, add_model, emulated, kept, key
from edge.core.results import keep as keep_measurement
from edge.core.values import Bundle, DeployReport

__all__ = ["keep_result", "learn"]

log = logging.getLogger("edge")


def keep_result(report: DeployReport, bundle: Bundle | None = None, *,
                regressed: bool = False) -> Path:
    """The measurement kept in the device's history (``edge.core.results.keep``), and, given
    the bundle it came from, taught to the device's latency model (``learn``)."""
    path = keep_measurement(report, regressed=regressed)
    if bundle is not None:
        learn(report, bundle)
    return path


def learn(report: DeployReport, bundle: Bundle) -> bool:
    """Add the deployed model's device timing to its profile's calibration (see the module);
    whether it was added. A reference that cannot be read teaches nothing, said in the log."""
    bench = report.bench
    found = next((r for r in bundle.candidates if r.candidate.id == report.candidate), None)
    if found is None or found.artifact is None or bench.source != "device" \
            or emulated(bench.device):
        return False
    wanted = key(found.artifact.runtime, found.candidate.precision)
    calibration = kept(report.profile)
    if calibration is None or wanted not in calibration.timed:
        return False
    try:
        seen = features(bundle.source.path)
    except Exception as exc:  # noqa: BLE001 - onnx's own errors: nothing learnt, said
        log.info("latency model of %s not taught: %s", report.profile, exc)
        return False
    timing = ProbeTiming(name=report.artifact_sha256[:16], features=seen, ms=bench.p50_ms)
    return add_model(report.profile, report.target, wanted, timing)
