"""LiteRT from the original .tflite: when no ONNX reference can be made, the user's file is the
reference and its candidates are made from it directly: the file itself (fp32), and fp16, int8
weights (int8-dynamic) and full int8 (int8) variants written by ai-edge-quantizer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.values import Dataset, ModelInfo
from targets.base import (
    ConversionError,
    ConvertSettings,
    check_precision,
    missing_modules,
    workdir_lock,
)

__all__ = ["LiteRTRunner", "LiteRTTarget"]

DEFAULT_SETTINGS = ConvertSettings()
FILES = {"fp32": "original.tflite", "fp16": "model_fp16.tflite",
         "int8-dynamic": "model_int8_dynamic.tflite", "int8": "model_int8.tflite"}
#: precision -> (ai-edge-quantizer recipe, the tensor dtype its output must contain)
_RECIPES = {"fp16": ("weight_only_wf16_afp32", "float16"),
            "int8-dynamic": ("dynamic_wi8_afp32", "int8"), "int8": ("static_wi8_ai8", "int8")}
SIGNATURE = "serving_default"


class LiteRTTarget:
    """The original .tflite on LiteRT, and ai-edge-quantizer's variants of it."""

    name: ClassVar[str] = "litert"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="tflite", precisions=("fp32", "fp16", "int8-dynamic", "int8"), suffix=".tflite",
        modules=("ai_edge_litert", "ai_edge_quantizer"), extra="tflite",
        converters=("ai-edge-quantizer", "ai-edge-litert"), recipe=1, reads=".tflite")

    def missing(self) -> str | None:
        """Name LiteRT or ai-edge-quantizer when not importable."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """The original (fp32) or a quantized variant of it, cached in ``workdir``."""
        check_precision(self, precision)
        if Path(model.path).suffix != ".tflite":
            raise ConversionError(f"litert converts .tflite references, not {model.path}")
        out = Path(workdir) / FILES[precision]
        with workdir_lock(Path(workdir)):
            return out, _cached(out) or _build(model, precision, calib, out)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> LiteRTRunner:
        """A LiteRT interpreter bound to the reference's input and output names."""
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=str(artifact),
                             num_threads=threads if threads > 0 else None)
        return LiteRTRunner(interp, model)


# ---------------------------------------------------------------- conversion (cached)


def _cached(out: Path) -> tuple[str, ...] | None:
    """Notes of a finished artifact; a remembered failure is raised again, not retried."""
    failed = out.with_name(out.name + ".failed.txt")
    if failed.is_file():
        raise ConversionError(f"{failed.read_text().strip()} (remembered: {failed})")
    try:
        notes = json.loads(out.with_name(out.name + ".notes.json").read_text())
    except (OSError, ValueError):
        return None
    return tuple(notes) if out.is_file() else None


def _build(model: ModelInfo, precision: str, calib: Dataset, out: Path) -> tuple[str, ...]:
    """Write the artifact and its notes (last); a failure is written down and raised."""
    try:
        notes = _make(model, precision, calib, out)
    except ConversionError as exc:
        _write(out.with_name(out.name + ".failed.txt"), str(exc).encode())
        raise
    _write(out.with_name(out.name + ".notes.json"), json.dumps(list(notes)).encode())
    return notes


def _make(model: ModelInfo, precision: str, calib: Dataset, out: Path) -> tuple[str, ...]:
    if precision == "fp32":
        tmp = out.with_name(out.name + ".partial")
        shutil.copyfile(model.path, tmp)
        os.replace(tmp, out)
        return ("the original .tflite, unchanged (no ONNX reference could be made)",)
    recipe, dtype = _RECIPES[precision]
    content, folded = prepared(Path(model.path))
    if not _float_weights(content):
        raise ConversionError(f"ai-edge-quantizer {recipe}: {_NO_WEIGHTS}")
    data = _quantized(content, recipe, calib)
    if _count_dtype(data, dtype) <= _count_dtype(content, dtype):
        raise ConversionError(f"ai-edge-quantizer {recipe} made no {dtype} tensor: "
                              f"{_NO_WEIGHTS}")
    _load_check(data)
    _write(out, data)
    calibrated = f", calibrated on {len(calib)} samples" if precision == "int8" else ""
    notes = [f"ai-edge-quantizer {recipe} of the original .tflite{calibrated}"]
    if folded:
        notes.append(f"{folded} weight decoder(s) (DEQUANTIZE/DENSIFY of constants) folded "
                     "into float32 weights first (exact)")
    return tuple(notes)


