"""Google Edge TPU (Coral): the TFLite target's full-int8 model, compiled by ``edgetpu_compiler``.

The int8 model with int8 I/O (onnx2tf's ``*_full_integer_quant.tflite``, shared with the
TFLite target's run: no QUANTIZE / DEQUANTIZE at the edges, which the Edge TPU would leave to
the CPU) is copied beside the artifact, and the compiler turns it into ``model.edgetpu.tflite``:
one ``edgetpu-custom-op`` holding the Edge TPU's program, plus any operators it left to the CPU
(its log says which: the artifact's notes carry them as "cpu fallback: OpA, OpB").

Verification here (``load``): the compiled file runs only on an Edge TPU, so edge runs the int8
model it was compiled from -- the same quantized graph -- with LiteRT's reference kernels
(``OpResolverType.BUILTIN_REF``: the plain, unoptimized int8 kernels TFLite specifies its ops
by), per output against the reference. That shows the quantization keeps fidelity; whether the
Edge TPU computes bit-exactly the same shows only on the device.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

from edge.core.capabilities import Capabilities
from edge.core.errors import UsageError
from edge.core.files import no_space_as
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision
from targets.edgetpu import compiler, ops
from targets.tflite import TFLiteRunner, TFLiteTarget

__all__ = ["ARTIFACT", "SOURCE", "SUFFIX", "EdgeTPUTarget"]

SUFFIX = ".edgetpu.tflite"
ARTIFACT = f"model{SUFFIX}"
#: The int8 model the artifact was compiled from, kept beside it for the host's verification.
SOURCE = "model_edgetpu_source.tflite"
ONNX2TF_DIR = "."  # the TFLite target's workdir: shared, so onnx2tf runs once for both
DEFAULT_SETTINGS = ConvertSettings()


class EdgeTPUTarget:
    """The Edge TPU of a Coral board or accelerator: one compiled int8 .tflite."""

    name: ClassVar[str] = "edgetpu"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="edgetpu", precisions=("int8",), suffix=SUFFIX,
        converts_with="tflite",  # shares the TFLite target's work directory: one onnx2tf run
        archs=("aarch64", "armv7l", "x86_64"),  # libedgetpu's builds (Dev Board: aarch64)
        modules=TFLiteTarget.caps.modules, extra="tflite",
        converters=TFLiteTarget.caps.converters, recipe=1,
        accelerator="Google Edge TPU", host_runs="reference")
    timeout_s: ClassVar[float] = 600.0

    def missing(self) -> str | None:
        """The TFLite target's packages, then the Edge TPU compiler and how to get it."""
        return TFLiteTarget().missing() or (None if compiler.find() else compiler.HOW_TO_GET)

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """Operators Coral's table leaves to the CPU, from the ONNX graph (None: unreadable)."""
        try:
            return ops.predict(ops.onnx_ops(Path(model.path)))
        except Exception:  # noqa: BLE001 - a prediction for the plan, never a failure
            return None

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: the Edge TPU compiler gives no time estimate (only the device measures)."""
        return None

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Compile the shared int8 model; the compiler's verdict per operator in the notes."""
        check_precision(self, precision)
        workdir = Path(workdir)
        source, run = TFLiteTarget().variant(model, "int8-io", calib=calib,
                                             workdir=workdir / ONNX2TF_DIR)
        with no_space_as(workdir / ARTIFACT):  # a full disk: one line naming the artifact
            log = _compile(source, workdir, self.timeout_s, dict(settings.accelerator))
        return workdir / ARTIFACT, _notes(run, log, source, settings)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """The int8 model the artifact was compiled from, on LiteRT's reference kernels."""
        source = Path(artifact).with_name(SOURCE)
        if not source.is_file():
            raise UsageError(f"{Path(artifact).name} runs only on an Edge TPU, and the int8 "
                             f"model it was compiled from ({SOURCE}) is not beside it: "
                             "verify it where it was compiled")
        return TFLiteRunner(_reference_interpreter(source, threads), model)


def _compile(source: Path, workdir: Path, timeout_s: float,
             options: dict[str, str]) -> compiler.CompileLog:
    """Run the compiler in a private folder; move its output and the source in place last."""
    scratch = workdir / f".edgetpu.{os.getpid()}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        shutil.copyfile(source, scratch / "model.tflite")
        compiled, log = compiler.compile_model(scratch / "model.tflite", scratch,
                                               timeout_s=timeout_s, options=options)
        if log.on_tpu == 0:
            raise ConversionError(f"{compiler.COMPILER} {log.version} mapped no operator to "
                                  f"the Edge TPU: {'; '.join(log.reasons()) or 'no log'}")
        os.replace(scratch / "model.tflite", workdir / SOURCE)
        os.replace(compiled, workdir / ARTIFACT)  # last: the artifact means both are there
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return log


def _reference_interpreter(path: Path, threads: int) -> Any:
    """LiteRT's interpreter with the reference kernels (no XNNPACK, no optimized kernels)."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise UsageError(f"verifying {path.name} needs ai_edge_litert: pip install "
                         "'edge[tflite]'") from None
    return Interpreter(model_path=str(path), num_threads=threads if threads > 0 else None,
                       experimental_op_resolver_type=OpResolverType.BUILTIN_REF)


def _notes(run: dict[str, Any], log: compiler.CompileLog, source: Path,
           settings: ConvertSettings) -> tuple[str, ...]:
    """What was compiled, what the compiler mapped, and how it was verified here."""
    notes = [f"onnx2tf {run['onnx2tf']}: {run['files']['int8-io']}, full-integer int8 with "
             "int8 I/O: the runner quantizes inputs and dequantizes outputs on the CPU",
             f"calibrated on {run['calibration_samples']} samples, as given (mean 0, std 1)",
             f"{compiler.COMPILER} {log.version}: {log.on_tpu} operator"
             f"{'s' * (log.on_tpu != 1)} on the Edge TPU, {log.on_cpu} on the CPU"
             f" ({log.subgraphs or 1} Edge TPU subgraph)"]
    if log.fallbacks:
        notes.append(f"cpu fallback: {', '.join(log.fallbacks)}")
        notes.append(f"the compiler's reasons: {'; '.join(log.reasons())}")
    predicted = ops.predict(ops.tflite_ops(source))
    notes.append("Coral's supported-operations table predicted "
                 + (f"CPU fallback for {', '.join(predicted)}" if predicted
                    else "every operator on the Edge TPU"))
    if settings.calibration != "minmax" or settings.keep_float:
        notes.append("calibration and keep_float settings are not applied: onnx2tf's min-max "
                     "calibration, every op int8 (a float op would leave the Edge TPU)")
    notes.append("the Edge TPU cannot run on this host: verified with the int8 model it was "
                 "compiled from on LiteRT's reference kernels (BUILTIN_REF)")
    return tuple(notes)
