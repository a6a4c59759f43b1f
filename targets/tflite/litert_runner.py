"""Running a .tflite made by onnx2tf with the reference ONNX model's names, order and layouts.

onnx2tf makes channels-first inputs and outputs channels-last and renames tensors; the runner
binds each ONNX tensor to its TFLite tensor (by name, by output number, else by order) and
transposes where the layouts differ. Inputs onnx2tf was told to keep (``kept_layout``: the
layout of a TensorFlow-family original) are bound without a transpose.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from edge.core import extras
from edge.core.errors import UsageError
from edge.core.native_log import stderr_to_log
from edge.core.values import ModelInfo, TensorSpec

__all__ = ["Binding", "TFLiteRunner", "by_number", "channels_last", "from_tflite",
           "interpreter", "kept_layout", "layout_notes", "layouts", "sanitize", "to_tflite"]

_OUTPUT_NUMBER = re.compile(
    r"^(?:output_(\d+)|Identity(?:_(\d+))?|(?:Stateful)?PartitionedCall(?::(\d+))?)$")
#: Producers whose ONNX inputs have the layout of a TensorFlow-family original (NHWC).
TF_PRODUCERS = ("tf2onnx",)


def interpreter(path: Path, threads: int) -> Any:
    """ai_edge_litert's Interpreter, else tflite_runtime's; never TensorFlow's, which links the
    Select-TF (Flex) delegate and would run a model's file ops (ReadFile, WriteFile...)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        try:
            from tflite_runtime.interpreter import Interpreter
        except ImportError:
            raise UsageError(f"running {path.name} needs ai_edge_litert: "
                             f"{extras.hint('tflite')}") from None
    return Interpreter(model_path=str(path), num_threads=threads if threads > 0 else None)


def allocate(interp: Any) -> None:
    """``interp.allocate_tensors()``, where LiteRT makes its default XNNPACK delegate and says
    so on file descriptor 2 ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU."): that
    goes to the litert log (``edge.core.native_log``), not the terminal."""
    with stderr_to_log("litert"):
        interp.allocate_tensors()


# ---------------------------------------------------------------- which inputs keep their layout


def kept_layout(model: ModelInfo) -> tuple[str, ...]:
    """Inputs of rank 3-5 whose layout the artifact keeps (onnx2tf ``-kat``).

    Every such input of a model tf2onnx made (a Keras, SavedModel or TFLite original: its
    layout is the original's, usually channels-last), and any input whose every consumer is a
    channels-last -> channels-first Transpose (an NHWC model exported to ONNX).
    """
    ranked = tuple(s.name for s in model.inputs if len(s.shape) in (3, 4, 5))
    return _kept(model.path, model.sha256, ranked) if ranked else ()


@functools.lru_cache(maxsize=16)
def _kept(path: str, sha256: str, ranked: tuple[str, ...]) -> tuple[str, ...]:
    """``kept_layout`` of one model file (by content: every runner of it asks again)."""
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # unreadable here: onnx2tf reports it
        return ()
    if proto.producer_name in TF_PRODUCERS:
        return ranked
    return tuple(name for name in ranked if _only_to_channels_first(proto.graph, name))


def _only_to_channels_first(graph: Any, name: str) -> bool:
    """Every consumer of ``name`` is Transpose(perm=[0, r-1, 1, ..., r-2])."""
    users = [n for n in graph.node if name in n.input]
    for node in users:
        perm = next((list(helper.get_attribute_value(a)) for a in node.attribute
                     if a.name == "perm"), None)
        if node.op_type != "Transpose" or not perm or perm != [0, len(perm) - 1,
                                                               *range(1, len(perm) - 1)]:
            return False
    return bool(users)


# ---------------------------------------------------------------- the runner


@dataclass(frozen=True, slots=True)
class Binding:
    """One ONNX tensor bound to a TFLite tensor: index, layout change, quantization."""

    spec: TensorSpec
    index: int
    name: str  # the TFLite tensor's (or signature's) name
    perm: tuple[int, ...] | None  # ONNX layout -> TFLite layout
    dtype: np.dtype[Any]
    scale: float
    zero_point: int


class TFLiteRunner:
    """Runs a .tflite with the ONNX model's input names, output order and layouts."""

    def __init__(self, interp: Any, model: ModelInfo, *,
                 kept: Collection[str] | None = None) -> None:
        allocate(interp)
        self._interp = interp
        self._inputs, self._outputs = bindings(
            interp, model, kept_layout(model) if kept is None else kept)
        self._shapes = {d["index"]: tuple(d["shape"]) for d in interp.get_input_details()}

    @property
    def interpreter(self) -> Any:
        """The wrapped interpreter."""
        return self._interp

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the ONNX model's order and layout."""
        for binding in self._inputs:
            self._set(binding, feeds[binding.spec.name])
        self._interp.invoke()
        return [from_tflite(self._interp.get_tensor(b.index), b) for b in self._outputs]

    def _set(self, binding: Binding, value: np.ndarray) -> None:
        data = to_tflite(np.asarray(value), binding)
        if data.shape != self._shapes[binding.index]:
            self._interp.resize_tensor_input(binding.index, list(data.shape))
            self._interp.allocate_tensors()
            self._shapes[binding.index] = data.shape
        self._interp.set_tensor(binding.index, data)


