"""ONNX sources: pin dims, move Constant weights into initializers, check the result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edge.core.errors import UsageError, first_line
from edge.core.files import no_space_as
from edge.core.intake.branches import has_ifs, loadable_at_pins, repeat_notes
from edge.core.intake.common import Shapes, cached_path, usable_entry
from edge.core.model import load_onnx, save_onnx_atomic


def fix_onnx(source: Path, workdir: Path, pins: Shapes) -> Path:
    """The source itself when nothing needs fixing, else a fixed copy in workdir."""
    model = load_onnx(source)
    check_pins(model, pins, source)
    if not _needs_fix(model, pins):
        return source
    out = cached_path(source, workdir, "onnx", pins, {})
    if not usable_entry(out):
        with no_space_as(out):
            workdir.mkdir(parents=True, exist_ok=True)
            save_onnx_atomic(finish(model, pins, source), out)
    elif has_ifs(model):
        repeat_notes(out)  # the cached copy may have dropped If branches: say so again
    return out


def _needs_fix(model: onnx.ModelProto, pins: Shapes) -> bool:
    """Whether a pin changes a dim or a main-graph Constant node could become an initializer."""
    inputs = {v.name: input_dims(v) for v in graph_inputs(model)}
    changes = any(inputs[n] != dims for n, dims in pins.items())
    return changes or any(_movable(n) for n in model.graph.node)


def finish(model: onnx.ModelProto, pins: Shapes, source: Path) -> onnx.ModelProto:
    """Pin dims, drop the If branches the pins rule out, move Constant nodes to initializers
    and check the result."""
    check_pins(model, pins, source)
    _pin_dims(model, pins)
    model = loadable_at_pins(model, source, pinned=bool(pins))
    _constants_to_initializers(model)
    _static_outputs(model)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several types for a bad graph
        raise UsageError(f"{source}: the reference ONNX is not valid "
                         f"({first_line(exc)})") from None
    return model


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (old IR versions list weights as inputs)."""
    weights = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def input_dims(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    """Dims with symbolic or unknown ones as -1."""
    return tuple(d.dim_value if d.HasField("dim_value") else -1
                 for d in value.type.tensor_type.shape.dim)


def check_pins(model: onnx.ModelProto, pins: Shapes, source: Path) -> None:
    """Every pinned name is an input of matching rank whose fixed dims agree."""
    inputs = {v.name: input_dims(v) for v in graph_inputs(model)}
    for name, dims in pins.items():
        if name not in inputs:
            raise UsageError(f"--shape {name}=...: {source} has no input '{name}'; its inputs: "
                             f"{', '.join(inputs)}")
        have = inputs[name]
        shown = "[" + ",".join(str(d) if d > 0 else "?" for d in have) + "]"
        if len(have) != len(dims) or any(0 < h != d for h, d in zip(have, dims, strict=True)):
            raise UsageError(f"--shape {name}={','.join(map(str, dims))}: input '{name}' of "
                             f"{source.name} has shape {shown} ('?' dims may be pinned)")


def _pin_dims(model: onnx.ModelProto, pins: Shapes) -> None:
    """Set pinned input dims; a dim_param pinned on an input is fixed everywhere it appears."""
    params = _pinned_params(model, pins)
    for value in graph_inputs(model):
        for dim, size in zip(value.type.tensor_type.shape.dim, pins.get(value.name, ()),
                             strict=False):
            dim.dim_value = size
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if _shared_symbol(dim) and dim.dim_param in params:
                dim.dim_value = params[dim.dim_param]


def _pinned_params(model: onnx.ModelProto, pins: Shapes) -> dict[str, int]:
    """Symbolic dim name -> pinned size; one name pinned to two sizes is a UsageError."""
    params: dict[str, tuple[int, str]] = {}
    for value in graph_inputs(model):
        for dim, size in zip(value.type.tensor_type.shape.dim, pins.get(value.name, ()),
                             strict=False):
            if not _shared_symbol(dim):
                continue
            seen = params.setdefault(dim.dim_param, (size, value.name))
            if seen[0] != size:
                raise UsageError(f"--shape: dim '{dim.dim_param}' is shared by inputs "
                                 f"'{seen[1]}' and '{value.name}' but pinned to {seen[0]} "
                                 f"and {size}")
    return {name: size for name, (size, _) in params.items()}


def _shared_symbol(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A named symbolic dim; ``?`` (Paddle2ONNX and others) means unknown, not one shared name."""
    return dim.HasField("dim_param") and dim.dim_param not in ("", "?")


def _movable(node: onnx.NodeProto) -> bool:
    """A Constant node whose value can be an initializer (not a sparse one)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 \
        and not any(a.name == "sparse_value" for a in node.attribute)


def _constants_to_initializers(model: onnx.ModelProto) -> int:
    """Move main-graph Constant nodes into initializers; return how many moved."""
    outputs = {v.name for v in model.graph.output}
    keep, moved = [], []
    for node in model.graph.node:
        if _movable(node) and node.output[0] not in outputs:
            moved.append(_constant_tensor(node))
        else:
            keep.append(node)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
        model.graph.initializer.extend(moved)
        if model.ir_version < 4:  # initializers had to be graph inputs before IR 4
            model.ir_version = 4
    return len(moved)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto:
    """The tensor a Constant node produces, named after its output."""
    attr = node.attribute[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = node.output[0]
        return tensor
    value = helper.get_attribute_value(attr)
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64}
    if attr.name in kinds:
        return numpy_helper.from_array(np.asarray(value, dtype=kinds[attr.name]), node.output[0])
    strings = value if isinstance(value, list) else [value]
    shape = [len(strings)] if attr.name == "value_strings" else []
    return helper.make_tensor(node.output[0], onnx.TensorProto.STRING, shape, strings)


def _static_outputs(model: onnx.ModelProto) -> None:
    """Fill symbolic output dims that shape inference can now compute (best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference is optional here; ORT infers at load time anyway
        return
    known = {v.name: v for v in inferred.graph.output}
    for value in model.graph.output:
        other = known.get(value.name)
        if other is None:
            continue
        mine, theirs = value.type.tensor_type.shape.dim, other.type.tensor_type.shape.dim
        if len(mine) != len(theirs):
            continue
        for dim, new in zip(mine, theirs, strict=True):
            if not dim.HasField("dim_value") and new.HasField("dim_value") and new.dim_value > 0:
                dim.dim_value = new.dim_value
