"""The reference ONNX model as a PyTorch module, for structured pruning and distillation.

Conv, Gemm and MatMul with constant weights become ``nn.Conv*d`` / ``nn.Linear`` layers
(BatchNormalization and per-channel PRelu their ``nn`` forms), which torch-pruning can slim;
every other node runs as the equivalent torch function. The module takes a batch of any size
(a Reshape whose constant shape has the reference's batch of 1 keeps the caller's batch), and
``logits`` makes a Softmax that writes a model output return its input, so distillation can
match logits. A node this reader does not know raises ``PruneError`` naming it.

onnx2torch would do the same, but it imports torchvision, whose registry wheels need CUDA
builds of torch: this reader covers the ops of convolutional classifiers and stays small.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from edge.core.errors import PruneError
from edge.core.model import value_shapes

__all__ = ["LAYER_OPS", "Node", "OnnxModule", "PruneError", "constants", "to_torch"]

#: Ops that become a trainable torch layer (with constant weights).
LAYER_OPS = ("Conv", "Gemm", "MatMul", "BatchNormalization", "PRelu")


@dataclass(frozen=True, slots=True)
class Node:
    """One ONNX node as the module runs it."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    layer: str | None = None  # key in OnnxModule.layers


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by name."""
    found = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def to_torch(model: onnx.ModelProto, *, fold_shapes: bool = False) -> OnnxModule:
    """The model as an ``OnnxModule`` (weights copied; float32). ``fold_shapes`` computes the
    shape arithmetic of a model whose shapes are all static once, here (Shape nodes and what
    only constants feed): the module then runs at those shapes only (``torch.export``)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    consts = constants(model)
    if fold_shapes:
        consts = _folded(inferred, consts)
    return OnnxModule(inferred, consts, value_shapes(inferred))


def _folded(model: onnx.ModelProto, consts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``consts`` with the outputs of Shape nodes of static inputs and of the nodes only
    constants feed (but weighted layers), computed."""
    static = _static_shapes(model)
    found = dict(consts)
    for proto in model.graph.node:
        if proto.op_type == "Shape" and proto.input[0] in static:
            start, end = _shape_range(proto)
            found[proto.output[0]] = np.array(static[proto.input[0]][start:end], np.int64)
        elif proto.op_type in _RUN and proto.op_type not in LAYER_OPS and all(
                not name or name in found for name in proto.input):
            found.update(_run_once(proto, found))
    return found


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The values whose every dim is a known number."""
    graph = model.graph
    return {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in (*graph.value_info, *graph.input, *graph.output)
            if v.type.tensor_type.HasField("shape")
            and all(d.HasField("dim_value") and d.dim_value > 0
                    for d in v.type.tensor_type.shape.dim)}


def _shape_range(proto: onnx.NodeProto) -> tuple[int | None, int | None]:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
    return attrs.get("start", 0), attrs.get("end")


def _run_once(proto: onnx.NodeProto, found: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A node of constant inputs run now: its outputs by name."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
    node = Node(proto.op_type, tuple(proto.input), tuple(proto.output), attrs)
    args = [torch.from_numpy(np.array(found[name])) if name else None for name in proto.input]
    run = _plain_reshape if proto.op_type == "Reshape" else _RUN[proto.op_type]
    with torch.no_grad():
        result = run(node, args)
    return {proto.output[0]: result.numpy()}


def _plain_reshape(node: Node, args: list[Any]) -> torch.Tensor:
    """Reshape as ONNX says (a constant has no batch to keep)."""
    x, shape = args[0], _ints(args[1])
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])