def bindings(interp: Any, model: ModelInfo,
             kept: Collection[str]) -> tuple[list[Binding], list[Binding]]:
    """The input and output bindings of an interpreter for ``model``."""
    ins, outs = _signature_aliases(interp)
    return (_bind(model.inputs, interp.get_input_details(), ins, numbered=False, kept=kept),
            _bind(model.outputs, interp.get_output_details(), outs, numbered=True, kept=()))


def layout_notes(path: Path, model: ModelInfo, kept: Collection[str]) -> tuple[str, ...]:
    """What the artifact's inputs and outputs look like next to the model's: the adapter."""
    interp = interpreter(path, 1)
    allocate(interp)
    ins, outs = bindings(interp, model, kept)
    notes = [_describe(kind, b) for kind, group in (("input", ins), ("output", outs))
             for b in group if b.perm is not None]
    renamed = [f"'{b.spec.name}' is '{b.name}'" for b in (*ins, *outs) if b.name != b.spec.name]
    for kind, group, details in (("inputs", ins, interp.get_input_details()),
                                 ("outputs", outs, interp.get_output_details())):
        if [b.index for b in group] != [int(d["index"]) for d in details]:
            notes.append(f"the .tflite lists its {kind} in another order than the model: the "
                         "runner puts them in the model's order")
    if not notes:
        notes.append("inputs and outputs keep the model's layout and order")
    if renamed:
        notes.append(f"tensor names in the .tflite: {', '.join(renamed)}; the runner maps them")
    return tuple(notes)


def _describe(kind: str, binding: Binding) -> str:
    """One transposed tensor: the model's shape, the artifact's, the runner's permutation."""
    model = list(binding.spec.shape)
    tflite = [model[p] for p in binding.perm or ()]
    return (f"{kind} '{binding.spec.name}' {model} is {tflite} (channels-last) in the .tflite: "
            f"the runner transposes it (perm {list(binding.perm or ())}"
            f"{'' if kind == 'input' else ', inverted'})")


def to_tflite(value: np.ndarray, binding: Binding) -> np.ndarray:
    """ONNX layout and dtype -> the TFLite tensor's (quantizing int inputs)."""
    if binding.perm is not None:
        value = value.transpose(binding.perm)
    if binding.scale:
        info = np.iinfo(binding.dtype)
        value = np.round(value.astype(np.float32) / binding.scale) + binding.zero_point
        value = np.clip(value, info.min, info.max)
    return np.ascontiguousarray(value, dtype=binding.dtype)


def from_tflite(value: np.ndarray, binding: Binding) -> np.ndarray:
    """TFLite layout and dtype -> the ONNX output's (dequantizing int outputs)."""
    if binding.scale:
        value = (value.astype(np.float32) - binding.zero_point) * binding.scale
    if binding.perm is not None:
        value = value.transpose(np.argsort(binding.perm))
    return np.ascontiguousarray(value, dtype=np.dtype(binding.spec.dtype))


def _signature_aliases(interp: Any) -> tuple[dict[int, str], dict[int, str]]:
    """Tensor index -> signature name, for inputs and outputs of the one serving signature."""
    try:
        keys = list(interp.get_signature_list())
        if "serving_default" in keys:
            key = "serving_default"
        elif len(keys) == 1:
            key = keys[0]
        else:
            return {}, {}
        runner = interp.get_signature_runner(key)
        return ({d["index"]: n for n, d in runner.get_input_details().items()},
                {d["index"]: n for n, d in runner.get_output_details().items()})
    except (AttributeError, ValueError, IndexError):  # old runtimes or no signatures
        return {}, {}


def _bind(specs: Sequence[TensorSpec], details: list[dict[str, Any]], aliases: dict[int, str],
          *, numbered: bool, kept: Collection[str]) -> list[Binding]:
    """Pair ONNX tensors with TFLite tensors: by name, by output number, else by order."""
    if len(specs) != len(details):
        raise ValueError(f"the .tflite has {len(details)} tensors where the ONNX model has "
                         f"{len(specs)}: {[d['name'] for d in details]}")
    strategies = [_by_name(specs, details, aliases)]
    if numbered:
        strategies.append(by_number(details, aliases))
    strategies.append(list(range(len(details))))
    for order in strategies:
        if order is None:
            continue
        perms = [_perms(s, _tfl_shape(details[i]), kept) for s, i in zip(specs, order, strict=True)]
        if all(perms):
            return [_binding(s, details[i], aliases, p[0])
                    for s, i, p in zip(specs, order, perms, strict=True)]
    raise ValueError("the .tflite tensor shapes do not match the ONNX model: "
                     f"{[tuple(d['shape']) for d in details]} vs {[s.shape for s in specs]}")


