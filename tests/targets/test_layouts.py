"""Artifacts keep the original model's input layout, names and output order (issue 12, item 7):
a Keras NHWC model's TFLite files take [1, 64, 64, 1] like the original (onnx2tf took the NHWC
input for NCHW and made it [1, 64, 1, 64]); the notes say what the artifact takes; the device
agent runs the artifact on inputs of its own shape; OpenVINO IRs keep layout, names and order."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.intake import to_reference
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets.openvino import OpenVINOTarget, load_with_hint
from targets.tflite import TFLiteTarget, onnx2tf_run

TFLITE, OPENVINO = TFLiteTarget(), OpenVINOTarget()
needs_tflite = pytest.mark.skipif(TFLITE.missing() is not None, reason=str(TFLITE.missing()))
needs_openvino = pytest.mark.skipif(OPENVINO.missing() is not None,
                                    reason=str(OPENVINO.missing()))

_BUILD = """
import sys, keras
keras.utils.set_random_seed(0)
image = keras.Input((64, 64, 1), name="image")
x = keras.layers.Conv2D(4, 3, strides=2, activation="relu")(image)
x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
keras.Model(image, keras.layers.Dense(3, name="scores")(x)).save(sys.argv[1])
"""


def _keras(path: Path) -> Path:
    """A tiny channels-last Keras classifier (input (64, 64, 1)), saved in a child process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-c", _BUILD, str(path)], check=True, env=env,
                   capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module", params=["keras", "h5"])
