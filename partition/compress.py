"""Transfer compression of cut tensors: the head encodes, the tail decodes, the wire is smaller.

The encoding lives inside the two ONNX halves, so any KServe v2 server (``edge serve-cloud``,
Triton, OpenVINO Model Server) serves a compressed tail unchanged:

* ``fp16``: the head ends with ``Cast(to=FLOAT16)``, the tail starts with ``Cast(to=FLOAT)``;
  half the bytes, error ~1e-3 relative.
* ``int8``: the head ends with ``QuantizeLinear`` (uint8, per-tensor scale and zero point from
  sample activations), the tail starts with ``DequantizeLinear``; a quarter of the bytes.

Only float32 tensors produced on the device are compressed; raw graph inputs cross unchanged.
A compressed tensor ``t`` crosses as ``t::fp16`` or ``t::u8``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from edge.core.errors import UsageError
from edge.core.model import save_onnx_atomic
from partition.split import SplitModels

__all__ = ["COMPRESSIONS", "Compression", "compress_split", "wire_bytes_factor"]

Compression = Literal["none", "fp16", "int8"]
COMPRESSIONS: tuple[str, ...] = ("none", "fp16", "int8")
_SUFFIX = {"fp16": "::fp16", "int8": "::u8"}


def wire_bytes_factor(mode: str) -> float:
    """How much smaller a compressed float32 tensor is on the wire (1.0: not compressed)."""
    return {"none": 1.0, "fp16": 0.5, "int8": 0.25}[check_mode(mode)]


def check_mode(mode: str) -> str:
    """``mode`` when it names a compression, else a one-line usage error."""
    if mode not in COMPRESSIONS:
        raise UsageError(f"unknown transfer compression {mode!r}; use one of "
                         f"{', '.join(COMPRESSIONS)}")
    return mode


def compress_split(split: SplitModels, mode: str,
                   samples: Sequence[Mapping[str, np.ndarray]]) -> SplitModels:
    """Rewrite head.onnx and tail.onnx in place so float cut tensors cross compressed."""
    if check_mode(mode) == "none" or split.head is None or split.tail is None:
        return split
    head, tail = onnx.load(str(split.head)), onnx.load(str(split.tail))
    names = [t for t in split.cut_tensors
             if t in split.head_outputs and _is_float32(_output(head, t))]
    if not names:
        return split
    ranges = _ranges(split, names, samples) if mode == "int8" else {}
    wires = {t: t + _SUFFIX[mode] for t in names}
    for name in names:
        _encode(head, name, wires[name], mode, ranges.get(name))
        _decode(tail, name, wires[name], mode, ranges.get(name))
    _drop_plain_outputs(head, names, set(split.outputs))
    _save(head, split.head)
    _save(tail, split.tail)
    return replace(split,
                   head_outputs=tuple(o.name for o in head.graph.output),
                   tail_inputs=tuple(wires.get(t, t) for t in split.tail_inputs))


def _output(model: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    return next(o for o in model.graph.output if o.name == name)


def _is_float32(value: onnx.ValueInfoProto) -> bool:
    return value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def _ranges(split: SplitModels, names: list[str],
            samples: Sequence[Mapping[str, np.ndarray]]) -> dict[str, tuple[float, float]]:
    """Min and max of each cut tensor over the samples, run through the plain head."""
    if not samples:
        raise UsageError("int8 transfer compression needs sample inputs to set its scales")
    session = ort.InferenceSession(str(split.head), providers=["CPUExecutionProvider"])
    lo = {n: np.inf for n in names}
    hi = {n: -np.inf for n in names}
    for feeds in samples:
        got = session.run(names, {k: feeds[k] for k in split.head_inputs})
        for name, value in zip(names, got, strict=True):
            lo[name] = min(lo[name], float(np.min(value)))
            hi[name] = max(hi[name], float(np.max(value)))
    return {n: (lo[n], hi[n]) for n in names}


def _scale_zero(value_range: tuple[float, float]) -> tuple[float, int]:
    """uint8 affine parameters covering the range and 0 exactly."""
    lo, hi = min(value_range[0], 0.0), max(value_range[1], 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    return scale, int(np.clip(round(-lo / scale), 0, 255))


def _params(model: onnx.ModelProto, name: str, value_range: tuple[float, float]) -> list[str]:
    """Add the scale and zero point initializers for ``name``; return their names."""
    scale, zero = _scale_zero(value_range)
    names = [f"{name}::scale", f"{name}::zero"]
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array(scale, dtype=np.float32), names[0]),
        numpy_helper.from_array(np.array(zero, dtype=np.uint8), names[1])])
    return names


def _coder(model: onnx.ModelProto, src: str, dst: str, *, encode: bool, mode: str,
           name: str, value_range: tuple[float, float] | None) -> tuple[onnx.NodeProto, int]:
    """The node turning ``src`` into ``dst`` (fp16: a Cast; int8: (De)QuantizeLinear with its
    scale and zero point added to ``model``) and the wire's element type."""
    label = f"{dst if encode else src}::{'encode' if encode else 'decode'}"
    if mode == "fp16":
        to = onnx.TensorProto.FLOAT16 if encode else onnx.TensorProto.FLOAT
        return (onnx.helper.make_node("Cast", [src], [dst], to=to, name=label),
                onnx.TensorProto.FLOAT16)
    assert value_range is not None
    op = "QuantizeLinear" if encode else "DequantizeLinear"
    return (onnx.helper.make_node(op, [src, *_params(model, name, value_range)], [dst],
                                  name=label), onnx.TensorProto.UINT8)


def _encode(head: onnx.ModelProto, name: str, wire: str, mode: str,
            value_range: tuple[float, float] | None) -> None:
    """Append the encoder node and the wire output to the head."""
    node, elem = _coder(head, name, wire, encode=True, mode=mode, name=name,
                        value_range=value_range)
    head.graph.node.append(node)
    head.graph.output.append(_retyped(_output(head, name), wire, elem))


def _decode(tail: onnx.ModelProto, name: str, wire: str, mode: str,
            value_range: tuple[float, float] | None) -> None:
    """Turn the tail's input ``name`` into wire input plus a decoder node in front."""
    value = next(i for i in tail.graph.input if i.name == name)
    node, elem = _coder(tail, wire, name, encode=False, mode=mode, name=name,
                        value_range=value_range)
    index = list(tail.graph.input).index(value)
    tail.graph.input.insert(index, _retyped(value, wire, elem))
    tail.graph.input.remove(value)
    tail.graph.node.insert(0, node)


def _retyped(value: onnx.ValueInfoProto, name: str, elem: int) -> onnx.ValueInfoProto:
    """A copy of a value info with another name and element type."""
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    copy.name = name
    copy.type.tensor_type.elem_type = elem
    return copy


def _drop_plain_outputs(head: onnx.ModelProto, names: list[str], finals: set[str]) -> None:
    """The uncompressed tensors leave the head only when they are final outputs too."""
    for value in [o for o in head.graph.output if o.name in names and o.name not in finals]:
        head.graph.output.remove(value)


def _save(model: onnx.ModelProto, path: object) -> None:
    onnx.checker.check_model(model)
    save_onnx_atomic(model, path)  # type: ignore[arg-type]
