"""Issue 29: ONNX Runtime's static int8 that fails on the pre-processed graph is retried on the
graph as given before edge gives up, and says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.onnxruntime import OnnxRuntimeTarget


def _matmul_add(path: Path) -> Path:
    """MatMul + Add of a [1, 8] bias: quant_pre_process fuses them into a Gemm whose C is 2-D,
    and ORT 1.31's per-channel int32-bias check then compares arrays ("truth value of an
    array ... is ambiguous")."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal((1, 8)).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["y"], name="add")], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def test_int8_that_fails_after_pre_processing_is_retried_without_it(tmp_path: Path) -> None:
    model = inspect_model(_matmul_add(tmp_path / "dense.onnx"))
    x = np.random.default_rng(1).standard_normal((8, 1, 16)).astype(np.float32)
    calib = Dataset(feeds=tuple({"x": s} for s in x))
    path, notes = OnnxRuntimeTarget().convert(model, "int8", calib=calib,
                                              workdir=tmp_path / "work")
    assert any("quantized the graph without that pre-processing" in n and "ambiguous" in n
               for n in notes), notes
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    a = np.concatenate([got.run(None, {"x": s})[0] for s in x]).ravel()
    b = np.concatenate([want.run(None, {"x": s})[0] for s in x]).ravel()
    assert np.corrcoef(a, b)[0, 1] > 0.98, (a, b)  # an int8 model of the same layer