def _perms(spec: TensorSpec, tfl_shape: tuple[int, ...],
           kept: Collection[str]) -> list[tuple[int, ...] | None]:
    """The layouts that fit, preferred first; unchanged first for a kept input (so a square
    [1, 8, 8, 8] input onnx2tf kept is not transposed)."""
    fits = layouts(spec.shape, tfl_shape)
    return sorted(fits, key=lambda p: p is not None) if spec.name in kept else fits


def _by_name(specs: Sequence[TensorSpec], details: list[dict[str, Any]],
             aliases: dict[int, str]) -> list[int] | None:
    """Detail positions whose tensor or signature name is each ONNX name, if all are found."""
    names = [{_plain(d["name"]), aliases.get(d["index"], "")} for d in details]
    order = [next((i for i, n in enumerate(names) if {s.name, sanitize(s.name)} & n), -1)
             for s in specs]
    return order if -1 not in order and len(set(order)) == len(order) else None


def by_number(details: list[dict[str, Any]], aliases: dict[int, str]) -> list[int] | None:
    """Order by the output number in 'output_N', 'Identity_N' or 'PartitionedCall:N'."""
    numbers = []
    for d in details:
        match = (_OUTPUT_NUMBER.match(aliases.get(d["index"], ""))
                 or _OUTPUT_NUMBER.match(d["name"]))
        if match is None:
            return None
        numbers.append(int(next((g for g in match.groups() if g is not None), 0)))
    if sorted(numbers) != list(range(len(details))):
        return None
    return [numbers.index(k) for k in range(len(details))]


def sanitize(name: str) -> str:
    """The input name onnx2tf gives the Keras input (it renames ':' and a leading '/')."""
    return re.sub(r"^/", "wa/", name.replace(":", "__"))


def _plain(name: str) -> str:
    """A TFLite tensor name without the 'serving_default_' prefix and ':N' suffix."""
    return re.sub(r":\d+$", "", name.removeprefix("serving_default_"))


def _binding(spec: TensorSpec, detail: dict[str, Any], aliases: dict[int, str],
             perm: tuple[int, ...] | None) -> Binding:
    dtype = np.dtype(detail["dtype"])
    scale, zero_point = detail.get("quantization", (0.0, 0))
    quantized = (np.issubdtype(dtype, np.integer) and bool(scale)
                 and np.issubdtype(np.dtype(spec.dtype), np.floating))
    name = aliases.get(int(detail["index"])) or _plain(detail["name"])
    return Binding(spec=spec, index=int(detail["index"]), name=name, perm=perm, dtype=dtype,
                   scale=float(scale) if quantized else 0.0,
                   zero_point=int(zero_point) if quantized else 0)


def _tfl_shape(detail: dict[str, Any]) -> tuple[int, ...]:
    shape = detail.get("shape_signature")
    return tuple(int(d) for d in (shape if shape is not None and len(shape) else detail["shape"]))


def channels_last(rank: int) -> tuple[int, ...]:
    """The permutation NC... -> N...C for rank 3 to 5; identity otherwise."""
    if rank not in (3, 4, 5):
        return tuple(range(rank))
    return (0, *range(2, rank), 1)


def layouts(onnx_shape: tuple[int | str, ...],
            tfl_shape: tuple[int, ...]) -> list[tuple[int, ...] | None]:
    """Permutations (None: none) that turn the ONNX shape into the TFLite one, preferred first.

    onnx2tf's convention is channels-last, so it wins when both fit (e.g. [1, 8, 8, 8]).
    An ONNX shape of unknown rank fits anything unchanged.
    """
    if not onnx_shape:
        return [None]
    if len(onnx_shape) != len(tfl_shape):
        return []
    fits: list[tuple[int, ...] | None] = []
    perm = channels_last(len(onnx_shape))
    if perm != tuple(range(len(perm))) and _dims_fit([onnx_shape[p] for p in perm], tfl_shape):
        fits.append(perm)
    if _dims_fit(list(onnx_shape), tfl_shape):
        fits.append(None)
    return fits


def _dims_fit(onnx_dims: list[int | str], tfl_dims: tuple[int, ...]) -> bool:
    """Dims agree, symbolic ONNX dims and -1 TFLite dims matching anything."""
    return all(not isinstance(a, int) or a <= 0 or b < 0 or a == b
               for a, b in zip(onnx_dims, tfl_dims, strict=True))