def keras_model(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    folder = tmp_path_factory.mktemp(f"keras-{request.param}")
    source = _keras(folder / f"tiny.{request.param}")
    return inspect_model(to_reference(source, folder / "reference"))


def _images(count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset(feeds=tuple({"image": rng.random((1, 64, 64, 1), dtype=np.float32)}
                               for _ in range(count)))


@pytest.fixture(scope="module")
def tflite_files(keras_model: ModelInfo,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("tflite")
    return {p: TFLITE.convert(keras_model, p, calib=_images(16, 0), workdir=workdir)
            for p in ("fp32", "int8", "fp16", "int8-dynamic")}


def _reference(model: ModelInfo, data: Dataset) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    return [session.run(None, feed)[0] for feed in data.feeds]


@pytest.mark.slow
@needs_tflite
def test_keras_nhwc_input_keeps_its_layout(keras_model: ModelInfo,
                                           tflite_files: dict[str, Any]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    assert keras_model.inputs[0].shape[1:] == (64, 64, 1)  # the reference keeps Keras' NHWC
    for precision, (path, notes) in tflite_files.items():
        details = Interpreter(model_path=str(path)).get_input_details()
        assert [list(d["shape"]) for d in details] == [[1, 64, 64, 1]], precision
        text = " ".join(notes)
        assert "input layout kept as in the model" in text and "image" in text, notes
        assert "channels-first inputs channels-last" not in text
        assert not any(n.startswith("input 'image'") and "transposes" in n for n in notes)


@pytest.mark.slow
@needs_tflite
def test_keras_artifacts_match_the_reference(keras_model: ModelInfo,
                                             tflite_files: dict[str, Any]) -> None:
    data = _images(8, 1)
    want = _reference(keras_model, data)
    for precision, tolerance in (("fp32", 1e-4), ("fp16", 1e-2), ("int8", 0.1)):
        runner = TFLITE.load(tflite_files[precision][0], keras_model, threads=1)
        got = [runner.run(feed)[0] for feed in data.feeds]
        scale = float(np.abs(np.concatenate(want)).max())
        error = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
        assert error <= tolerance * max(scale, 1.0), (precision, error, scale)


@pytest.mark.slow
@needs_tflite
def test_device_agent_runs_the_artifact_as_shaped(keras_model: ModelInfo,
                                                  tflite_files: dict[str, Any]) -> None:
    """The agent feeds every input by the artifact's own shape: [1, 64, 64, 1] here."""
    from targets.tflite.agent import load as load_tflite

    for precision in ("fp32", "int8"):
        run, version = load_tflite(str(tflite_files[precision][0]), 1)
        run()
        fed = run.run.__self__  # the agent's interpreter (a Loaded's run is its invoke)
        assert [list(d["shape"]) for d in fed.get_input_details()] == [[1, 64, 64, 1]]
        assert fed.get_tensor(fed.get_input_details()[0]["index"]).shape == (1, 64, 64, 1)
        assert version


def _nhwc_onnx(path: Path) -> ModelInfo:
    """An NHWC ONNX model not made by tf2onnx: input [1, 16, 16, 3] -> Transpose -> Conv."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(0, .3, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Transpose", ["pixels"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["features"])]
    graph = helper.make_graph(
        nodes, "nhwc", [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 16, 16, 3])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 4, 16, 16])], [weight])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.producer_name, proto.ir_version = "test", 8
    onnx.save(proto, str(path))
    return inspect_model(path)


@pytest.mark.slow
@needs_tflite
def test_nhwc_onnx_input_is_kept_and_nchw_output_adapter_is_stated(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    model = _nhwc_onnx(tmp_path / "nhwc.onnx")
    rng = np.random.default_rng(0)
    calib = Dataset(feeds=tuple({"pixels": rng.random((1, 16, 16, 3), dtype=np.float32)}
                                for _ in range(8)))
    path, notes = TFLITE.convert(model, "fp32", calib=calib, workdir=tmp_path / "work")
    interp = Interpreter(model_path=str(path))
    assert [list(d["shape"]) for d in interp.get_input_details()] == [[1, 16, 16, 3]]
    assert [list(d["shape"]) for d in interp.get_output_details()] == [[1, 16, 16, 4]]
    adapter = [n for n in notes if n.startswith("output 'features'")]
    assert adapter and "[1, 16, 16, 4]" in adapter[0] and "transposes" in adapter[0], notes
    got = TFLITE.load(path, model, threads=1).run(calib.feeds[0])[0]
    np.testing.assert_allclose(got, _reference(model, calib)[0], atol=1e-4)


@needs_tflite
def test_a_long_conversion_says_so_when_stderr_is_not_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx2tf runs for minutes: under the CLI its start and heartbeat lines reach a
    non-terminal stderr (a CI log)."""
    from edge.cli import output

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(onnx2tf_run, "HEARTBEAT_S", 0.5)
    model = _nhwc_onnx(tmp_path / "nhwc.onnx")
    calib = Dataset(feeds=({"pixels": np.zeros((1, 16, 16, 3), np.float32)},))
    with output.session(as_json=False):
        TFLITE.convert(model, "fp32", calib=calib, workdir=tmp_path / "work")
    lines = stderr.getvalue().splitlines()
    assert any(ln.startswith("edge: onnx2tf: converting nhwc.onnx") for ln in lines), lines
    assert any(ln.startswith("edge: onnx2tf: still converting nhwc.onnx after") for ln in lines)
    assert all(ln.startswith("edge: onnx2tf") for ln in lines), lines


# ---------------------------------------------------------------- OpenVINO (item 4)


@pytest.mark.slow
@needs_openvino
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_openvino_ir_keeps_nhwc_layout_and_names(keras_model: ModelInfo, precision: str,
                                                 tmp_path: Path) -> None:
    import openvino as ov

    path, _ = OPENVINO.convert(keras_model, precision, calib=_images(16, 0), workdir=tmp_path)
    ir = ov.Core().read_model(str(path))
    assert [p.get_any_name() for p in ir.inputs] == ["image"]
    assert [str(d) for d in ir.inputs[0].get_partial_shape()][1:] == ["64", "64", "1"]
    assert [p.get_any_name() for p in ir.outputs] == [s.name for s in keras_model.outputs]
    data = _images(4, 1)
    # the IR computing f32 (a plain load computes bf16 on an AVX512-BF16/AMX CPU)
    runner = load_with_hint(path, keras_model, threads=1, hint="f32") if precision == "fp32" \
        else OPENVINO.load(path, keras_model, threads=1)
    for got, want in zip((runner.run(f)[0] for f in data.feeds), _reference(keras_model, data),
                         strict=True):
        assert got.shape == want.shape
        assert float(np.abs(got - want).max()) < (1e-4 if precision == "fp32" else 0.1)


@needs_openvino
def test_openvino_ir_keeps_output_names_and_order(tmp_path: Path) -> None:
    """Outputs listed in an order unlike the graph's: the IR lists them as the model does."""
    import onnx
    import openvino as ov
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["first"]), helper.make_node("Neg", ["x"], ["second"])]
    graph = helper.make_graph(
        nodes, "order", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("second", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("first", TensorProto.FLOAT, [1, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, str(tmp_path / "order.onnx"))
    model = inspect_model(tmp_path / "order.onnx")
    path, _ = OPENVINO.convert(model, "fp32", calib=Dataset(feeds=()), workdir=tmp_path / "w")
    assert [p.get_any_name() for p in ov.Core().read_model(str(path)).outputs] == ["second",
                                                                                   "first"]


@pytest.mark.slow
@needs_tflite
def test_optimize_of_a_keras_model_states_its_layout_and_is_not_silent(
        tmp_path: Path) -> None:
    """`edge optimize` with stderr piped: onnx2tf says it runs; the manifest's TFLite notes say
    the artifact takes the Keras layout."""
    import json

    from tests.support.cli import run_edge

    source = _keras(tmp_path / "tiny.keras")
    result = run_edge("optimize", str(source), "--profile", "rpi4", "--shape",
                      "image=1,64,64,1", "-o", str(tmp_path / "bundle"))
    assert result.status == 0, result.stderr
    assert "edge: onnx2tf: converting" in result.stderr, result.stderr
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    tflite = [c for c in manifest["candidates"]
              if c["candidate"]["target"] == "tflite" and c.get("artifact")]
    assert tflite
    for candidate in tflite:
        notes = candidate["artifact"]["notes"]
        assert "input layout kept as in the model (onnx2tf -kat): image" in notes, notes
        assert not any("channels-last" in n for n in notes), notes
