"""Model intake: read an ONNX file into a ModelInfo (IO specs, params, MACs, size, op set)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edge.core.errors import UsageError, first_line
from edge.core.files import write_atomic
from edge.core.lastops import last_ops
from edge.core.units import size_text
from edge.core.values import ModelInfo, TensorSpec

__all__ = ["inspect_model", "layer_owner", "load_named", "load_onnx", "macs_caveat",
           "node_bases", "node_macs", "node_names", "save_onnx_atomic", "sha256_file", "unrunnable",
           "value_shapes"]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load and check an ONNX model; a missing or corrupt file raises UsageError."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"model file {path} does not exist")
    if path.suffix.lower() != ".onnx":
        raise UsageError(f"{path}: only ONNX models (.onnx) are accepted; export the model first")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several unrelated types for a bad file
        raise UsageError(f"{path}: not a valid ONNX model ({first_line(exc)})") from None
    if not model.graph.input or not model.graph.output:
        raise UsageError(f"{path}: the ONNX graph has no inputs or no outputs")
    return model


def save_onnx_atomic(model: onnx.ModelProto, path: Path) -> None:
    """Write a model under a temp name beside ``path``, then rename it into place."""
    write_atomic(path, lambda tmp: onnx.save(model, str(tmp)))


def inspect_model(path: str | Path) -> ModelInfo:
    """Read a model file and describe it."""
    path = Path(path)
    model = load_onnx(path)
    inferred = onnx.shape_inference.infer_shapes(model)
    initializers = {i.name for i in model.graph.initializer}
    ops = last_ops(model)
    return ModelInfo(
        path=str(path.resolve()),
        sha256=sha256_file(path),
        size_bytes=path.stat().st_size,
        opset=_opset(model),
        inputs=tuple(_spec(v) for v in model.graph.input if v.name not in initializers),
        outputs=tuple(replace(_spec(v), last_op=ops[v.name]) for v in model.graph.output),
        params=sum(_numel(i.dims) for i in model.graph.initializer),
        macs=_count_macs(inferred),
        ops=dict(Counter(n.op_type for n in model.graph.node).most_common()),
    )


MAX_SAMPLE_BYTES = 4 * 2**30  # one input of one sample: no edge device holds more


def unrunnable(info: ModelInfo) -> str | None:
    """Why edge cannot feed or compare this model's tensors (non-numeric, absurdly large)."""
    newest = onnx.defs.onnx_opset_version()
    if info.opset > newest:
        return (f"opset {info.opset} is newer than any this edge's ONNX knows ({newest}): "
                f"export the model with opset {newest} or older")
    for spec in (*info.inputs, *info.outputs):
        kind = np.dtype(spec.dtype).kind
        if kind not in "fiub":
            shown = "a string" if kind in "OSU" else spec.dtype
            return (f"tensor '{spec.name}' is {shown}: edge feeds and verifies numeric "
                    "tensors only (float, int, bool); move text handling out of the graph")
    for spec in info.inputs:
        size = _bytes(spec)
        if size > MAX_SAMPLE_BYTES:
            return (f"input '{spec.name}' declares {_shown(spec.shape)} {spec.dtype}: "
                    f"{size_text(size)} per sample, more than any device holds; pin real dims "
                    f"with --shape {spec.name}=DIMS")
    return None


