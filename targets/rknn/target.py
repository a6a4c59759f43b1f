"""The RKNN target: a Rockchip NPU's .rknn, fp16 or int8 calibrated on the calibration set, made
by rknn-toolkit2 in its own environment for the SoC the device profile names (its NPU
accelerator's ``options.platform``, default rk3588), verified here in the toolkit's simulator.

Which operators run on the CPU: after a conversion, those the compiler's layer table places
there (a note ``cpu fallback: ...``); before one, ``predict_fallbacks`` from the ONNX operators
(targets.rknn.ops).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from edge.core.capabilities import Capabilities
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.rknn.convert import PLATFORMS, RKNNConverter
from targets.rknn.ops import predict_cpu_ops
from targets.rknn.simulator import SimulatorRunner

__all__ = ["DEFAULT_PLATFORM", "RKNNTarget", "platform"]

#: The SoC built for when the profile's NPU names none (the ROCK 5B's and Orange Pi 5's).
DEFAULT_PLATFORM = "rk3588"
DEFAULT_SETTINGS = ConvertSettings()


class RKNNTarget:
    """rknn-toolkit2 for the profile's Rockchip SoC; load() runs its simulator."""

    name: ClassVar[str] = "rknn"
    caps: ClassVar[Capabilities] = replace(RKNNConverter.caps, accelerator="Rockchip NPU",
                                           host_runs="simulated")

    def missing(self) -> str | None:
        """rknn-toolkit2's toolchain environment, while it is not built (edge toolchains
        install: edge builds it only when asked)."""
        return RKNNConverter(DEFAULT_PLATFORM).missing()

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """The .rknn for the profile's SoC; notes name the operators left on the CPU."""
        converter = RKNNConverter(platform(settings))
        return converter.convert(model, precision, calib=calib, workdir=workdir,
                                 settings=settings)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> SimulatorRunner:
        """The artifact rebuilt in rknn-toolkit2's simulator, one child kept for every run
        (``threads`` does not apply: the simulator decides)."""
        return SimulatorRunner(artifact, model)

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """The model's ONNX operators rknn-toolkit2 2.5.0 leaves on the CPU; None when none is
        known to: the compiler may still add CPU layers (a Reshape feeding an output), so
        only a conversion can say that every operator runs on the NPU."""
        return predict_cpu_ops(model.ops) or None

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: the toolkit's performance estimate (eval_perf) needs a connected board; the
        simulator's times are not the NPU's."""
        return None


def platform(settings: ConvertSettings) -> str:
    """The SoC from the profile's accelerator options (``platform``), else the default."""
    options = dict(settings.accelerator)
    chosen = options.get("platform", DEFAULT_PLATFORM)
    if chosen not in PLATFORMS:
        raise ConversionError(f"rknn-toolkit2 does not build for platform {chosen!r} (the "
                              f"profile's NPU options); choose one of {', '.join(PLATFORMS)}")
    return chosen