class OnnxModule(nn.Module):
    """Runs an ONNX graph with torch ops; its weighted nodes are ``nn`` layers."""

    def __init__(self, model: onnx.ModelProto, consts: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict()
        self.consts = {k: torch.from_numpy(np.array(v, dtype=np.float32 if v.dtype.kind == "f"
                                                 else v.dtype)) for k, v in consts.items()}
        self.input_names = [i.name for i in model.graph.input if i.name not in consts]
        self.output_names = [o.name for o in model.graph.output]
        self.logits = False
        self.nodes: list[Node] = []
        for index, proto in enumerate(model.graph.node):
            if proto.op_type != "Constant" and proto.output[0] not in consts:
                self.nodes.append(self._node(index, proto, consts, shapes))

    def _node(self, index: int, proto: onnx.NodeProto, consts: dict[str, np.ndarray],
              shapes: dict[str, tuple[int, ...]]) -> Node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        node = Node(proto.op_type, tuple(proto.input), tuple(proto.output), attrs)
        if proto.op_type not in _RUN and proto.op_type not in LAYER_OPS:
            raise PruneError(f"op {proto.op_type} ({proto.name or proto.output[0]}) is not "
                             "supported by edge's ONNX-to-PyTorch reader")
        layer = _layer(node, consts, shapes)
        if layer is None:
            return node
        key = f"n{index}"
        self.layers[key] = layer
        return Node(node.op, node.inputs, node.outputs, attrs, key)

    def forward(self, *feeds: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[str, Any] = dict(zip(self.input_names, feeds, strict=True))
        env[""] = None
        for node in self.nodes:
            args = [env[n] if n in env else self.consts.get(n) for n in node.inputs]
            if node.layer is not None:
                result = self.layers[node.layer](args[0])
            elif node.op == "Softmax" and self.logits and node.outputs[0] in self.output_names:
                result = args[0]
            else:
                result = _RUN[node.op](node, args)
            env[node.outputs[0]] = result
        return tuple(env[name] for name in self.output_names)


# ---------------------------------------------------------------- weighted layers


def _layer(node: Node, consts: dict[str, np.ndarray],
           shapes: dict[str, tuple[int, ...]]) -> nn.Module | None:
    """The ``nn`` layer of a weighted node, or None when it runs as a function."""
    weight = consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None or node.inputs[0] in consts:
        return None
    if node.op == "Conv":
        return _conv(node, weight, consts, shapes)
    if node.op == "Gemm" and not node.attrs.get("transA", 0) and weight.ndim == 2:
        return _gemm(node, weight, consts)
    if node.op == "MatMul" and weight.ndim == 2:
        return _linear(weight.T, None)  # x @ weight, weight: [in, out]
    if node.op == "BatchNormalization":
        return _batchnorm(node, consts)
    if node.op == "PRelu" and weight.size > 1:
        prelu = nn.PReLU(int(weight.size))
        prelu.weight.data = torch.from_numpy(weight.reshape(-1).astype(np.float32))
        return prelu
    return None


def _conv(node: Node, weight: np.ndarray, consts: dict[str, np.ndarray],
          shapes: dict[str, tuple[int, ...]]) -> nn.Module:
    rank = weight.ndim - 2
    if rank not in (1, 2):
        raise PruneError(f"Conv {node.outputs[0]}: only 1-D and 2-D convolutions are read")
    group = int(node.attrs.get("group", 1))
    kind = nn.Conv1d if rank == 1 else nn.Conv2d
    bias = consts.get(node.inputs[2]) if len(node.inputs) > 2 else None
    pads = _pads(node, shapes, weight.shape[2:])
    even = _symmetric(pads)
    conv = kind(weight.shape[1] * group, weight.shape[0], tuple(weight.shape[2:]),
                stride=tuple(node.attrs.get("strides", [1] * rank)),
                padding=even or 0,  # type: ignore[arg-type]
                dilation=tuple(node.attrs.get("dilations", [1] * rank)),
                groups=group, bias=bias is not None)
    conv.weight.data = torch.from_numpy(weight.astype(np.float32))
    if bias is not None:
        conv.bias.data = torch.from_numpy(bias.astype(np.float32))  # type: ignore[union-attr]
    return _Padded(conv, () if even is not None else pads)


def _symmetric(pads: tuple[int, ...]) -> tuple[int, ...] | None:
    """Per-axis padding (first axis first) when each axis pads both sides alike, else None."""
    pairs = [pads[i:i + 2] for i in range(0, len(pads), 2)]
    if any(a != b for a, b in pairs):
        return None
    return tuple(a for a, _ in reversed(pairs))


class _Padded(nn.Module):
    """A layer after explicit padding (ONNX's pads may be asymmetric)."""

    def __init__(self, inner: nn.Module, pads: tuple[int, ...]) -> None:
        super().__init__()
        self.inner = inner
        self.pads = pads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(F.pad(x, self.pads) if self.pads else x)


def _pads(node: Node, shapes: dict[str, tuple[int, ...]], kernel: tuple[int, ...],
          ) -> tuple[int, ...]:
    """F.pad's order (last dim first) of a Conv/pool's pads or auto_pad."""
    rank = len(kernel)
    auto = node.attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = _same_pads(node, shapes[node.inputs[0]][2:], kernel, auto)
    else:
        pads = list(node.attrs.get("pads", [0] * 2 * rank))
        begins, ends = pads[:rank], pads[rank:]
    return tuple(p for axis in reversed(range(rank)) for p in (begins[axis], ends[axis]))


def _same_pads(node: Node, size: tuple[int, ...], kernel: tuple[int, ...],
               auto: str) -> tuple[list[int], list[int]]:
    strides = node.attrs.get("strides", [1] * len(kernel))
    dilations = node.attrs.get("dilations", [1] * len(kernel))
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        small, large = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else large)
        ends.append(large if auto == "SAME_UPPER" else small)
    return begins, ends


def _gemm(node: Node, weight: np.ndarray, consts: dict[str, np.ndarray]) -> nn.Module:
    alpha, beta = node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0)
    matrix = weight if node.attrs.get("transB", 0) else weight.T
    bias = consts.get(node.inputs[2]) if len(node.inputs) > 2 else None
    if bias is not None and bias.size not in (1, matrix.shape[0]):
        raise PruneError(f"Gemm {node.outputs[0]}: a bias of shape {bias.shape} is not read")
    full = None if bias is None else np.broadcast_to(beta * bias.reshape(-1),
                                                     (matrix.shape[0],))
    return _linear(alpha * matrix, full)


