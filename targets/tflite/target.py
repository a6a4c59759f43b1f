"""TFLite (LiteRT): one onnx2tf run per workdir makes the fp32, fp16, int8, int8-dynamic files.

The run itself (flags, child process, marker, remembered failures) is
``targets.tflite.onnx2tf_run``; running an artifact with the reference model's names and layouts
is ``targets.tflite.litert_runner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.files import no_space_as
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision, missing_modules
from targets.tflite import nodes
from targets.tflite.litert_runner import TFLiteRunner, interpreter, layout_notes
from targets.tflite.onnx2tf_run import FAILED, FILES, LOG, MARKER, RECIPE, ensure_converted

DEFAULT_SETTINGS = ConvertSettings()

__all__ = ["FAILED", "FILES", "LOG", "MARKER", "TFLiteRunner", "TFLiteTarget"]

_CONVERTER_MODULES = ("onnx2tf", "tensorflow", "tf_keras", "onnx_graphsurgeon", "onnxsim",
                      "sng4onnx")


class TFLiteTarget:
    """LiteRT on the device CPU; onnx2tf converts, TFLite's converter quantizes."""

    name: ClassVar[str] = "tflite"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="tflite", precisions=("fp32", "fp16", "int8", "int8-dynamic"), suffix=".tflite",
        formats=("tflite",),
        converts_in_background=True,  # onnx2tf is a child process: optimize starts it early
        modules=(*_CONVERTER_MODULES, "ai_edge_litert"), extra="tflite",
        converters=("onnx2tf", "tensorflow", "tf-keras", "onnx-graphsurgeon", "onnxsim",
                    "sng4onnx", "ai-edge-litert", "onnx"), recipe=RECIPE, node_outputs=True)
    timeout_s: ClassVar[float] = 3600.0

    def missing(self) -> str | None:
        """Name the first converter or runtime package that is not importable."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Run onnx2tf once for ``workdir`` (or reuse its run); return this precision's file."""
        check_precision(self, precision)
        file, run = self.variant(model, precision, calib=calib, workdir=workdir)
        return file, _notes(precision, model, run, file)

    def variant(self, model: ModelInfo, name: str, *, calib: Dataset,
                workdir: Path) -> tuple[Path, dict[str, Any]]:
        """The file of one ``FILES`` variant and the record of the onnx2tf run that wrote it."""
        with no_space_as(Path(workdir)):  # a full disk: one line naming the work folder
            run = ensure_converted(model, calib, Path(workdir), self.timeout_s)
        if name not in run["files"]:
            raise ConversionError(f"onnx2tf wrote no {name} model: "
                                  f"{run['missing'].get(name, 'unknown reason')}")
        return Path(workdir) / run["files"][name], run

    def node_outputs(self, artifact: Path, model: ModelInfo,
                     feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Every float32 tensor the .tflite computes (``targets.tflite.nodes``)."""
        return nodes.node_outputs(Path(artifact), model, feeds)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """A LiteRT interpreter with ``threads`` threads, wrapped to speak the ONNX layout."""
        return TFLiteRunner(interpreter(Path(artifact), threads), model)


def _notes(precision: str, model: ModelInfo, run: dict[str, Any],
           file: Path) -> tuple[str, ...]:
    """What the artifact is, how its I/O looks next to the model's, what the run cost."""
    kind = {
        "fp32": "float32 weights and compute",
        "fp16": "float16 weights, dequantized to float32 at load; float32 compute",
        "int8": "full-integer quantized: int8 weights (per-channel) and int8 activations",
        "int8-dynamic": "dynamic-range quantized: int8 weights (tensors of 1024+ elements), "
                        "float32 activations quantized at run time",
    }[precision]
    notes = [f"onnx2tf {run['onnx2tf']}: {run['files'][precision]}, {kind}",
             "I/O float32" + (": the model quantizes its inputs and dequantizes its outputs"
                              if precision == "int8" else "")]
    if precision == "int8":
        notes.append(f"calibrated on {run['calibration_samples']} samples, as given "
                     "(mean 0, std 1)")
    if run.get("pseudo_ops"):
        notes.append(f"{', '.join(run['pseudo_ops'])} written with builtin ops (onnx2tf -rtpo, "
                     "its approximations), not as Select-TF ops LiteRT cannot load")
    if run.get("kept_layout"):
        notes.append(f"input layout kept as in the model (onnx2tf -kat): "
                     f"{', '.join(run['kept_layout'])}")
    try:
        notes += layout_notes(file, model, run.get("kept_layout", ()))
    except ValueError as exc:
        raise ConversionError(f"the .tflite does not match the model: {exc}") from None
    except RuntimeError as exc:  # e.g. Select TensorFlow ops (Flex*) LiteRT does not have
        raise ConversionError(f"LiteRT cannot load the .tflite: {first_line(exc)}") from None
    if run.get("fixed_shapes"):
        notes.append(f"symbolic input dims fixed: {' '.join(run['fixed_shapes'])}")
    notes.append(f"one onnx2tf run for all precisions: {run['seconds']:.0f} s, "
                 f"peak {run['peak_rss_mb']:.0f} MB RSS")
    return tuple(notes)
