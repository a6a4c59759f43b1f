"""An ONNX model as a DAG of compute nodes and the tensors that could cross an edge-cloud cut."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import onnx

from edge.core.model import load_named, node_names
from partition.compress import wire_bytes_factor
from partition.scopes import node_inputs

__all__ = [
    "SINK",
    "SOURCE",
    "Graph",
    "Node",
    "Tensor",
    "build_graph",
    "load_named",
    "node_inputs",
    "node_names",
    "tensor_bytes",
    "with_compression",
]

#: Virtual producer of the graph inputs; it lives on the edge (the input data is on the device).
SOURCE = "<source>"
#: Virtual consumer of the graph outputs; it lives on the edge (the result is needed there).
SINK = "<sink>"


@dataclass(frozen=True, slots=True)
class Node:
    """A compute node and its latency on the edge device and in the cloud, in ms."""

    name: str
    edge_ms: float
    cloud_ms: float
    op_type: str = ""


@dataclass(frozen=True, slots=True)
class Tensor:
    """A tensor that could cross the cut: size, producer (or SOURCE), consumers (SINK if output)."""

    name: str
    bytes: int
    producer: str
    consumers: tuple[str, ...]
    dtype: str = "float32"

    @property
    def is_output(self) -> bool:
        """Whether the device needs this tensor back (a graph output)."""
        return SINK in self.consumers


@dataclass(frozen=True, slots=True)
class Graph:
    """Compute nodes and the tensors between them (weights excluded: both sides hold them)."""

    nodes: tuple[Node, ...]
    tensors: tuple[Tensor, ...]

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return next(n for n in self.nodes if n.name == name)

    def predecessors(self, name: str) -> frozenset[str]:
        """Compute nodes whose tensors ``name`` consumes (SOURCE excluded)."""
        return frozenset(t.producer for t in self.tensors
                         if name in t.consumers and t.producer != SOURCE)


def tensor_bytes(model: onnx.ModelProto) -> dict[str, int]:
    """Bytes of every typed tensor after shape inference, symbolic or unknown dims pinned to 1."""
    return _value_sizes_and_dtypes(model)[0]


def _value_sizes_and_dtypes(model: onnx.ModelProto) -> tuple[dict[str, int], dict[str, str]]:
    """Bytes and numpy dtype name of every typed tensor (pinned dims, after shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(_pinned_inputs(model))
    graph = inferred.graph
    sizes: dict[str, int] = {}
    dtypes: dict[str, str] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        sizes[value.name] = _value_bytes(value)
        dtypes[value.name] = _value_dtype(value)
    return sizes, dtypes


def build_graph(model_path: str | Path, edge_ms: Mapping[str, float],
                cloud_ms: Mapping[str, float]) -> Graph:
    """The DAG of a model with per-node costs (missing costs count as 0)."""
    model = load_named(model_path)
    sizes, dtypes = _value_sizes_and_dtypes(model)
    weights = {i.name for i in model.graph.initializer}
    nodes = tuple(Node(n.name, float(edge_ms.get(n.name, 0.0)), float(cloud_ms.get(n.name, 0.0)),
                       n.op_type) for n in model.graph.node)
    tensors = _tensors(model, weights, sizes, dtypes)
    return Graph(nodes=nodes, tensors=tensors)


def with_compression(graph: Graph, mode: str) -> Graph:
    """The graph with node-made float32 tensors at their compressed wire size (see compress).

    Graph outputs keep their size: the tail returns them uncompressed on the downlink (an
    output made on the device and also read by the cloud is priced uncompressed: a slight
    overestimate)."""
    factor = wire_bytes_factor(mode)
    if factor == 1.0:
        return graph
    tensors = tuple(replace(t, bytes=int(t.bytes * factor))
                    if t.producer != SOURCE and t.dtype == "float32" and not t.is_output else t
                    for t in graph.tensors)
    return Graph(nodes=graph.nodes, tensors=tensors)


def _tensors(model: onnx.ModelProto, weights: set[str], sizes: Mapping[str, int],
             dtypes: Mapping[str, str]) -> tuple[Tensor, ...]:
    producer = {i.name: SOURCE for i in model.graph.input if i.name not in weights}
    consumers: dict[str, list[str]] = {name: [] for name in producer}
    for node in model.graph.node:
        for out in node.output:
            if out:
                producer[out] = node.name
                consumers.setdefault(out, [])
    for node in model.graph.node:
        for name in dict.fromkeys(node_inputs(node)):
            if name in producer:
                consumers[name].append(node.name)
    for out in model.graph.output:
        consumers[out.name].append(SINK)
    return tuple(Tensor(name, sizes.get(name, 0), producer[name], tuple(consumers[name]),
                        dtypes.get(name, ""))
                 for name in producer if consumers[name])


def _pinned_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph inputs have every symbolic or unknown dim set to 1."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                dim.Clear()
                dim.dim_value = 1
    return copy


def _value_bytes(value: onnx.ValueInfoProto) -> int:
    tensor = value.type.tensor_type
    if not tensor.elem_type or not tensor.HasField("shape"):
        return 0
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 4
    count = 1
    for dim in tensor.shape.dim:
        count *= dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else 1
    return count * itemsize


def _value_dtype(value: onnx.ValueInfoProto) -> str:
    """numpy dtype name of a value, or "" when unknown."""
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
    except (KeyError, TypeError, ValueError):
        return ""
