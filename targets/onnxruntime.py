"""ONNX Runtime: the fp32 reference and static int8 (QDQ, per-channel) artifacts."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import ClassVar

import numpy as np

from edge.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings

DEFAULT_SETTINGS = ConvertSettings()

__all__ = ["OnnxRuntimeTarget", "OrtRunner"]


class OrtRunner:
    """An ONNX Runtime session on the CPU."""

    def __init__(self, path: Path, *, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(path), options,
                                             providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the model's order."""
        return list(self._session.run(None, feeds))


class OnnxRuntimeTarget:
    """ONNX Runtime on the device CPU."""

    name: ClassVar[str] = "onnxruntime"
    runtime: ClassVar[str] = "onnxruntime"
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "int8")
    suffix: ClassVar[str] = ".onnx"

    def missing(self) -> str | None:
        """ONNX Runtime is a core dependency; report if it is absent anyway."""
        if importlib.util.find_spec("onnxruntime") is None:
            return "onnxruntime is not installed (pip install onnxruntime)"
        return None

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """fp32: the source model itself; int8: static QDQ, per-channel, MinMax calibration."""
        workdir.mkdir(parents=True, exist_ok=True)
        if precision == "fp32":
            out = workdir / "model_fp32.onnx"
            _atomic_copy(Path(model.path), out)
            return out, ("source model; ONNX Runtime optimizes the graph at load",)
        if precision == "int8":
            return _quantize_static(model, calib, workdir), (
                "static QDQ, int8 weights per channel, int8 activations, MinMax calibration",)
        raise ConversionError(f"onnxruntime has no {precision} path; choose one of "
                              f"{', '.join(self.precisions)}")

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> OrtRunner:
        """A CPU session with ``threads`` intra-op threads."""
        return OrtRunner(artifact, threads=threads)


class _Reader:
    """Feeds calibration samples to onnxruntime.quantization."""

    def __init__(self, data: Dataset) -> None:
        self._iter = iter(data.feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)


def _quantize_static(model: ModelInfo, calib: Dataset, workdir: Path) -> Path:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = workdir / "model_int8_qdq.onnx"
    if out.is_file():
        return out
    prepared = workdir / "prepared.onnx"
    partial = workdir / "model_int8_qdq.onnx.partial"
    try:
        quant_pre_process(model.path, str(prepared), skip_symbolic_shape=True)
        quantize_static(str(prepared), str(partial), _Reader(calib),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
    except Exception as exc:  # the quantizer raises many types; report one line
        raise ConversionError(f"onnxruntime int8 quantization failed: {_one_line(exc)}") from exc
    partial.replace(out)
    return out


def _atomic_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".partial")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