def _quantized(content: bytes, recipe: str, calib: Dataset) -> bytes:
    """The model quantized with an ai-edge-quantizer recipe (calibrated when it needs it)."""
    from ai_edge_quantizer import quantizer

    try:
        with _quiet():
            quant = quantizer.Quantizer(content, _recipe(recipe))
            result = None
            if quant.need_calibration:
                result = quant.calibrate({SIGNATURE: [dict(f) for f in calib.feeds]},
                                         num_threads=1)
            done = quant.quantize(result, enable_progress_bar=False,
                                  enable_progress_report=False)
        return bytes(done.quantized_model)
    except Exception as exc:  # the quantizer raises many types: one line
        raise ConversionError(f"ai-edge-quantizer {recipe}: {type(exc).__name__}: "
                              f"{first_line(exc)}") from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The quantizer's progress bars and debugging warnings stay out of edge's output."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _recipe(name: str) -> Any:
    """A built-in recipe, or fp16 weights (float casting of every supported op's weights)."""
    from ai_edge_quantizer import qtyping, recipe, recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    if name != "weight_only_wf16_afp32":
        return getattr(recipe, name)()
    manager = recipe_manager.RecipeManager()
    manager.add_weight_only_config(regex=".*",
                                   operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                   num_bits=16, algorithm_key=AlgorithmName.FLOAT_CASTING)
    return manager.get_quantization_recipe()


def prepared(path: Path) -> tuple[bytes, int]:
    """The original ready for ai-edge-quantizer: its constant weight decoders folded (fp16 or
    sparse weights become float32 constants) and a serving signature; (bytes, folds)."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    folded = _fold_decoders(model, path)
    _add_signature(model)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), folded


def _fold_decoders(model: Any, path: Path) -> int:
    """Replace DEQUANTIZE/DENSIFY operators of constants by their (exact) float32 outputs,
    computed by LiteRT's reference kernels; return how many were folded."""
    from ai_edge_litert import schema_py_generated as schema

    graph = model.subgraphs[0]
    decoders = {schema.BuiltinOperator.DEQUANTIZE, schema.BuiltinOperator.DENSIFY}
    folds = [op for op in graph.operators if _code(model, op) in decoders
             and all(_constant(model, graph, t) for t in op.inputs)]
    if not folds:
        return 0
    values = (_decoded(path, [op.outputs[0] for op in folds])
              or _float16_decoded(model, graph, folds))
    folds = [op for op in folds if op.outputs[0] in values]
    for index, value in values.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(value.tobytes(), np.uint8)
        model.buffers.append(buffer)
        graph.tensors[index].buffer = len(model.buffers) - 1
    graph.operators = [op for op in graph.operators if all(op is not f for f in folds)]
    _drop_orphans(model, graph, {t for op in folds for t in op.inputs})
    return len(folds)


def _drop_orphans(model: Any, graph: Any, candidates: set[int]) -> None:
    """Empty the buffers of the folded operators' inputs that nothing uses any more."""
    used = {t for op in graph.operators for t in (*op.inputs, *op.outputs)}
    used |= {*graph.inputs, *graph.outputs}
    for index in candidates - used:
        tensor = graph.tensors[index]
        model.buffers[tensor.buffer].data = None
        tensor.sparsity = None


def _code(model: Any, op: Any) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return int(max(code.builtinCode, code.deprecatedBuiltinCode))


def _constant(model: Any, graph: Any, index: int) -> bool:
    buffer = graph.tensors[index].buffer
    return bool(buffer) and model.buffers[buffer].data is not None \
        and len(model.buffers[buffer].data) > 0


