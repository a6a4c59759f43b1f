"""TensorRT: the ONNX a device's TensorRT builds its engine from, made and verified here.

An engine runs only on the GPU model and TensorRT version that built it, so the artifact is an
ONNX model (``.trt.onnx``) and the device builds the engine (targets/tensorrt/agent.py). Here:

- fp32: the reference ONNX as it is; the device builds it with TF32 off.
- fp16: the reference converted to float16 (onnxconverter-common: float16 weights and compute,
  float32 inputs and outputs). TensorRT 11 builds only strongly typed networks (its FP16 flag is
  gone), so the types must be in the ONNX; TensorRT 8.5-10 build it with the FP16 flag. This host
  runs that very file in ONNX Runtime's CPU kernels, which round at least as much as TensorRT's
  fp16 kernels (they accumulate in fp32).
- int8: explicit quantization, the form TensorRT builds from an ONNX: QuantizeLinear /
  DequantizeLinear pairs with symmetric int8 activations and per-channel int8 weights (zero
  points 0), calibrated on the calibration set (onnxruntime.quantization, QDQ format); verified
  by running that same graph in ONNX Runtime on this host's CPU.

The companion ``.npz`` holds the build settings (flags, workspace) and a few calibration samples
with the reference model's outputs: the device checks its engine against them per output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
from onnxconverter_common import float16
from onnxruntime import quantization as q
from onnxruntime.quantization.shape_inference import quant_pre_process

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.files import no_space_as
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import (
    ConversionError,
    ConvertSettings,
    check_precision,
    missing_modules,
    scratch_dir,
)
from targets.onnxruntime import OrtRunner, constants_to_initializers, name_nodes
from targets.tensorrt.agent import COMPANION, SUFFIXES, agreement

__all__ = ["DEFAULT_WORKSPACE_MB", "FILES", "FLOORS", "REFERENCE_SAMPLES", "TensorRTTarget",
           "TrtHostRunner", "build_settings", "companion_of", "read_settings", "threshold"]

SUFFIX = SUFFIXES[0]
#: precision -> artifact file name inside the workdir (its companion: ``model_<p>.npz``).
FILES = {p: f"model_{p}{SUFFIX}" for p in ("fp32", "fp16", "int8")}
#: precision -> the builder flags the device sets (and clears: TF32 would round fp32 inputs).
FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "fp32": ((), ("TF32",)), "fp16": (("FP16",), ("TF32",)), "int8": (("INT8",), ("TF32",))}
#: The builder's workspace when the profile's accelerator gives no ``workspace_mb`` option.
DEFAULT_WORKSPACE_MB = 1024
#: Calibration samples the companion carries, with the reference's outputs on them.
REFERENCE_SAMPLES = 8
#: precision -> the agreement (cosine; equal fraction for integer outputs) an engine's output
#: must reach on the device; an output that lost more here (1 - agreement) may lose up to
#: ``ERROR_FACTOR`` times that there (TensorRT's kernels round differently, not less).
FLOORS = {"fp32": 0.9999, "fp16": 0.999, "int8": 0.99}
ERROR_FACTOR = 2.0
#: Q/DQ as TensorRT's ONNX parser takes it: symmetric (zero points 0), float weights behind a
#: QuantizeLinear/DequantizeLinear pair (TensorRT folds them), biases left float (TensorRT
#: quantizes none: an int32 DequantizeLinear is not for it).
QDQ_OPTIONS = {"ActivationSymmetric": True, "WeightSymmetric": True, "AddQDQPairToWeight": True,
               "QuantizeBias": False}
#: ConvertSettings.calibration -> onnxruntime.quantization.CalibrationMethod member name.
CALIBRATION = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
_NOTES = ".notes.json"
DEFAULT_SETTINGS = ConvertSettings()


#: What this host runs for a TensorRT artifact: ONNX Runtime's CPU session (the ONNX Runtime
#: target's), on the artifact itself: the graph the device's TensorRT builds.
TrtHostRunner = OrtRunner


class TensorRTTarget:
    """NVIDIA GPUs through TensorRT: the ONNX made and checked here, the engine built there."""

    name: ClassVar[str] = "tensorrt"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="tensorrt", precisions=("int8", "fp16", "fp32"), suffix=SUFFIX,
        companions=(COMPANION,), modules=("onnxruntime", "onnxconverter_common"),
        converters=("onnxruntime", "onnx", "onnxconverter-common"), recipe=1,
        accelerator="NVIDIA GPU (TensorRT)", host_runs="cpu")

    def missing(self) -> str | None:
        """ONNX Runtime and onnxconverter-common make and check the ONNX here."""
        return missing_modules(self.caps)

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...]:
        """Nothing: TensorRT runs the whole network on the GPU; an operator its parser lacks
        fails the engine's build on the device, it is never run on the CPU."""
        return ()

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: TensorRT offers no estimate without the GPU (the agent times the engine)."""
        return None

    def convert(self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
                settings: ConvertSettings = DEFAULT_SETTINGS) -> tuple[Path, tuple[str, ...]]:
        """Write (or reuse) this precision's ONNX and companion in ``workdir``."""
        check_precision(self, precision)
        out = Path(workdir) / FILES[precision]
        notes = _cached_notes(out)
        if notes is not None:
            return out, notes
        options = dict(settings.accelerator)
        with no_space_as(out), scratch_dir(Path(workdir), ".trt-") as scratch:
            partial = scratch / out.name
            method = CALIBRATION.get(settings.calibration, "")
            notes = _build(model, precision, calib, partial, scratch, method)
            build = build_settings(precision, options)
            _write_companion(partial, model, precision, build, calib)
            notes += (_build_note(build),)
            _publish(partial, out, notes)
        return out, notes

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TrtHostRunner:
        """ONNX Runtime on this host's CPU, running the artifact itself."""
        return TrtHostRunner(Path(artifact), threads=threads)