def _linear(matrix: np.ndarray, bias: np.ndarray | None) -> nn.Linear:
    """A Linear layer computing ``x @ matrix.T + bias`` (matrix: [out, in])."""
    layer = nn.Linear(matrix.shape[1], matrix.shape[0], bias=bias is not None)
    layer.weight.data = torch.from_numpy(np.ascontiguousarray(matrix, dtype=np.float32))
    if bias is not None:
        layer.bias.data = torch.from_numpy(np.array(bias, dtype=np.float32))
    return layer


def _batchnorm(node: Node, consts: dict[str, np.ndarray]) -> nn.Module:
    scale, bias, mean, var = (consts[n] for n in node.inputs[1:5])
    norm = nn.BatchNorm2d(int(scale.size), eps=float(node.attrs.get("epsilon", 1e-5)))
    for name, value in (("weight", scale), ("bias", bias)):
        getattr(norm, name).data = torch.from_numpy(value.astype(np.float32))
    norm.running_mean.data = torch.from_numpy(mean.astype(np.float32))  # type: ignore[union-attr]
    norm.running_var.data = torch.from_numpy(var.astype(np.float32))  # type: ignore[union-attr]
    return norm


# ---------------------------------------------------------------- functions


def _ints(value: Any) -> list[int]:
    return [int(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]


def _axes(node: Node, args: list[Any]) -> list[int] | None:
    """Axes from the second input (opset 13+) or the attribute."""
    if len(args) > 1 and args[1] is not None:
        return _ints(args[1])
    return node.attrs.get("axes")


def _reshape(node: Node, args: list[Any]) -> torch.Tensor:
    x, shape = args[0], _ints(args[1])
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if len(dims) == 2 and x.dim() >= 2 and dims[0] in (1, -1, x.shape[0]) and dims[1] in (
            -1, int(np.prod(x.shape[1:]))):
        return torch.flatten(x, 1)  # a flatten: keeps the batch, follows pruned channels
    if dims and dims[0] == 1 and x.shape[0] != 1:
        dims[0] = x.shape[0]
    return x.reshape(dims)


def _squeeze(node: Node, args: list[Any]) -> torch.Tensor:
    axes = _axes(node, args)
    if axes is None:
        return args[0].squeeze()
    x = args[0]
    for axis in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(axis)  # one axis at a time: the exporter takes no tuple
    return x


def _unsqueeze(node: Node, args: list[Any]) -> torch.Tensor:
    x = args[0]
    for axis in sorted(a % (x.dim() + len(_axes(node, args) or [])) for a in
                       _axes(node, args) or []):
        x = x.unsqueeze(axis)
    return x


def _clip(node: Node, args: list[Any]) -> torch.Tensor:
    low = args[1] if len(args) > 1 and args[1] is not None else node.attrs.get("min")
    high = args[2] if len(args) > 2 and args[2] is not None else node.attrs.get("max")
    low = None if low is None else float(low)
    high = None if high is None else float(high)
    return torch.clamp(args[0], low, high)


def _maxpool(node: Node, args: list[Any]) -> torch.Tensor:
    kernel = tuple(node.attrs["kernel_shape"])
    strides = tuple(node.attrs.get("strides", kernel))
    pads = _pads(node, {node.inputs[0]: tuple(args[0].shape)}, kernel)
    ceil = bool(node.attrs.get("ceil_mode", 0)) or _tail_only(pads, args[0].shape, kernel,
                                                                strides)
    even = _symmetric(pads)
    x = args[0] if even is not None or ceil else F.pad(args[0], pads, value=float("-inf"))
    pool = F.max_pool1d if len(kernel) == 1 else F.max_pool2d
    return pool(x, kernel, strides, padding=0 if ceil else even or 0,
                dilation=tuple(node.attrs.get("dilations", [1] * len(kernel))), ceil_mode=ceil)


def _tail_only(pads: tuple[int, ...], shape: Any, kernel: tuple[int, ...],
               strides: tuple[int, ...]) -> bool:
    """Whether padding only the ends (SAME_UPPER with stride) gives what ceil_mode gives: a
    max pool then needs no Pad node."""
    begins, ends = pads[0::2], pads[1::2]  # F.pad order: last axis first
    if any(begins) or not any(ends):
        return False
    sizes = [int(n) for n in shape[2:]][::-1]
    return all(-(-(n - k) // s) + 1 == (n + e - k) // s + 1 for n, k, s, e in zip(
        sizes, kernel[::-1], strides[::-1], ends, strict=True))


def _avgpool(node: Node, args: list[Any]) -> torch.Tensor:
    kernel = tuple(node.attrs["kernel_shape"])
    pads = _pads(node, {node.inputs[0]: tuple(args[0].shape)}, kernel)
    if any(pads) and not node.attrs.get("count_include_pad", 0):
        raise PruneError(f"AveragePool {node.outputs[0]}: padding outside the count is not read")
    pool = F.avg_pool1d if len(kernel) == 1 else F.avg_pool2d
    return pool(F.pad(args[0], pads), kernel,
                tuple(node.attrs.get("strides", kernel)),
                ceil_mode=bool(node.attrs.get("ceil_mode", 0)))


def _pad(node: Node, args: list[Any]) -> torch.Tensor:
    mode = node.attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise PruneError(f"Pad {node.outputs[0]}: only constant padding is read")
    pads = _ints(args[1]) if len(args) > 1 else _ints(node.attrs["pads"])
    rank = len(pads) // 2
    value = float(args[2]) if len(args) > 2 and args[2] is not None else 0.0
    order = tuple(p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank]))
    return F.pad(args[0], order, value=value)


