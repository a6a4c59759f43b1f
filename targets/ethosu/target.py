"""Arm Ethos-U NPUs: the TFLite target's full-int8 model, compiled by Vela for the profile's NPU.

Conversion reuses the TFLite target's onnx2tf run (the work directory is shared), takes its
full-integer model with int8 inputs and outputs (an Ethos-U runs int8 only; float QUANTIZE /
DEQUANTIZE at the edges would stay on the CPU), and compiles it with Vela for the accelerator,
system configuration and memory mode of the profile (``targets.ethosu.vela``).

The artifact (``*.vela.tflite``) holds an ``ethos-u`` custom operator that only the NPU runs, so
this host verifies the int8 model it was compiled from (its companion, ``*.int8``) with
LiteRT's reference kernels, which the Ethos-U is built to match; Vela's performance estimate is
offered as a vendor estimate (``estimate``), never as a measurement.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.plan import FALLBACK_NOTE
from edge.core.toolchain import unbuilt
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision, workdir_lock
from targets.ethosu.vela import (
    TOOLCHAIN,
    VELA,
    VelaConfig,
    VelaError,
    VelaReport,
    compile_model,
    load_report,
    save_report,
)
from targets.tflite import TFLiteTarget
from targets.tflite.litert_runner import TFLiteRunner

__all__ = ["COMPANION", "NPU_ONNX_OPS", "SUFFIX", "EthosUTarget", "source_of"]

SUFFIX = ".vela.tflite"
COMPANION = ".int8"  # the int8 .tflite Vela compiled, verified here with the reference kernels
REPORT = ".json"  # Vela's summary, beside the artifact
ONNX2TF_DIR = "."  # the TFLite target's work directory: one onnx2tf run for both
DEFAULT_SETTINGS = ConvertSettings()
#: ONNX ops that onnx2tf lowers to TFLite builtins Vela 5.2.0 places on an Ethos-U55/U65 in
#: int8 (Vela's SUPPORTED_OPS.md, by operator; its per-operator constraints on shapes, strides
#: and ranks are not modelled): anything else is predicted to run on the CPU.
NPU_ONNX_OPS = frozenset({
    "Abs", "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Constant", "Conv",
    "ConvTranspose", "DepthToSpace", "Dropout", "Exp", "Flatten", "Gemm", "GlobalAveragePool",
    "GlobalMaxPool", "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log", "MatMul",
    "Max", "MaxPool", "Min", "Mul", "Pad", "PRelu", "ReduceMax", "ReduceMean", "Relu",
    "Reshape", "Resize", "Sigmoid", "Slice", "Softmax", "SpaceToDepth", "Split", "Squeeze",
    "Sub", "Tanh", "Transpose", "Unsqueeze",
})


class EthosUTarget:
    """An Arm Ethos-U55/U65 through Vela; verified here on LiteRT's reference kernels."""

    name: ClassVar[str] = "ethos-u"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="ethos-u", precisions=("int8",), suffix=SUFFIX, companions=(COMPANION,),
        converts_with="tflite",  # shares the TFLite target's work directory: one onnx2tf run
        # i.MX 93's Cortex-A55; 32-bit Arm hosts of an Ethos-U; Cortex-M55 microcontrollers
        archs=("aarch64", "armv7l", "armv8.1-m"),
        modules=TFLiteTarget.caps.modules, extra="tflite",
        converters=TFLiteTarget.caps.converters, toolchain=TOOLCHAIN, recipe=1,
        accelerator="Arm Ethos-U NPU", host_runs="reference")

    def missing(self) -> str | None:
        """The TFLite target's converter and runtime packages, then Vela's toolchain
        environment (built only when asked)."""
        return TFLiteTarget().missing() or unbuilt(TOOLCHAIN)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """The Vela-compiled int8 model for the profile's NPU (or the one made before)."""
        check_precision(self, precision)
        config = _config(settings)
        source, run = TFLiteTarget().variant(model, "int8-io", calib=calib,
                                             workdir=Path(workdir) / ONNX2TF_DIR)
        artifact = Path(workdir) / f"model_{config.slug}{SUFFIX}"
        with no_space_as(artifact), workdir_lock(Path(workdir) / f"vela_{config.slug}"):
            report = load_report(artifact.with_suffix(REPORT))
            if report is None or not artifact.is_file() or not source_of(artifact).is_file():
                report = _compile(source, artifact, config)
        return artifact, _notes(run, report, settings)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """The int8 model the artifact was compiled from, on LiteRT's reference kernels.

        The artifact's Ethos-U operator runs only on the NPU; the reference kernels are what
        the NPU's int8 arithmetic is built to match (TFLite Micro's reference results), so
        they, not LiteRT's optimized CPU kernels, stand for it here. Single-threaded.
        """
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        source = source_of(Path(artifact))
        if not source.is_file():
            raise ConversionError(f"{Path(artifact).name}: the int8 model it was compiled from "
                                  f"({source.name}) is not beside it")
        interp = Interpreter(model_path=str(source), num_threads=1,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        return TFLiteRunner(interp, model)

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """Vela's per-inference estimate for the NPU it compiled for (None: no report)."""
        report = load_report(Path(artifact).with_suffix(REPORT))
        return None if report is None else _estimate(report)

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """ONNX ops predicted to stay on the CPU (None when the model lists no ops)."""
        if not model.ops:
            return None
        return tuple(sorted(op for op in model.ops if op not in NPU_ONNX_OPS))


def source_of(artifact: Path) -> Path:
    """The int8 .tflite beside an artifact: ``X.vela.tflite`` -> ``X.int8`` (companions are
    named after the file name without its compound suffix, in work folders and bundles)."""
    name = artifact.name
    base = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else artifact.stem
    return artifact.with_name(base + COMPANION)


def _config(settings: ConvertSettings) -> VelaConfig:
    """The profile's accelerator options (issue 28's ConvertSettings.accelerator), checked."""
    try:
        return VelaConfig.from_options(dict(settings.accelerator))
    except VelaError as exc:
        raise ConversionError(str(exc)) from None


def _compile(source: Path, artifact: Path, config: VelaConfig) -> VelaReport:
    """Run Vela; put the companion and report beside the artifact, the artifact last."""
    folder = artifact.with_name(f"vela_{config.slug}")
    try:
        compiled, report = compile_model(source, folder, config)
    except VelaError as exc:
        raise ConversionError(str(exc)) from None
    partial = artifact.with_name(f".{artifact.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, source_of(artifact))
        save_report(report, artifact.with_suffix(REPORT))
        os.replace(compiled, artifact)
    finally:
        partial.unlink(missing_ok=True)
    return report


def _estimate(report: VelaReport) -> BenchResult:
    """Vela's figures as a BenchResult labelled a vendor estimate."""
    ms = 1000.0 * report.inference_time_s
    return BenchResult(
        where=f"Vela {report.vela} estimate for {report.config.label}", runtime="ethos-u",
        runs=0, warmup=0, threads=0, p50_ms=ms, p90_ms=ms, p99_ms=ms, mean_ms=ms,
        throughput_fps=report.inferences_per_second,
        metrics={"sram_kib": report.sram_kib, "dram_kib": report.dram_kib,
                 "cycles": report.cycles, "npu_ops": report.npu_ops, "cpu_ops": report.cpu_ops,
                 "inferences_per_second": report.inferences_per_second,
                 "estimated_by": f"Vela {report.vela}"},
        source="estimate")


def _notes(run: dict[str, Any], report: VelaReport,
           settings: ConvertSettings) -> tuple[str, ...]:
    """What the artifact is, Vela's estimate and split, and how it is verified here."""
    notes = [f"onnx2tf {run['onnx2tf']}: {run['files']['int8-io']}, full-integer int8 with "
             "int8 I/O, compiled by Vela",
             f"calibrated on {run['calibration_samples']} samples, as given (mean 0, std 1)",
             f"{report.summary} (vendor estimate, not a measurement)"]
    if report.cpu_fallbacks:
        notes.append(FALLBACK_NOTE + ", ".join(report.cpu_fallbacks))
    if settings.keep_float or settings.calibration != DEFAULT_SETTINGS.calibration:
        notes.append("calibration and keep_float settings are not applied: onnx2tf's min-max "
                     "calibration, every op int8 (a float op would leave the NPU)")
    notes.append(f"the Ethos-U operator runs only on the NPU: verified on this host with "
                 f"LiteRT's reference kernels on the int8 model Vela {VELA} compiled")
    return tuple(notes)