# ---------------------------------------------------------------- the ONNX per precision


def _build(model: ModelInfo, precision: str, calib: Dataset, dst: Path, scratch: Path,
           method: str) -> tuple[str, ...]:
    if precision == "int8":
        return _quantize(model, calib, dst, scratch, method)
    if precision == "fp16":
        return _half(model, dst)
    shutil.copyfile(model.path, dst)
    return ("the reference ONNX; the device's TensorRT builds it in fp32 (TF32 off). Verified "
            "here in ONNX Runtime's CPU kernels",)


def _quantize(model: ModelInfo, calib: Dataset, dst: Path, scratch: Path,
              method: str) -> tuple[str, ...]:
    """Explicit Q/DQ for TensorRT: symmetric int8 activations, per-channel int8 weights."""
    if not len(calib):
        raise ConversionError("tensorrt int8 needs calibration samples; none were given")
    if not method:
        raise ConversionError(f"unknown calibration; choose one of {', '.join(CALIBRATION)}")
    source = _prepared(model, scratch)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            q.quantize_static(
                str(source), str(dst), _Reader(calib), quant_format=q.QuantFormat.QDQ,
                per_channel=True, activation_type=q.QuantType.QInt8,
                weight_type=q.QuantType.QInt8,
                calibrate_method=getattr(q.CalibrationMethod, method),
                extra_options=QDQ_OPTIONS)
    except Exception as exc:  # the quantizer raises many types; report one line
        raise ConversionError(f"tensorrt int8 quantization failed: {first_line(exc)}") from exc
    return (f"explicit quantization for TensorRT: Q/DQ with symmetric int8 activations and "
            f"per-channel int8 weights (zero points 0, biases float), {method} calibration on "
            f"{len(calib)} samples; the device builds it with the INT8 flag. Verified here by "
            "running the "
            "same Q/DQ graph in ONNX Runtime's CPU kernels",)


def _prepared(model: ModelInfo, scratch: Path) -> Path:
    """The reference with named nodes, constants as initializers, opset >= 13 (per-channel
    DequantizeLinear) and ORT's quantization pre-processing when it succeeds."""
    proto = name_nodes(onnx.load(model.path))
    constants_to_initializers(proto)
    if model.opset < 13:
        try:
            proto = onnx.version_converter.convert_version(proto, 13)
        except Exception as exc:  # noqa: BLE001 - the converter raises many types
            raise ConversionError(f"tensorrt int8 needs opset 13 (per-channel Q/DQ); upgrading "
                                  f"opset {model.opset} failed: {first_line(exc)}") from None
    normalized = scratch / "normalized.onnx"
    onnx.save(proto, str(normalized))
    try:
        quant_pre_process(str(normalized), str(scratch / "pre.onnx"), skip_symbolic_shape=True)
    except Exception:  # noqa: BLE001 - pre-processing is an optimization only
        return normalized
    return scratch / "pre.onnx"


class _Reader:
    """Feeds calibration samples to onnxruntime.quantization."""

    def __init__(self, data: Dataset) -> None:
        self._iter = iter(data.feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)