def _decoded(path: Path, indices: list[int]) -> dict[int, np.ndarray]:
    """The values of these tensors after one run on zeros (they depend on constants only)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=(
                             OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    try:
        interp.allocate_tensors()
    except RuntimeError:  # a custom op only a delegate (XNNPACK) runs: decode them here
        return {}
    for detail in interp.get_input_details():
        interp.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    with _quiet():
        interp.invoke()
    return {i: np.ascontiguousarray(interp.get_tensor(i)) for i in indices}


def _float16_decoded(model: Any, graph: Any, folds: list[Any]) -> dict[int, np.ndarray]:
    """The float32 values of the DEQUANTIZE folds of float16 constants, decoded with numpy
    (DENSIFY and the others are left in place)."""
    from ai_edge_litert import schema_py_generated as schema

    out: dict[int, np.ndarray] = {}
    for op in folds:
        source = graph.tensors[op.inputs[0]]
        if _code(model, op) == schema.BuiltinOperator.DEQUANTIZE and \
                source.type == schema.TensorType.FLOAT16:
            data = np.asarray(model.buffers[source.buffer].data, np.uint8).view(np.float16)
            out[op.outputs[0]] = data.astype(np.float32).reshape(source.shape)
    return out


def _add_signature(model: Any) -> None:
    """A serving signature over the inputs and outputs, when the model has none
    (ai-edge-quantizer calibrates through signatures); names are the tensor names."""
    from ai_edge_litert import schema_py_generated as schema

    if model.signatureDefs:
        return
    graph = model.subgraphs[0]

    def tensor_map(index: int) -> Any:
        entry = schema.TensorMapT()
        entry.name, entry.tensorIndex = graph.tensors[index].name, index
        return entry

    signature = schema.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = SIGNATURE, 0
    signature.inputs = [tensor_map(i) for i in graph.inputs]
    signature.outputs = [tensor_map(i) for i in graph.outputs]
    model.signatureDefs = [signature]


_NO_WEIGHTS = "the model has no float32 constant weights to quantize"


def _float_weights(content: bytes) -> int:
    """How many float32 constant tensors of rank 2 or more (weights) the model holds."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=content)
    count = 0
    for detail in interp.get_tensor_details():
        if np.dtype(detail["dtype"]) != np.float32 or len(detail["shape"]) < 2:
            continue
        try:
            interp.get_tensor(detail["index"])  # constants hold data before allocation
        except ValueError:
            continue
        count += 1
    return count


def _count_dtype(data: bytes, dtype: str) -> int:
    """How many of the model's tensors are of ``dtype``."""
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_content=data).get_tensor_details()
    return sum(np.dtype(d["dtype"]).name == dtype for d in details)


def _load_check(data: bytes) -> None:
    """LiteRT must be able to prepare the quantized model (some recipes write kernels' misfits)."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        Interpreter(model_content=data).allocate_tensors()
    except Exception as exc:  # LiteRT's RuntimeError: one line
        raise ConversionError(f"LiteRT cannot prepare the quantized model: "
                              f"{first_line(exc)[:200]}") from None


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- runtime


class LiteRTRunner:
    """Runs a .tflite made from the reference .tflite, by the reference's tensor names."""

    def __init__(self, interpreter: Any, model: ModelInfo) -> None:
        from edge.core.intake.litert import signature_names

        interpreter.allocate_tensors()
        self._interp = interpreter
        ins, outs = signature_names(interpreter)
        self._inputs = _bind([s.name for s in model.inputs], interpreter.get_input_details(), ins)
        self._outputs = _bind([s.name for s in model.outputs],
                              interpreter.get_output_details(), outs)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference's order, dequantized when the file's are integers."""
        for name, detail in self._inputs:
            self._set(detail, np.asarray(feeds[name]))
        self._interp.invoke()
        return [_dequantized(self._interp.get_tensor(d["index"]), d) for _, d in self._outputs]

    def _set(self, detail: dict[str, Any], value: np.ndarray) -> None:
        scale, zero = detail.get("quantization", (0.0, 0))
        dtype = np.dtype(detail["dtype"])
        if scale and dtype.kind in "iu" and value.dtype.kind == "f":
            info = np.iinfo(dtype)
            value = np.clip(np.round(value / scale) + zero, info.min, info.max)
        value = np.ascontiguousarray(value, dtype=dtype)
        if tuple(value.shape) != tuple(self._interp.get_tensor(detail["index"]).shape):
            self._interp.resize_tensor_input(detail["index"], list(value.shape))
            self._interp.allocate_tensors()
        self._interp.set_tensor(detail["index"], value)


def _bind(names: list[str], details: list[dict[str, Any]],
          aliases: dict[int, str]) -> list[tuple[str, dict[str, Any]]]:
    """Each reference name with its tensor: by signature or tensor name, else by order."""
    found = {aliases.get(d["index"], d["name"]): d for d in details}
    found.update({d["name"]: d for d in details if d["name"] not in found})
    if all(n in found for n in names):
        return [(n, found[n]) for n in names]
    if len(names) != len(details):
        raise ValueError(f"the .tflite has {len(details)} tensors where the reference has "
                         f"{len(names)}")
    return list(zip(names, details, strict=True))


def _dequantized(value: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    scale, zero = detail.get("quantization", (0.0, 0))
    if scale and np.dtype(detail["dtype"]).kind in "iu":
        return (value.astype(np.float32) - zero) * np.float32(scale)
    return np.array(value)
