"""LiteRT from the original .tflite: when no ONNX reference can be made, the user's file is the
reference and its candidates are made from it directly: the file itself (fp32), and fp16, int8
weights (int8-dynamic) and full int8 (int8) variants written by ai-edge-quantizer."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.data import dataset_digest
from edge.core.errors import first_line
from edge.core.files import filled, no_space, write_atomic
from edge.core.intake.litert import signature_names
from edge.core.values import Dataset, ModelInfo
from targets.base import (
    ConversionError,
    ConvertSettings,
    check_precision,
    missing_modules,
    workdir_lock,
)
from targets.tflite.litert_runner import allocate

__all__ = ["LiteRTRunner", "LiteRTTarget", "op_names", "op_scope", "prepared", "quantize"]

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
        converters=("ai-edge-quantizer", "ai-edge-litert"), recipe=2, reads=".tflite",
        keeps_float=True, formats=("tflite",))

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
            return out, _cached(out) or _build(model, precision, calib, out,
                                               settings.keep_float)

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


def _build(model: ModelInfo, precision: str, calib: Dataset, out: Path,
           keep_float: tuple[str, ...]) -> tuple[str, ...]:
    """Write the artifact and its notes (last); a failure is written down and raised."""
    try:
        notes = _make(model, precision, calib, out, keep_float)
    except ConversionError as exc:
        if filled(exc):  # a full disk is the host's, not the model's: never remembered
            raise no_space(out, 1 << 16) from None
        _write(out.with_name(out.name + ".failed.txt"), str(exc).encode())
        raise
    _write(out.with_name(out.name + ".notes.json"), json.dumps(list(notes)).encode())
    return notes


def _make(model: ModelInfo, precision: str, calib: Dataset, out: Path,
          keep_float: tuple[str, ...]) -> tuple[str, ...]:
    if precision == "fp32":
        tmp = out.with_name(out.name + ".partial")
        shutil.copyfile(model.path, tmp)
        os.replace(tmp, out)
        return ("the original .tflite, unchanged (no ONNX reference could be made)",)
    recipe, dtype = _RECIPES[precision]
    content, folded = prepared(Path(model.path))
    if not _float_weights(content):
        raise ConversionError(f"ai-edge-quantizer {recipe}: {_NO_WEIGHTS}")
    data = _quantized(content, recipe, calib, keep_float)
    if _count_dtype(data, dtype) <= _count_dtype(content, dtype):
        why = f"{len(keep_float)} operator(s) kept float" if keep_float else _NO_WEIGHTS
        raise ConversionError(f"ai-edge-quantizer {recipe} made no {dtype} tensor: {why}")
    _load_check(data)
    _write(out, data)
    calibrated = (f", calibrated on {len(calib)} samples (int8 inside, float32 input and "
                  "output)") if precision == "int8" else ""
    notes = [f"ai-edge-quantizer {recipe} of the original .tflite{calibrated}"]
    if folded:
        notes.append(f"{folded} weight decoder(s) (DEQUANTIZE/DENSIFY of constants) folded "
                     "into float32 weights first (exact)")
    return tuple(notes)


def quantize(content: bytes, precision: str, calib: Dataset,
             keep_float: tuple[str, ...] = ()) -> bytes:
    """A ``prepared`` model quantized to ``precision`` (int8, int8-dynamic or fp16) as the
    target makes it, the operators named in ``keep_float`` left in float."""
    return _quantized(content, _RECIPES[precision][0], calib, keep_float)


def _quantized(content: bytes, recipe: str, calib: Dataset, keep_float: tuple[str, ...]) -> bytes:
    """The model quantized with an ai-edge-quantizer recipe (calibrated when it needs it),
    the operators named in ``keep_float`` (``op_names``) left in float."""
    from ai_edge_quantizer import quantizer

    try:
        with _quiet():
            quant = quantizer.Quantizer(content, _recipe(recipe, keep_float))
            result = _calibrated(content, recipe, calib) if quant.need_calibration else None
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


#: (model sha256, recipe, calibration digest) -> ai-edge-quantizer's calibration result: the
#: recovery's attempts (the same model and samples, other operators kept float) reuse it
_CALIBRATIONS: dict[tuple[str, str, str], Any] = {}


def _calibrated(content: bytes, recipe: str, calib: Dataset) -> Any:
    """Ranges of the model's tensors over the calibration samples, for the full recipe (a
    superset of what a recipe keeping operators float needs)."""
    from ai_edge_quantizer import quantizer


    key = (hashlib.sha256(content).hexdigest(), recipe, dataset_digest(calib))
    if key not in _CALIBRATIONS:
        quant = quantizer.Quantizer(content, _recipe(recipe, ()))
        _CALIBRATIONS.clear()  # one model's ranges at a time
        _CALIBRATIONS[key] = quant.calibrate({SIGNATURE: [dict(f) for f in calib.feeds]},
                                             num_threads=1)
    return _CALIBRATIONS[key]


def _recipe(name: str, keep_float: tuple[str, ...]) -> Any:
    """A built-in recipe, or fp16 weights (float casting of every supported op's weights),
    with the operators named in ``keep_float`` not quantized."""
    from ai_edge_quantizer import qtyping, recipe, recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    manager = recipe_manager.RecipeManager()
    if name != "weight_only_wf16_afp32":
        manager.load_quantization_recipe(getattr(recipe, name)())
    else:
        manager.add_weight_only_config(regex=".*",
                                       operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                       num_bits=16, algorithm_key=AlgorithmName.FLOAT_CASTING)
    for end in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
        manager.add_quantization_config(regex=".*", operation_name=end,  # float in and out
                                        algorithm_key=AlgorithmName.NO_QUANTIZE)
    for op in keep_float:  # a later matching scope wins: these ops are left float
        manager.add_quantization_config(regex=f"^{re.escape(op)};",
                                        operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                        algorithm_key=AlgorithmName.NO_QUANTIZE)
    return manager.get_quantization_recipe()


def op_scope(graph: Any, op: Any) -> str:
    """An operator's output tensors' names, ';'-joined (ai-edge-quantizer's op scope without
    its trailing ';'); TensorFlow's fused names hold ';' themselves."""
    names = (_text(graph.tensors[t].name) for t in _list(op.outputs) if t >= 0)
    return ";".join(n for n in names if n)


def op_names(graph: Any) -> list[str]:
    """Each operator's name: the fewest leading ';'-parts of its scope that no other operator's
    scope starts with ("model_1/model/re_lu_1/Relu6", not the six fused names of its tensor);
    ``keep_float`` names these. An operator without named outputs is ''."""
    scopes = [op_scope(graph, op).split(";") for op in graph.operators]
    starts: dict[tuple[str, ...], int] = {}
    for parts in scopes:
        for k in range(1, len(parts) + 1):
            starts[tuple(parts[:k])] = starts.get(tuple(parts[:k]), 0) + 1
    return [";".join(next((parts[:k] for k in range(1, len(parts))
                           if starts[tuple(parts[:k])] == 1), parts)) for parts in scopes]


def _text(name: bytes | str | None) -> str:
    return name.decode() if isinstance(name, bytes) else name or ""


def prepared(path: Path) -> tuple[bytes, int]:
    """The original ready for ai-edge-quantizer: its constant weight decoders folded (fp16 or
    sparse weights become float32 constants) and a serving signature; (bytes, folds)."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    folded = _fold_decoders(model, path)
    _drop_orphans(model, model.subgraphs[0])
    _add_signature(model)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), folded


def _fold_decoders(model: Any, path: Path) -> int:
    """Replace DEQUANTIZE/DENSIFY operators of constants (or of folded ones: DENSIFY of sparse
    float16 weights then DEQUANTIZE) by their (exact) outputs, computed by LiteRT's reference
    kernels; return how many were folded."""
    from ai_edge_litert import schema_py_generated as schema

    graph = model.subgraphs[0]
    folds = _decoders(model, graph)
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
    return len(folds)


def _decoders(model: Any, graph: Any) -> list[Any]:
    """The DEQUANTIZE/DENSIFY operators whose inputs are constants or decoded constants, in
    execution order."""
    from ai_edge_litert import schema_py_generated as schema

    kinds = {schema.BuiltinOperator.DEQUANTIZE, schema.BuiltinOperator.DENSIFY}
    decoded: set[int] = set()
    folds = []
    for op in graph.operators:
        if _code(model, op) in kinds and all(
                t in decoded or _constant(model, graph, t) for t in _list(op.inputs)):
            folds.append(op)
            decoded.update(_list(op.outputs))
    return folds


def _drop_orphans(model: Any, graph: Any) -> None:
    """Remove the tensors no operator reads or writes (the folded decoders' inputs), and the
    buffers no tensor holds any more: a tensor no operator makes nor any buffer fills has no
    data after a run, and ai-edge-quantizer's calibration reads every named tensor ("Tensor
    data is null. Run allocate_tensors() first")."""
    used = {t for op in graph.operators
            for t in (*_list(op.inputs), *_list(op.outputs), *_list(op.intermediates))}
    used |= {*_list(graph.inputs), *_list(graph.outputs)}
    if len(used - {-1}) == len(graph.tensors):
        return
    dropped = {t.buffer for i, t in enumerate(graph.tensors) if i not in used}
    keep = [i for i in range(len(graph.tensors)) if i in used]
    _renumber(model, graph, {old: new for new, old in enumerate(keep)})
    graph.tensors = [graph.tensors[i] for i in keep]
    held = {t.buffer for g in model.subgraphs for t in g.tensors}
    for buffer in dropped - held - {0}:  # buffers may be shared; 0 is the empty one
        model.buffers[buffer].data = None


def _renumber(model: Any, graph: Any, new: dict[int, int]) -> None:
    """Point the graph's operators, inputs, outputs and signatures at renumbered tensors
    (-1, an omitted optional input, stays)."""
    def moved(indices: Any) -> list[int]:
        return [new[int(i)] if i >= 0 else -1 for i in _list(indices)]

    for op in graph.operators:
        op.inputs, op.outputs = moved(op.inputs), moved(op.outputs)
        if op.intermediates is not None:
            op.intermediates = moved(op.intermediates)
    graph.inputs, graph.outputs = moved(graph.inputs), moved(graph.outputs)
    for signature in model.signatureDefs or ():
        if signature.subgraphIndex == 0:  # the folds are in the main graph
            for entry in (*(signature.inputs or ()), *(signature.outputs or ())):
                entry.tensorIndex = new[entry.tensorIndex]


def _list(indices: Any) -> list[int]:
    return [] if indices is None else [int(i) for i in indices]


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
                source.type == schema.TensorType.FLOAT16 and \
                _constant(model, graph, op.inputs[0]):
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
        allocate(Interpreter(model_content=data))
    except Exception as exc:  # LiteRT's RuntimeError: one line
        raise ConversionError(f"LiteRT cannot prepare the quantized model: "
                              f"{first_line(exc)[:200]}") from None


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all (staged beside ``path``; a full disk is one NoSpace line)."""
    write_atomic(path, data)


# ---------------------------------------------------------------- runtime


class LiteRTRunner:
    """Runs a .tflite made from the reference .tflite, by the reference's tensor names."""

    def __init__(self, interpreter: Any, model: ModelInfo) -> None:
        allocate(interpreter)
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