def ort_refusal(path: str | Path) -> str | None:
    """Why ONNX Runtime cannot load this ONNX file (an op of an unknown domain, shapes that do
    not fit), in one line; None when it loads."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT's own types (Fail, InvalidGraph, ...) vary
        return f"ONNX Runtime cannot load the model: {first_line(exc)}"
    return None


def _bytes(spec: TensorSpec) -> int:
    """Bytes of one sample of ``spec`` with its static dims (symbolic ones count 1)."""
    count = 1
    for dim in spec.shape:
        count *= dim if isinstance(dim, int) and dim > 0 else 1
    return count * np.dtype(spec.dtype).itemsize


def macs_caveat(info: ModelInfo) -> str | None:
    """Why ``info.macs`` is only a lower bound (inputs with symbolic dims beyond the batch dim,
    counted as 1), with the --shape that gives the real count; None when the count is whole."""
    loose = [s for s in info.inputs if any(isinstance(d, str) or d <= 0 for d in s.shape[1:])]
    if not loose:
        return None
    dims = "; ".join(f"'{s.name}' {_shown(s.shape)}" for s in loose)
    hint = " ".join(f"--shape {s.name}={','.join(_pin_hint(i, d) for i, d in enumerate(s.shape))}"
                    for s in loose)
    return (f"MACs are a lower bound: symbolic input dims ({dims}) are counted as 1; "
            f"give {hint} for the real count")


def _shown(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _pin_hint(index: int, dim: int | str) -> str:
    """A fixed dim as it is, a symbolic batch dim as 1, another as its name to fill in."""
    if isinstance(dim, int) and dim > 0:
        return str(dim)
    return "1" if index == 0 else (str(dim).upper() if isinstance(dim, str) and dim != "?"
                                   else "N")


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                 for d in tensor.shape.dim)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    return TensorSpec(name=value.name, shape=dims, dtype=dtype)


def _numel(dims: object) -> int:
    total = 1
    for d in dims:  # type: ignore[attr-defined]
        total *= int(d)
    return total


def value_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of every value and weight of a shape-inferred model (symbolic dims as 1)."""
    shapes: dict[str, tuple[int, ...]] = {}
    graph = model.graph
    for value in list(graph.value_info) + list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = tuple(d.dim_value if d.dim_value > 0 else 1 for d in dims)
    for init in graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def _count_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of Conv, ConvTranspose, Gemm, MatMul and recurrent nodes, float or
    quantized (batch dims as 1)."""
    shapes = value_shapes(model)
    return sum(node_macs(node, shapes) for node in model.graph.node)


def node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """MACs of one Conv/ConvTranspose/Gemm/MatMul/LSTM/GRU/RNN node or of its quantized form
    (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul, DynamicQuantizeLSTM, ...); 0 for
    other ops or unknown shapes."""
    counter = _MAC_RULES.get(node.op_type)
    if counter is None:
        return 0
    try:
        return int(counter(node, shapes))
    except (KeyError, IndexError, ValueError):
        return 0  # unknown shape: leave it out rather than guess


def _conv_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], w: int = 1) -> int:
    weight = shapes[node.input[w]]
    out = shapes[node.output[0]]
    return _numel(out) * _numel(weight[1:])


def _qlinear_conv_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    return _conv_macs(node, shapes, w=3)  # x, x_scale, x_zero_point, w, ...


def _conv_transpose_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    weight = shapes[node.input[1]]
    inp = shapes[node.input[0]]
    return _numel(inp) * _numel(weight[1:])


def _matmul_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    out = shapes[node.output[0]]
    a = shapes[node.input[0]]
    return _numel(out) * a[-1]


def _qlinear_matmul_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    return _numel(shapes[node.output[0]]) * shapes[node.input[0]][-1]


def _recurrent_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """LSTM/GRU/RNN (and DynamicQuantizeLSTM): every step multiplies the input by W and the
    hidden state by R, for every direction: steps x batch x (|W| + |R|)."""
    x = shapes[node.input[0]]
    layout = next((attr.i for attr in node.attribute if attr.name == "layout"), 0)
    steps, batch = (x[1], x[0]) if layout else (x[0], x[1])
    return steps * batch * (_numel(shapes[node.input[1]]) + _numel(shapes[node.input[2]]))


def _gemm_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], b: int = 1) -> int:
    """M x K x N from A and B (their transposes as flagged): Gemm, and QGemm whose output
    ONNX shape inference does not know (recorded in ``shapes`` for the nodes after it)."""
    flags = {attr.name: attr.i for attr in node.attribute}
    a, w = shapes[node.input[0]], shapes[node.input[b]]
    rows, inner = (a[1], a[0]) if flags.get("transA") else (a[0], a[-1])
    cols = w[0] if flags.get("transB") else w[-1]
    shapes.setdefault(node.output[0], (rows, cols))
    return rows * inner * cols


def _qgemm_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    return _gemm_macs(node, shapes, b=3)  # A, a_scale, a_zero_point, B, ...


_MAC_RULES = {
    "Conv": _conv_macs,
    "ConvInteger": _conv_macs,
    "QLinearConv": _qlinear_conv_macs,
    "ConvTranspose": _conv_transpose_macs,
    "MatMul": _matmul_macs,
    "MatMulInteger": _matmul_macs,
    "QLinearMatMul": _qlinear_matmul_macs,
    "DynamicQuantizeMatMul": _matmul_macs,
    "MatMulIntegerToFloat": _matmul_macs,
    "Gemm": _gemm_macs,
    "QGemm": _qgemm_macs,
    "LSTM": _recurrent_macs,
    "GRU": _recurrent_macs,
    "RNN": _recurrent_macs,
    "DynamicQuantizeLSTM": _recurrent_macs,
}


def node_names(model: onnx.ModelProto) -> list[str]:
    """A unique name per node, in graph order (the node's own name when set and unique)."""
    names: list[str] = []
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        name = node.name if node.name and node.name not in seen else f"{node.op_type}_{index}"
        while name in seen:
            name = f"{name}_"
        seen.add(name)
        names.append(name)
    return names


def load_named(model_path: str | Path) -> onnx.ModelProto:
    """Load a model and give every node its unique name from ``node_names`` (per-node costs,
    per-layer times and splits work by node name)."""
    model = onnx.load(str(model_path))
    for node, name in zip(model.graph.node, node_names(model), strict=True):
        node.name = name
    return model


def node_bases(model: onnx.ModelProto) -> dict[str, str]:
    """A node's name, or its first output's when unnamed (the name a converter such as
    OpenVINO's gives the layers it makes of the node), keyed by that name and by its outputs'."""
    bases: dict[str, str] = {}
    for node in model.graph.node:
        base = node.name or (node.output[0] if node.output else "")
        bases |= {key: base for key in (node.name, *node.output) if key}
    return bases


def layer_owner(name: str, bases: Collection[str]) -> str | None:
    """The longest of ``bases`` that a runtime's layer ``name`` equals or extends with '/...'
    (``/0/Conv/WithoutBiases`` -> ``/0/Conv``), else None."""
    parts = name.split("/")
    return next((key for end in range(len(parts), 0, -1)
                 if (key := "/".join(parts[:end])) in bases), None)
