"""Issue 29: messages of the TFLite target a user can act on -- a failure of this very run is
not "remembered", and the dynamic-range candidate of a model with integer inputs says why it
is missing and what to use instead."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.base import ConversionError
from targets.tflite import TFLiteTarget
from targets.tflite import target as tflite

needs_tflite = pytest.mark.skipif(TFLiteTarget().missing() is not None,
                                  reason=str(TFLiteTarget().missing()))


class _Impatient(TFLiteTarget):
    timeout_s = 1.0  # onnx2tf cannot start in a second: a real failed conversion, fast


def _conv_model(path: Path) -> Path:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3],
                                np.random.default_rng(0).standard_normal(108).tolist())
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@needs_tflite
def test_a_failure_of_this_run_is_not_called_remembered(tmp_path: Path) -> None:
    model = inspect_model(_conv_model(tmp_path / "conv.onnx"))
    calib = Dataset(feeds=({"x": np.zeros((1, 3, 8, 8), np.float32)},))
    workdir = tmp_path / "cache"
    with pytest.raises(ConversionError, match="timed out") as first:
        _Impatient().convert(model, "fp32", calib=calib, workdir=workdir)
    for precision in ("fp16", "int8-dynamic"):  # the same command's other candidates
        with pytest.raises(ConversionError) as same:
            _Impatient().convert(model, precision, calib=calib, workdir=workdir)
        message = str(same.value)
        assert message.startswith(str(first.value)) and "remembered" not in message, message
        assert "failed in this command" in message
    record = workdir / tflite.FAILED  # as a later edge command (another process) finds it
    failed = json.loads(record.read_text())
    record.write_text(json.dumps({**failed, "run": "an earlier process"}))
    with pytest.raises(ConversionError, match=r"\[remembered from the run of .* delete "):
        _Impatient().convert(model, "fp32", calib=calib, workdir=workdir)
