"""An ill-conditioned model, as real ones sometimes are: a wide MatMul makes pairs of large
values (weights ~300) that the next MatMul subtracts, leaving a small difference, so any
regrouping of the sums (another runtime's kernels) shows. Shared by
tests/edge/test_fp32_exact.py and the docs' optimize session (bench/docruns/files.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDE = 500


def cancelling(path: Path) -> Path:
    """y = relu(x @ [B, B + S]) @ [I; -I] @ C: large B (std 300), small S (std 0.01)."""
    rng = np.random.default_rng(0)
    big, small = rng.normal(0, 300, (WIDE, 32)), rng.normal(0, 0.01, (WIDE, 32))
    w1 = np.concatenate([big, big + small], 1).astype(np.float32)
    w2 = (np.concatenate([np.eye(32), -np.eye(32)], 0) @ rng.normal(0, 1, (32, 8)))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="wide"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
             helper.make_node("MatMul", ["h2", "W2"], ["y"], name="diff")]
    graph = helper.make_graph(
        nodes, "cancelling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2.astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def inputs(count: int = 40) -> np.ndarray:
    """``count`` inputs [count, 1, WIDE] (fixed seed)."""
    return np.random.default_rng(3).normal(0, 1, (count, 1, WIDE)).astype(np.float32)
