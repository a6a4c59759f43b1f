"""The precision a plain OpenVINO load computes on this host, as edge reads it, is what a plain
``compile_model(xml, "CPU")`` reports: bf16 on AVX512-BF16/AMX CPUs, f16 on ARM CPUs with fp16
arithmetic (not a 'BF16' capability: the old check missed it), else f32. Where it is not f32, an
IR verified with the f32 hint is verified as a plain load (``OpenVINOTarget.load``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.openvino import OpenVINOTarget
from targets.openvino import target as openvino

TARGET = OpenVINOTarget()
pytestmark = pytest.mark.skipif(TARGET.missing() is not None, reason=str(TARGET.missing()))


def _matmul(path: Path) -> Path:
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def test_the_plain_precision_is_what_a_plain_compile_reports(tmp_path: Path) -> None:
    import openvino as ov

    model = inspect_model(_matmul(tmp_path / "mm.onnx"))
    calib = Dataset(feeds=({"x": np.ones((1, 16), np.float32)},))
    xml, _ = TARGET.convert(model, "fp32", calib=calib, workdir=tmp_path / "work")
    plain = ov.Core().compile_model(str(xml), "CPU")
    computes = plain.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert openvino.plain_precision() == computes
    loaded = TARGET.load(xml, model, threads=1).compiled_model
    # edge verifies the f32 IR as the plain load computes it, whatever that is here
    assert loaded.get_property("INFERENCE_PRECISION_HINT").get_type_name() == computes
