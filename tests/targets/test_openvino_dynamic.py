"""OpenVINO's int8-dynamic: NNCF's int8 weight compression of the matrix products, their
activations quantized by the CPU plugin at run time. The IR records the group size as a runtime
option, so a plain compile (a user's, a serving engine's, the device agent's) quantizes as the
verified one did; a model without matrix products gets one line, not an IR."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.base import ConversionError
from targets.openvino import OpenVINOTarget
from targets.openvino.quantize import DYNAMIC_KEY, GROUP_SIZE

TARGET = OpenVINOTarget()
pytestmark = pytest.mark.skipif(TARGET.missing() is not None, reason=str(TARGET.missing()))


def _mlp(path: Path) -> Path:
    """x [1, 256] -> MatMul 256x256 -> Relu -> MatMul 256x16: two matrix products."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32) / 16, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 16)).astype(np.float32) / 16, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def _conv(path: Path) -> Path:
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def test_int8_dynamic_compresses_weights_and_every_compile_quantizes_at_run_time(
        tmp_path: Path) -> None:
    import openvino as ov

    model = inspect_model(_mlp(tmp_path / "mlp.onnx"))
    calib = Dataset(feeds=({"x": np.ones((1, 256), np.float32)},))
    xml, notes = TARGET.convert(model, "int8-dynamic", calib=calib, workdir=tmp_path / "w")
    fp32, _ = TARGET.convert(model, "fp32", calib=calib, workdir=tmp_path / "w")
    assert xml.name == "model_int8_dynamic.xml" and any("run time" in n for n in notes)
    # the weights are int8 in the file: about a quarter of the fp32 IR's
    assert xml.with_suffix(".bin").stat().st_size < 0.3 * fp32.with_suffix(".bin").stat().st_size
    weights = {c.get("element_type") for c in ET.parse(xml).getroot().iter("data")
               if c.get("element_type") in ("u8", "i8")}
    assert weights, "no int8 constants in the IR"
    plain = ov.Core().compile_model(str(xml), "CPU")  # every compile reads the IR's option
    assert int(plain.get_property(DYNAMIC_KEY)) == GROUP_SIZE
    loaded = TARGET.load(xml, model, threads=1).compiled_model  # f32: where it quantizes
    assert loaded.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
    assert int(loaded.get_property(DYNAMIC_KEY)) == GROUP_SIZE
    x = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    got = TARGET.load(xml, model, threads=1).run({"x": x})[0]
    want = TARGET.load(fp32, model, threads=1).run({"x": x})[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) /
                   (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.99 and not np.array_equal(got, want)


def test_a_model_without_matrix_products_is_one_line(tmp_path: Path) -> None:
    model = inspect_model(_conv(tmp_path / "conv.onnx"))
    calib = Dataset(feeds=({"x": np.ones((1, 3, 8, 8), np.float32)},))
    with pytest.raises(ConversionError, match="no matrix products"):
        TARGET.convert(model, "int8-dynamic", calib=calib, workdir=tmp_path / "w")
    assert not (tmp_path / "w" / "model_int8_dynamic.xml").exists()

