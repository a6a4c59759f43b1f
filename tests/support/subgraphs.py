"""Valid ONNX models whose If/Loop subgraphs read outer-scope values (issue 27, class 11)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 4


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, WIDTH])


def _branch(name: str, op: str, inputs: list[str]) -> onnx.GraphProto:
    """A branch of no inputs whose one node reads ``inputs`` from the outer scope."""
    node = helper.make_node(op, inputs, [f"{name}_out"], name=f"{name}_{op.lower()}")
    return helper.make_graph([node], name, [], [_vi(f"{name}_out")])


def _if(then: onnx.GraphProto, other: onnx.GraphProto, out: str = "r") -> onnx.NodeProto:
    return helper.make_node("If", ["cond"], [out], name="if", then_branch=then,
                            else_branch=other)


def _model(nodes: list[onnx.NodeProto], inits: list[TensorProto]) -> onnx.ModelProto:
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    graph = helper.make_graph(nodes, "g", [_vi("x")], [_vi("y")], [zero, *inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _head() -> list[onnx.NodeProto]:
    """a = Relu(x), b = Sigmoid(x), cond = ReduceSum(x) > 0."""
    return [helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Sigmoid", ["x"], ["b"], name="sig"),
            helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt")]


def if_reads_outer(kind: str = "two") -> onnx.ModelProto:
    """y = Mul(If(cond) {a + a} else {a - b}, a): the branches read a and b, made outside.

    ``kind``: "two" (as above), "input" (a branch reads the graph input x), "weight" (a branch
    reads an initializer), "nested" (an If inside the then branch reads b), "only-outer" (the
    If's result is all the later node reads: b is read only inside a branch)."""
    inits = [numpy_helper.from_array(np.full((1, WIDTH), 0.5, np.float32), "w")]
    then, other = _branch("then", "Add", ["a", "a"]), _branch("else", "Sub", ["a", "b"])
    if kind == "input":
        other = _branch("else", "Sub", ["x", "b"])
    elif kind == "weight":
        other = _branch("else", "Mul", ["b", "w"])
    elif kind == "nested":
        inner = helper.make_node("If", ["cond"], ["then_out"], name="inner_if",
                                 then_branch=_branch("in_then", "Add", ["b", "b"]),
                                 else_branch=_branch("in_else", "Neg", ["a"]))
        then = helper.make_graph([inner], "then", [], [_vi("then_out")])
    tail = [helper.make_node("Mul", ["r", "a"], ["y"], name="mul")]
    if kind == "only-outer":
        tail = [helper.make_node("Tanh", ["r"], ["y"], name="tanh")]
    return _model([*_head(), _if(then, other), *tail], inits)


def loop_reads_outer() -> onnx.ModelProto:
    """A Loop of 2 trips whose body adds b (made outside) to its carried value."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Add", ["v_in", "b"], ["v_out"], name="body_add")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _vi("v_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _vi("v_out")])
    trips = numpy_helper.from_array(np.array(2, dtype=np.int64), "trips")
    nodes = [*_head(), helper.make_node("Loop", ["trips", "cond", "a"], ["r"], name="loop",
                                        body=body),
             helper.make_node("Mul", ["r", "a"], ["y"], name="mul")]
    return _model(nodes, [trips])


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path
