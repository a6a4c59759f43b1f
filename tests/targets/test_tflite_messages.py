"""Issue 29: messages of the TFLite target a user can act on -- a failure of this very run is
not "remembered", and the dynamic-range candidate of a model with integer inputs says why it
is missing and what to use instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
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


def _embedding_model(path: Path) -> Path:
    """int32 token ids -> a 64x32 embedding table -> a 32x32 dense layer."""
    rng = np.random.default_rng(0)
    table = helper.make_tensor("table", TensorProto.FLOAT, [64, 32],
                               rng.standard_normal(64 * 32).tolist())
    dense = helper.make_tensor("w", TensorProto.FLOAT, [32, 32],
                               rng.standard_normal(32 * 32).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w"], ["y"])], "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32])], [table, dense])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


@pytest.mark.slow
@needs_tflite
def test_dynamic_int8_of_a_model_with_integer_inputs_is_made(tmp_path: Path) -> None:
    """Dynamic-range int8 needs no calibration: integer inputs do not keep it from being made;
    the full-integer int8 says why it is missing and what to use instead."""
    model = inspect_model(_embedding_model(tmp_path / "embed.onnx"))
    ids = np.random.default_rng(1).integers(0, 64, (4, 1, 4)).astype(np.int32)
    calib = Dataset(feeds=tuple({"ids": i} for i in ids))
    target, workdir = TFLiteTarget(), tmp_path / "cache"
    path, _ = target.convert(model, "int8-dynamic", calib=calib, workdir=workdir)
    runner = target.load(path, model, threads=1)
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    for sample in ids:
        got, want = runner.run({"ids": sample})[0], session.run(None, {"ids": sample})[0]
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    with pytest.raises(ConversionError) as caught:
        target.convert(model, "int8", calib=calib, workdir=workdir)
    message = str(caught.value)
    assert "input 'ids' is int32" in message and "use the int8-dynamic candidate" in message


@needs_tflite
@pytest.mark.slow
def test_litert_says_nothing_on_the_terminal_its_log_has_it(tmp_path: Path) -> None:
    """LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." (C++, straight to file
    descriptor 2, once per process) lands in <cache>/logs/litert.log, not on the terminal; a
    fresh process, as the message is printed once per process."""
    model_path = _conv_model(tmp_path / "conv.onnx")
    model = inspect_model(model_path)
    calib = Dataset(feeds=({"x": np.zeros((1, 3, 8, 8), np.float32)},))
    artifact, _ = TFLiteTarget().convert(model, "fp32", calib=calib, workdir=tmp_path / "work")
    script = ("import sys, numpy as np\n"
              "from edge.core.model import inspect_model\n"
              "from targets.tflite import TFLiteTarget\n"
              "model = inspect_model(sys.argv[1])\n"
              "runner = TFLiteTarget().load(sys.argv[2], model, threads=1)\n"
              "print(runner.run({'x': np.ones((1, 3, 8, 8), np.float32)})[0].shape)\n")
    env = dict(os.environ, EDGE_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", script, str(model_path), str(artifact)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "(1, 4, 8, 8)", done.stderr
    assert "XNNPACK" not in done.stderr, done.stderr
    assert "Created TensorFlow Lite XNNPACK delegate" in \
        (tmp_path / "cache" / "logs" / "litert.log").read_text()
