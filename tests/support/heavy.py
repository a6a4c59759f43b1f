"""Models with one clearly heavy node, shared by the per-node and per-layer timing tests and
bench/layers.py (which measures the shares those tests no longer assert)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

__all__ = ["HEAVY", "NODES", "heavy_matmul_model", "wide_fc_model"]

#: The nodes of heavy_matmul_model, in graph order.
NODES = ("big_matmul", "bias_add", "row_sum", "tiny_relu")

#: The heavy model: a tiny conv, a wide fully connected layer (1024 x 2048 fp32, 8 MB of
#: weights: about 100x the MACs and bytes of everything else together), a tiny head.
HEAVY = "wide_fc"


def wide_fc_model(path: Path) -> Path:
    """A tiny conv, then HEAVY (a wide fully connected layer), then a tiny head."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["input", "conv_w", "conv_b"], ["conv"], name="small_conv",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["conv_relu"], name="conv_relu"),
        helper.make_node("Flatten", ["conv_relu"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], name=HEAVY, transB=1),
        helper.make_node("Relu", ["fc"], ["fc_relu"], name="fc_relu"),
        helper.make_node("Gemm", ["fc_relu", "head_w", "head_b"], ["logits"], name="head",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "heavy", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                       [1, 1, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=[weight("conv_w", 4, 1, 3, 3), weight("conv_b", 4),
                     weight("fc_w", 2048, 1024), weight("fc_b", 2048),
                     weight("head_w", 10, 2048), weight("head_b", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def heavy_matmul_model(path: Path, *, rows: int = 128, width: int = 512) -> Path:
    """X[rows, width] -> big_matmul (W width x width) -> bias_add -> row_sum -> tiny_relu."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(
        rng.standard_normal((width, width)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "B")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["mm"], name="big_matmul"),
         helper.make_node("Add", ["mm", "B"], ["biased"], name="bias_add"),
         helper.make_node("ReduceSum", ["biased", "axes"], ["summed"], name="row_sum",
                          keepdims=1),
         helper.make_node("Relu", ["summed"], ["Y"], name="tiny_relu")],
        "heavy",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [rows, 1])],
        [weight, bias, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # ORT 1.31 refuses onnx 1.23's default IR version
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