def _half(model: ModelInfo, dst: Path) -> tuple[str, ...]:
    """The reference in float16 with float32 inputs and outputs (types TensorRT 11 obeys)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            half = float16.convert_float_to_float16(onnx.load(model.path), keep_io_types=True)
        onnx.checker.check_model(half)
    except Exception as exc:  # noqa: BLE001 - the converter and the checker raise many types
        raise ConversionError(f"tensorrt fp16 conversion failed: {first_line(exc)}") from None
    onnx.save(half, str(dst))
    clipped = sum("truncated" in str(w.message) for w in caught)
    return ("float16 weights and compute (onnxconverter-common), float32 inputs and outputs: "
            "TensorRT 11 builds these types as they are, TensorRT 8.5-10 with the FP16 flag "
            "(TF32 off). Verified here by running this file in ONNX Runtime's CPU kernels",
            *([f"{clipped} weight value(s) outside float16's range or below its smallest normal "
               "were clipped"] if clipped else []))


# ---------------------------------------------------------------- the companion


def build_settings(precision: str, options: dict[str, str]) -> dict[str, object]:
    """The builder settings the device uses: flags to set and clear, the workspace (MiB)."""
    flags, cleared = FLAGS[precision]
    raw = options.get("workspace_mb", str(DEFAULT_WORKSPACE_MB))
    if not raw.isdigit() or int(raw) < 1:
        raise ConversionError(f"tensorrt: the profile's workspace_mb option must be a whole "
                              f"number of MiB, got {raw!r}")
    return {"flags": list(flags), "clear_flags": list(cleared), "workspace_mb": int(raw)}


def _build_note(build: dict[str, object]) -> str:
    flags = ", ".join(build["flags"]) or "none"  # type: ignore[arg-type]
    return (f"engine built on the device (tied to its GPU and TensorRT version): flags {flags}, "
            f"workspace {build['workspace_mb']} MiB; checked there against the reference's "
            f"outputs on {REFERENCE_SAMPLES} calibration samples")


def _write_companion(artifact: Path, model: ModelInfo, precision: str,
                     build: dict[str, object], calib: Dataset) -> None:
    """Samples, the reference's outputs on them, and per-output thresholds from the host's run
    of the artifact."""
    feeds = list(calib.feeds[:REFERENCE_SAMPLES])
    if not feeds:
        raise ConversionError("tensorrt needs at least one calibration sample to check the "
                              "engine on the device")
    want = [TrtHostRunner(Path(model.path), threads=1).run(f) for f in feeds]
    got = [TrtHostRunner(artifact, threads=1).run(f) for f in feeds]
    inputs = [i.name for i in model.inputs]
    outputs = [o.name for o in model.outputs]
    host = [min(agreement(np, g[j], w[j]) for g, w in zip(got, want, strict=True))
            for j in range(len(outputs))]
    settings = {"precision": precision, "build": build, "inputs": inputs, "outputs": outputs,
                "shapes": [list(feeds[0][n].shape) for n in inputs],
                "host_agreement": host,
                "thresholds": [threshold(precision, h) for h in host]}
    arrays: dict[str, Any] = {f"input_{i}": np.stack([f[n] for f in feeds])
                              for i, n in enumerate(inputs)}
    arrays |= {f"output_{j}": np.stack([w[j] for w in want]) for j in range(len(outputs))}
    arrays["settings"] = np.array(json.dumps(settings))
    with open(companion_of(artifact), "wb") as handle:
        np.savez(handle, **arrays)


def companion_of(artifact: Path) -> Path:
    """``X.npz`` beside ``X.trt.onnx`` (as edge's bundles and a device's release name it)."""
    name = artifact.name
    return artifact.with_name((name[:-len(SUFFIX)] if name.endswith(SUFFIX)
                               else artifact.stem) + COMPANION)


def threshold(precision: str, host: float) -> float:
    """The agreement an output must reach on the device, given the host run's."""
    return 1.0 - max(1.0 - FLOORS[precision], ERROR_FACTOR * (1.0 - host))


def read_settings(artifact: Path) -> dict[str, Any]:
    """The settings in an artifact's companion."""
    try:
        with np.load(companion_of(Path(artifact)), allow_pickle=False) as data:
            return dict(json.loads(str(data["settings"])))
    except (OSError, KeyError, ValueError):
        raise ConversionError(f"{artifact}: its companion {companion_of(Path(artifact)).name} "
                              "with the build settings is missing or unreadable") from None


# ---------------------------------------------------------------- cache (atomic, with notes)


def _cached_notes(out: Path) -> tuple[str, ...] | None:
    """The notes of a finished artifact (written last), else None."""
    try:
        notes = json.loads(out.with_name(out.name + _NOTES).read_text())
    except (OSError, ValueError):
        return None
    ready = out.is_file() and companion_of(out).is_file()
    return tuple(notes) if ready else None


def _publish(partial: Path, out: Path, notes: tuple[str, ...]) -> None:
    """Rename the ONNX and its companion into place, then the notes (the completion mark)."""
    tmp_notes = partial.with_name(partial.name + _NOTES)
    tmp_notes.write_text(json.dumps(list(notes)))
    os.replace(companion_of(partial), companion_of(out))
    os.replace(partial, out)
    os.replace(tmp_notes, out.with_name(out.name + _NOTES))


