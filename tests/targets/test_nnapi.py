"""NNAPI target: the digits CNN is one NNAPI partition from API 29, refused below; a model with
an op the delegate never takes is refused naming it; the report round-trips through JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError
from targets.nnapi import NNAPIReport, NNAPITarget, OpVerdict, nnapi_report
from targets.nnapi import target as nnapi
from targets.tflite import TFLiteTarget
from tests.support.digits import DigitsModel

needs_tflite = pytest.mark.skipif(TFLiteTarget().missing() is not None,
                                  reason=str(TFLiteTarget().missing()))


def _accuracy(runner: Any, data: Dataset) -> float:
    predictions = [int(np.argmax(runner.run(feed)[0])) for feed in data.feeds]
    return float(np.mean(np.array(predictions) == data.labels))


def _weight_scales(path: Path, op_name: str) -> list[int]:
    """Number of quantization scales of each ``op_name``'s weights (input 1)."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    graph = model.subgraphs[0]
    return [len(graph.tensors[op.inputs[1]].quantization.scale) for op in graph.operators
            if nnapi._op_name(model.operatorCodes[op.opcodeIndex]) == op_name]


# ---------------------------------------------------------------- digits, end to end (slow)


@pytest.fixture(scope="module")
def model(digits: DigitsModel) -> ModelInfo:
    return inspect_model(digits.onnx)


@pytest.fixture(scope="module")
def converted(model: ModelInfo, digits: DigitsModel,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("nnapi-cache")
    calib = load_dataset(digits.calib, model)
    start = time.perf_counter()
    path, notes = NNAPITarget().convert(model, "int8", calib=calib, workdir=workdir)
    return {"workdir": workdir, "calib": calib, "path": path, "notes": notes,
            "seconds": time.perf_counter() - start}


@pytest.mark.slow
@needs_tflite
def test_digits_is_one_partition_from_api_29(converted: dict[str, Any]) -> None:
    path = converted["path"]
    assert path.name == nnapi.ARTIFACT and path.is_file()
    for level in range(29, 36):
        report = nnapi_report(path, level)
        assert report.delegable and report.partitions == 1 and not report.rejected, level
    ops = [v.op for v in nnapi_report(path).ops]
    assert ops.count("CONV_2D") == 3 and ops.count("FULLY_CONNECTED") == 2
    assert "QUANTIZE" not in ops and "DEQUANTIZE" not in ops  # int8 I/O: no edge ops
    notes = " ".join(converted["notes"])
    assert "takes all 9 ops in 1 partition" in notes and "API 34" in notes
    assert "2 FULLY_CONNECTED weight tensors requantized per-tensor" in notes
    print(f"\nnnapi convert (one onnx2tf run + analysis): {converted['seconds']:.1f} s")


@pytest.mark.slow
@needs_tflite
def test_dense_weights_per_tensor_convolutions_per_channel(converted: dict[str, Any]) -> None:
    path = converted["path"]
    source = converted["workdir"] / nnapi.ONNX2TF_DIR / "model_full_integer_quant.tflite"
    assert _weight_scales(source, "FULLY_CONNECTED") == [64, 10]  # onnx2tf: per-channel
    assert _weight_scales(path, "FULLY_CONNECTED") == [1, 1]
    assert _weight_scales(path, "CONV_2D") == _weight_scales(source, "CONV_2D") == [16, 32, 32]
    assert "per-channel quantized weights" in nnapi_report(source, 34).summary()


@pytest.mark.slow
@needs_tflite
def test_digits_keeps_accuracy_on_the_cpu(converted: dict[str, Any], model: ModelInfo,
                                          digits: DigitsModel) -> None:
    held_out = load_dataset(digits.eval, model, want_labels=True)
    runner = NNAPITarget().load(converted["path"], model, threads=1)
    io = runner.interpreter.get_input_details() + runner.interpreter.get_output_details()
    assert all(np.dtype(d["dtype"]) == np.int8 for d in io)
    accuracy = _accuracy(runner, held_out)
    assert digits.float_accuracy - accuracy <= 0.01, (accuracy, digits.float_accuracy)


@pytest.mark.slow
@needs_tflite
@pytest.mark.parametrize("level", [27, 28])
def test_digits_refused_below_api_29(level: int, converted: dict[str, Any],
                                     model: ModelInfo) -> None:
    with pytest.raises(ConversionError) as caught:
        NNAPITarget(api_level=level).convert(model, "int8", calib=converted["calib"],
                                             workdir=converted["workdir"])
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"NNAPI (API {level}) would delegate")
    assert "CONV_2D x3 (int8 (signed) data needs API 29+)" in message
    assert "FULLY_CONNECTED x2 (int8 (signed) data needs API 29+)" in message
    assert ("TRANSPOSE (needs API 28+)" in message) == (level == 27)
    assert f"in {3 if level == 27 else 2} partitions" in message
    assert not list(converted["workdir"].glob("*.partial"))
    assert converted["path"].is_file()  # the API 34 artifact is untouched