def _softmax(node: Node, args: list[Any]) -> torch.Tensor:
    return torch.softmax(args[0], dim=int(node.attrs.get("axis", -1)))


def _slice(node: Node, args: list[Any]) -> torch.Tensor:
    """Slice with constant starts, ends, axes and positive steps (opset 10+ inputs)."""
    x, starts, ends = args[0], _ints(args[1]), _ints(args[2])
    axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else range(len(starts))
    steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    if any(step < 1 for step in steps):
        raise PruneError(f"Slice {node.outputs[0]}: only positive steps are read")
    index = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        size = x.shape[axis]
        index[axis] = slice(max(-size, min(start, size)), max(-size, min(end, size)), step)
    return x[tuple(index)]


def _cast(node: Node, args: list[Any]) -> torch.Tensor:
    to = _DTYPES.get(int(node.attrs["to"]))
    if to is None:
        raise PruneError(f"Cast {node.outputs[0]}: to ONNX type {node.attrs['to']} is not read")
    return args[0].to(to)


#: ONNX TensorProto element types -> torch dtypes (what Cast may produce).
_DTYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 10: torch.float16,
           11: torch.float64}


def _resize(node: Node, args: list[Any]) -> torch.Tensor:
    """Resize of an NCHW tensor: nearest with whole scales, or (bi)linear without ``roi``."""
    x = args[0]
    mode = _text(node.attrs.get("mode", b"nearest"))
    where = _text(node.attrs.get("coordinate_transformation_mode", b"half_pixel"))
    scales = args[2] if len(args) > 2 and args[2] is not None and args[2].numel() else None
    sizes = _ints(args[3])[2:] if len(args) > 3 and args[3] is not None else None
    if scales is not None:
        factors = [float(f) for f in scales.tolist()[2:]]
        sizes = [int(n * f) for n, f in zip(x.shape[2:], factors, strict=True)]
    if sizes is None or mode not in ("nearest", "linear"):
        raise PruneError(f"Resize {node.outputs[0]}: mode {mode} is not read")
    if mode == "nearest":
        if any(out % n for out, n in zip(sizes, x.shape[2:], strict=True)):
            raise PruneError(f"Resize {node.outputs[0]}: nearest by a fraction is not read")
        return F.interpolate(x, size=sizes, mode="nearest")
    if where not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        raise PruneError(f"Resize {node.outputs[0]}: coordinates {where} are not read")
    return F.interpolate(x, size=sizes, mode="bilinear" if x.dim() == 4 else "linear",
                         align_corners=where == "align_corners")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gemm_fn(node: Node, args: list[Any]) -> torch.Tensor:
    a, b = args[0], args[1]
    a = a.transpose(-1, -2) if node.attrs.get("transA", 0) else a
    b = b.transpose(-1, -2) if node.attrs.get("transB", 0) else b
    out = node.attrs.get("alpha", 1.0) * (a @ b)
    return out if len(args) < 3 or args[2] is None else out + node.attrs.get("beta", 1.0) * args[2]


