"""Issue 29: an OpenVINO fp32 IR computes what edge verified wherever it is loaded, or says how.

OpenVINO computes a plain ``compile_model(ir, "CPU")`` in bf16 on AVX512-BF16/AMX CPUs, and its
CPU plugin does not read INFERENCE_PRECISION_HINT from the IR's rt_info "runtime_options". The
fp32 IR marks every computing op precise (OpenVINO's DisableFP16Compression), which a plain load
honours for matrix products but, on a Xeon with AMX and OpenVINO 2026.4.1, not for a CNN's
convolutions (bench/results/openvino_plain_load.json): so its load line names the hint, and on
such a CPU edge verifies the plain load (``targets/openvino/target.py`` ``load``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.openvino import OpenVINOTarget
from targets.openvino import target as openvino

TARGET = OpenVINOTarget()
pytestmark = pytest.mark.skipif(TARGET.missing() is not None, reason=str(TARGET.missing()))
_COMPUTING = ("Parameter", "Result", "Constant")


def _dense(path: Path) -> Path:
    """Conv -> Relu -> Flatten -> Gemm: float work a bf16 load would round."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("fc", (10, 8 * 8 * 8)),
                          ("fcb", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ov_settings")
    model = inspect_model(_dense(tmp / "dense.onnx"))
    x = np.random.default_rng(1).standard_normal((4, 1, 3, 8, 8)).astype(np.float32)
    calib = Dataset(feeds=tuple({"x": s} for s in x))
    made = {p: TARGET.convert(model, p, calib=calib, workdir=tmp / "work")
            for p in ("fp32", "bf16")}
    return {"model": model, "x": x, "made": made}


def _ops(xml: Path) -> list[Any]:
    import openvino as ov

    return [op for op in ov.Core().read_model(str(xml)).get_ordered_ops()
            if op.get_type_name() not in _COMPUTING]


def test_the_fp32_ir_marks_every_op_precise_and_a_plain_load_computes_it(
        converted: dict[str, Any]) -> None:
    import openvino as ov

    xml, notes = converted["made"]["fp32"]
    ops = _ops(xml)
    assert ops and all(openvino.PRECISE_KEY in op.get_rt_info() for op in ops), \
        [op.get_friendly_name() for op in ops if openvino.PRECISE_KEY not in op.get_rt_info()]
    assert ("load: core.compile_model('model_fp32.xml', 'CPU', "
            "{'INFERENCE_PRECISION_HINT': 'f32'}) as verified") in " ".join(notes), notes
    plain = ov.Core().compile_model(str(xml), "CPU")  # as a user's application loads it
    edge = TARGET.load(xml, converted["model"], threads=1)  # as edge verified it
    session = ort.InferenceSession(str(converted["model"].path),
                                   providers=["CPUExecutionProvider"])
    for sample in converted["x"]:
        got, verified = plain(sample)[0], edge.run({"x": sample})[0]
        want = session.run(None, {"x": sample})[0]
        np.testing.assert_array_equal(got, verified)
        if openvino.plain_precision() == "f32":  # bf16/f16 hosts: convolutions are not f32
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()  # f32, not bf16


def test_the_bf16_ir_made_from_the_fp32_one_is_not_marked(converted: dict[str, Any]) -> None:
    xml, notes = converted["made"]["bf16"]
    assert any(n.startswith("made from model_fp32.xml") for n in notes), notes
    assert not any(openvino.PRECISE_KEY in op.get_rt_info() for op in _ops(xml))
    assert any(n.startswith("load: core.compile_model('model_bf16.xml', 'CPU', "
                            "{'INFERENCE_PRECISION_HINT': 'bf16'})") for n in notes), notes