def _gelu_model(path: Path) -> Path:
    """conv -> GELU -> conv -> GELU -> conv: onnx2tf keeps GELU a TFLite builtin, in int8."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i, (out_ch, in_ch) in enumerate([(8, 1), (8, 8), (4, 8)]):
        inits += [numpy_helper.from_array(
                      rng.normal(0, 0.3, (out_ch, in_ch, 3, 3)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.zeros(out_ch, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"],
                                      pads=[1, 1, 1, 1]))
        x = f"c{i}"
        if i < 2:
            nodes.append(helper.make_node("Gelu", [x], [f"g{i}"], approximate="tanh"))
            x = f"g{i}"
    graph = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    proto.ir_version = 9
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    return path


@pytest.mark.slow
@needs_tflite
def test_op_nnapi_never_takes_is_refused_with_partitions(tmp_path: Path) -> None:
    model = inspect_model(_gelu_model(tmp_path / "gelu.onnx"))
    x = np.random.default_rng(1).random((16, 1, 8, 8), dtype=np.float32)
    calib = Dataset(feeds=tuple({"x": x[i:i + 1]} for i in range(len(x))))
    workdir = tmp_path / "cache"
    with pytest.raises(ConversionError) as caught:
        NNAPITarget().convert(model, "int8", calib=calib, workdir=workdir)
    message = str(caught.value)
    assert "\n" not in message
    assert message == ("NNAPI (API 34) would delegate 3 of 5 ops in 3 partitions; CPU fallback "
                       "for GELU x2 (not supported by the NNAPI delegate at any API level)")
    report = nnapi_report(workdir / nnapi.ONNX2TF_DIR / "model_full_integer_quant.tflite")
    assert [v.op for v in report.rejected] == ["GELU", "GELU"] and report.partitions == 3
    assert [v.index for v in report.rejected] == [1, 3]
    assert not (workdir / nnapi.ARTIFACT).exists()


@pytest.mark.slow
@needs_tflite
def test_real_report_json_round_trips(converted: dict[str, Any]) -> None:
    report = nnapi_report(converted["path"], 28)
    document = json.loads(json.dumps(report.to_json()))
    assert NNAPIReport.from_json(document) == report
    assert document["delegable"] is False and document["partitions"] == 2
    assert document["summary"] == report.summary()


# ---------------------------------------------------------------- report and rules (fast)


def _report(*reasons: str | None, level: int = 34) -> NNAPIReport:
    ops = tuple(OpVerdict(index=i, op=f"OP{i}", version=1, reason=r)
                for i, r in enumerate(reasons))
    return NNAPIReport(api_level=level, ops=ops, partitions=nnapi._partitions(ops))


def test_report_json_round_trips() -> None:
    report = _report(None, "needs API 29+", None, None, "never", level=28)
    document = json.loads(json.dumps(report.to_json()))
    assert NNAPIReport.from_json(document) == report
    assert document["partitions"] == 2 and document["delegable"] is False
    assert document["ops"][1] == {"index": 1, "op": "OP1", "version": 1,
                                  "reason": "needs API 29+"}


def test_partitions_are_runs_of_accepted_ops() -> None:
    assert _report(None, None, None).partitions == 1
    assert _report("x", None, "x", None, None, "x").partitions == 2
    assert _report("x", "x").partitions == 0
    assert _report().partitions == 0


def test_summary_is_one_line_and_groups_repeats() -> None:
    assert _report(None, None).summary() == "NNAPI (API 34) takes all 2 ops in 1 partition"
    ops = tuple(OpVerdict(index=i, op=name, version=1, reason=why) for i, (name, why) in
                enumerate([("CONV_2D", None), ("GELU", "never"), ("CONV_2D", None),
                           ("GELU", "never"), ("RESIZE_NEAREST_NEIGHBOR", "needs API 29+")]))
    report = NNAPIReport(api_level=28, ops=ops, partitions=nnapi._partitions(ops))
    assert report.summary() == ("NNAPI (API 28) would delegate 2 of 5 ops in 2 partitions; CPU "
                                "fallback for GELU x2 (never), RESIZE_NEAREST_NEIGHBOR "
                                "(needs API 29+)")
    assert not _report("x").delegable and "would run nothing" in _report("x").summary()
    assert not _report().delegable


def test_rules_are_consistent_data() -> None:
    for name, rule in nnapi.RULES.items():
        assert rule.api in nnapi.API_LEVELS, name
        assert all(level >= rule.api and level in nnapi.API_LEVELS for _, level in rule.types)
        assert name.isupper()
    assert nnapi.RULES["CONV_2D"].level_for("INT8") == 29
    assert nnapi.RULES["CONV_2D"].level_for("UINT8") == 27
    assert nnapi.RULES["MAX_POOL_2D"].level_for("INT8") == 27  # via the delegate's uint8 path
    assert nnapi.RULES["SQUEEZE"].level_for("INT8") == 30  # no uint8 path: signed type needed
    assert nnapi.RULES["DIV"].level_for("INT8") is None
    assert "GELU" not in nnapi.RULES


def _op(name: str, dtype: str = "INT8", *, version: int = 1, channels: int = 1,
        zero_point: int = -128, out: str | None = None) -> Any:
    data = nnapi._Tensor(dtype=dtype, rank=4, constant=False, channels=1,
                         zero_point=zero_point)
    weights = nnapi._Tensor(dtype="INT8", rank=2, constant=True, channels=channels, zero_point=0)
    output = nnapi._Tensor(dtype=out or dtype, rank=4, constant=False, channels=1, zero_point=0)
    return nnapi._Op(name=name, version=version, inputs=(data, weights), outputs=(output,))


def test_verdicts_name_the_level_or_the_limit() -> None:
    verdict = nnapi._verdict
    assert verdict(_op("RESIZE_NEAREST_NEIGHBOR"), 28) == "needs API 29+"
    assert verdict(_op("CONV_2D", channels=16), 28) == "int8 (signed) data needs API 29+"
    assert verdict(_op("CONV_2D", "UINT8", channels=16), 28) == \
        "per-channel quantized weights need API 29+"
    assert verdict(_op("CONV_2D", channels=16), 29) is None
    assert verdict(_op("FULLY_CONNECTED", channels=64), 34) == \
        "per-channel quantized weights (NNAPI takes them only in convolutions)"
    assert verdict(_op("FULLY_CONNECTED", "FLOAT32", version=12), 34) == \
        "op version 12, the delegate takes up to 5"
    assert verdict(_op("QUANTIZE", "FLOAT32", out="INT8"), 29) == "int8 output needs API 30+"
    assert verdict(_op("QUANTIZE", "FLOAT32", out="INT8"), 30) is None
    assert verdict(_op("DEQUANTIZE", zero_point=11, out="FLOAT32"), 29) == \
        "asymmetric int8 input needs API 30+"
    assert verdict(_op("DEQUANTIZE", zero_point=0, out="FLOAT32"), 29) is None
    assert verdict(_op("EXP"), 34) == "int8 (signed) data not supported"
    assert verdict(_op("GELU"), 35) == "not supported by the NNAPI delegate at any API level"


def test_api_level_outside_nnapi_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="27..35"):
        NNAPITarget(api_level=26)
    with pytest.raises(ValueError, match="27..35"):
        nnapi_report(tmp_path / "any.tflite", 36)


def test_unreadable_tflite_is_a_conversion_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.tflite"
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(ConversionError, match="cannot read"):
        nnapi_report(garbage)


def test_unknown_precision_is_a_conversion_error(tmp_path: Path) -> None:
    model = ModelInfo(path="/nonexistent.onnx", sha256="a" * 64, size_bytes=0, opset=17,
                      inputs=(), outputs=(), params=0, macs=0)
    with pytest.raises(ConversionError, match="no fp16 path; choose one of int8"):
        NNAPITarget().convert(model, "fp16", calib=Dataset(feeds=()), workdir=tmp_path)