_RUN: dict[str, Callable[[Node, list[Any]], Any]] = {
    "Relu": lambda n, a: torch.relu(a[0]),
    "Sigmoid": lambda n, a: torch.sigmoid(a[0]),
    "Tanh": lambda n, a: torch.tanh(a[0]),
    "LeakyRelu": lambda n, a: F.leaky_relu(a[0], n.attrs.get("alpha", 0.01)),
    "HardSigmoid": lambda n, a: torch.clamp(n.attrs.get("alpha", 0.2) * a[0]
                                            + n.attrs.get("beta", 0.5), 0, 1),
    "HardSwish": lambda n, a: F.hardswish(a[0]),
    "PRelu": lambda n, a: torch.where(a[0] >= 0, a[0], a[0] * a[1]),
    "Clip": _clip,
    "Add": lambda n, a: a[0] + a[1],
    "Sub": lambda n, a: a[0] - a[1],
    "Mul": lambda n, a: a[0] * a[1],
    "Div": lambda n, a: a[0] / a[1],
    "Max": lambda n, a: torch.maximum(a[0], a[1]),
    "Min": lambda n, a: torch.minimum(a[0], a[1]),
    "MatMul": lambda n, a: torch.matmul(a[0], a[1]),
    "Gemm": _gemm_fn,
    "MaxPool": _maxpool,
    "AveragePool": _avgpool,
    "GlobalAveragePool": lambda n, a: (F.adaptive_avg_pool2d(a[0], 1) if a[0].dim() == 4
                                       else a[0].mean(dim=tuple(range(2, a[0].dim())),
                                                      keepdim=True)),
    "Flatten": lambda n, a: torch.flatten(a[0], int(n.attrs.get("axis", 1))),
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": lambda n, a: a[0].permute(*n.attrs["perm"]),
    "Concat": lambda n, a: torch.cat(a, dim=int(n.attrs["axis"])),
    "Softmax": _softmax,
    "Pad": _pad,
    "Identity": lambda n, a: a[0],
    "Shape": lambda n, a: torch.tensor(a[0].shape, dtype=torch.int64),
    "Slice": _slice,
    "Cast": _cast,
    "Resize": _resize,
    "Dropout": lambda n, a: a[0],
}
