"""The fixed probe models a device is calibrated with (``edge devices probe --calibrate``):
eleven small ONNX graphs, each leaning on one kind of work and every kind in two of them (so
that each probe can be held out and still predicted), separating a device's cost per
dense-convolution, depthwise-convolution and matrix-product MAC, per value moved, per node
and per call. Built here from a seeded generator (nothing is downloaded), the same bytes
on every machine, each timed in milliseconds on a Pi-class CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["PROBES", "write_probes"]

OPSET = 17


class _Graph:
    """A chain of nodes on one float input, its weights drawn from a seeded generator."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape = name, shape
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(len(name) * 7919 + sum(map(ord, name)))
        self.last = "x"

    def weight(self, shape: tuple[int, ...]) -> str:
        name = f"w{len(self.weights)}"
        scale = 1.0 / np.sqrt(max(1, int(np.prod(shape[1:]))))
        values = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.weights.append(numpy_helper.from_array(values, name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> _Graph:
        out = f"v{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, [self.last, *inputs], [out],
                                           name=f"{kind.lower()}{len(self.nodes)}", **attrs))
        self.last = out
        return self

    def conv(self, cin: int, cout: int, k: int, group: int = 1) -> _Graph:
        return self.op("Conv", self.weight((cout, cin // group, k, k)), pads=[k // 2] * 4,
                       group=group).op("Relu")

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.shape))],
            [helper.make_tensor_value_info(self.last, TensorProto.FLOAT, None)], self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=8)
        return onnx.shape_inference.infer_shapes(model)


def _call() -> _Graph:  # the call itself: one cheap node
    return _Graph("call", (1, 16)).op("Relu")


def _nodes() -> _Graph:  # per node: sixty tiny elementwise nodes
    g = _Graph("nodes", (1, 64))
    for _ in range(30):
        g.op("Relu").op("Neg")
    return g


def _values(name: str, shape: tuple[int, ...], pairs: int) -> Callable[[], _Graph]:
    def build() -> _Graph:  # per value moved: activations, no MACs
        g = _Graph(name, shape)
        for _ in range(pairs):
            g.op("Relu").op("Neg")
        return g
    return build


def _conv_small() -> _Graph:
    return _Graph("conv_small", (1, 16, 32, 32)).conv(16, 32, 3).conv(32, 32, 3)


def _conv_large() -> _Graph:
    return _Graph("conv_large", (1, 32, 56, 56)).conv(32, 64, 3).conv(64, 64, 3)


def _pointwise() -> _Graph:
    return _Graph("pointwise", (1, 128, 28, 28)).conv(128, 256, 1).conv(256, 128, 1)


def _depthwise(name: str, channels: int, side: int, layers: int) -> Callable[[], _Graph]:
    def build() -> _Graph:
        g = _Graph(name, (1, channels, side, side))
        for _ in range(layers):
            g.conv(channels, channels, 3, group=channels)
        return g
    return build


def _mlp_small() -> _Graph:
    g = _Graph("mlp_small", (4, 512))
    return g.op("MatMul", g.weight((512, 512))).op("Relu").op("MatMul", g.weight((512, 512)))


def _mlp_large() -> _Graph:
    g = _Graph("mlp_large", (8, 1024))
    for _ in range(3):
        g.op("MatMul", g.weight((1024, 1024))).op("Relu")
    return g


#: name -> builder, in the order they are timed.
PROBES: dict[str, Callable[[], _Graph]] = {
    "call": _call, "nodes": _nodes,
    "values_large": _values("values_large", (1, 32, 112, 112), 4),
    "values_small": _values("values_small", (1, 16, 56, 56), 10),
    "conv_small": _conv_small, "conv_large": _conv_large, "pointwise": _pointwise,
    "depthwise_wide": _depthwise("depthwise_wide", 128, 56, 2),
    "depthwise_deep": _depthwise("depthwise_deep", 256, 28, 3),
    "mlp_small": _mlp_small, "mlp_large": _mlp_large}


def write_probes(folder: Path) -> dict[str, Path]:
    """Every probe model written into ``folder`` (``probe-NAME.onnx``), by name."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, build in PROBES.items():
        path = folder / f"probe-{name}.onnx"
        onnx.save(build().model(), path)
        written[name] = path
    return written
