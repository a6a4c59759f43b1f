"""TensorRT target: the ONNX a device's TensorRT builds from, made and verified on this host
(fp16 as a float16 ONNX, int8 as explicit symmetric Q/DQ), its companion of build
settings and reference outputs, and the device loader's refusals where TensorRT or a GPU is
missing. The engine build itself needs a GPU: tests/targets/test_tensorrt_device.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from devices.agent.errors import AgentError
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.tensorrt import (
    FLOORS,
    TensorRTTarget,
    TrtHostRunner,
    build_settings,
    companion_of,
    read_settings,
)
from targets.tensorrt import agent as trt_agent
from tests.support.cli import run_cli
from tests.support.digits import DigitsModel

TARGET = TensorRTTarget()


@pytest.fixture(scope="module")
def model(digits: DigitsModel) -> ModelInfo:
    return inspect_model(digits.onnx)


@pytest.fixture(scope="module")
def converted(model: ModelInfo, digits: DigitsModel,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("trt-cache")
    calib = load_dataset(digits.calib, model)
    settings = ConvertSettings(accelerator=(("workspace_mb", "256"),))
    out = {p: TARGET.convert(model, p, calib=calib, workdir=workdir, settings=settings)
           for p in ("fp16", "int8")}
    return {"workdir": workdir, "calib": calib, **out}


def _companion(path: Path) -> dict[str, Any]:
    with np.load(companion_of(path), allow_pickle=False) as data:
        return {"settings": json.loads(str(data["settings"])),
                **{k: data[k] for k in data.files if k != "settings"}}


# ---------------------------------------------------------------- the artifacts and companion


def test_fp16_is_a_float16_onnx_with_float32_io(converted: dict[str, Any]) -> None:
    """TensorRT 11 builds strongly typed networks only: the types are in the file."""
    path, notes = converted["fp16"]
    assert path.name == "model_fp16.trt.onnx"
    graph = onnx.load(str(path)).graph
    kinds = {i.data_type for i in graph.initializer}
    assert onnx.TensorProto.FLOAT16 in kinds and onnx.TensorProto.FLOAT not in kinds
    io = [t.type.tensor_type.elem_type for t in (*graph.input, *graph.output)]
    assert set(io) == {onnx.TensorProto.FLOAT}
    settings = _companion(path)["settings"]
    assert settings["build"] == {"flags": ["FP16"], "clear_flags": ["TF32"], "workspace_mb": 256}
    assert "float16 weights and compute" in notes[0] and "TensorRT 11" in notes[0]


def test_int8_is_explicit_symmetric_qdq_per_channel(converted: dict[str, Any]) -> None:
    path, notes = converted["int8"]
    graph = onnx.load(str(path)).graph
    kinds = {n.op_type for n in graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= kinds
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    points = [inits[n.input[2]] for n in graph.node
              if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2]
    assert points and all(p.dtype == np.int8 and not p.any() for p in points)  # zero points 0
    scales = [inits[n.input[1]] for n in graph.node if n.op_type == "DequantizeLinear"]
    assert any(s.size > 1 for s in scales)  # per-channel weights
    weights = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] in inits]
    assert weights and all(inits[n.input[0]].dtype == np.float32 for n in weights)  # Q/DQ pairs
    assert _companion(path)["settings"]["build"]["flags"] == ["INT8"]
    assert "symmetric int8 activations" in notes[0] and "100 samples" in notes[0]


def test_companion_holds_samples_reference_outputs_and_thresholds(
        converted: dict[str, Any], model: ModelInfo) -> None:
    path, _ = converted["int8"]
    data = _companion(path)
    settings = data["settings"]
    assert settings["inputs"] == [i.name for i in model.inputs]
    assert settings["outputs"] == [o.name for o in model.outputs]
    assert data["input_0"].shape[0] == data["output_0"].shape[0] == 8
    first = converted["calib"].feeds[0][settings["inputs"][0]]
    assert np.array_equal(data["input_0"][0], first)
    for host, threshold in zip(settings["host_agreement"], settings["thresholds"], strict=True):
        assert 0.9 < host <= 1.0 and threshold == 1 - max(1 - FLOORS["int8"], 2 * (1 - host))
    assert read_settings(path)["precision"] == "int8"


def test_host_runs_the_fp16_file_itself(converted: dict[str, Any], model: ModelInfo) -> None:
    path, _ = converted["fp16"]
    feed = converted["calib"].feeds[0]
    half = TARGET.load(path, model, threads=1).run(feed)[0]
    exact = TrtHostRunner(Path(model.path), threads=1).run(feed)[0]
    assert not np.array_equal(half, exact)  # computed in float16
    assert trt_agent.agreement(np, half, exact) > 0.999


def test_a_bad_workspace_option_is_one_line() -> None:
    with pytest.raises(ConversionError, match="workspace_mb .* got 'lots'"):
        build_settings("fp16", {"workspace_mb": "lots"})
    assert build_settings("fp32", {})["workspace_mb"] == 1024


def test_no_fallbacks_are_predicted_and_no_estimate_offered(model: ModelInfo) -> None:
    assert TARGET.predict_fallbacks(model) == ()
    assert TARGET.estimate(Path(model.path), model) is None


def test_agreement_rules() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    assert trt_agent.agreement(np, a, a) == pytest.approx(1.0)
    assert trt_agent.agreement(np, np.zeros(3), np.zeros(3)) == 1.0
    assert trt_agent.agreement(np, a, a[:2]) == 0.0
    assert trt_agent.agreement(np, np.array([np.nan, 1, 1]), a) == 0.0
    assert trt_agent.agreement(np, np.array([1, 2, 4]), np.array([1, 2, 3])) == pytest.approx(2 / 3)


# ---------------------------------------------------------------- edge optimize, end to end


@pytest.mark.slow
def test_optimize_for_a_jetson_gives_verified_fp16_and_int8(tmp_path: Path) -> None:
    # --exhaustive: fp16 is converted too, though int8 ranks before it in the profile's order
    result = run_cli("optimize", "sample:digits", "--profile", "jetson-orin-nano", "--json",
                     "-o", str(tmp_path / "b"), "--exhaustive")
    assert result.status == 0, result.stderr
    found = {c["candidate"]["precision"]: c for c in result.json()["candidates"]
             if c["candidate"]["target"] == "tensorrt"}
    for precision in ("fp16", "int8"):
        cand = found[precision]
        assert cand["status"] in ("passed", "chosen"), cand["reason"]
        assert [o["passed"] for o in cand["fidelity"]["outputs"]] == [True]
        artifact = cand["artifact"]
        assert artifact["file"].endswith(".trt.onnx") and artifact["runtime"] == "tensorrt"
        (companion,) = artifact["companions"]
        assert (tmp_path / "b" / companion["file"]).is_file()
        assert read_settings(tmp_path / "b" / artifact["file"])["precision"] == precision


# ---------------------------------------------------------------- the device loader refuses


def test_the_loader_names_missing_tensorrt(converted: dict[str, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as on a device without it
    with pytest.raises(AgentError, match="TensorRT's Python bindings are not installed") as err:
        trt_agent.load(str(converted["fp16"][0]), 1)
    assert err.value.status == 3 and "JetPack" in str(err.value)


def test_the_loader_names_a_missing_gpu(converted: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT present (a stand-in module) but no GPU: the CUDA runtime or the GPU is named."""
    monkeypatch.setitem(sys.modules, "tensorrt", SimpleNamespace(__version__="10.3.0"))
    with pytest.raises(AgentError, match="libcudart|no NVIDIA GPU") as err:
        trt_agent.load(str(converted["int8"][0]), 1)
    assert err.value.status == 3


def test_an_old_tensorrt_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", SimpleNamespace(__version__="8.2.1.8"))
    with pytest.raises(AgentError, match="8.2.1.8 is too old.*8.5"):
        trt_agent.tensorrt_module()


def test_the_companion_is_found_under_each_naming(tmp_path: Path) -> None:
    for artifact, companion in (("model.trt.onnx", "model.npz"),
                                ("model_fp16.trt.onnx", "model_fp16.trt.npz"),  # a plain name
                                ("abc.trt.onnx", "abc.npz")):
        (tmp_path / companion).write_bytes(b"")
        assert trt_agent.companion_path(str(tmp_path / artifact)) == str(tmp_path / companion)
    with pytest.raises(AgentError, match="reference outputs of .* missing") as err:
        trt_agent.companion_path(str(tmp_path / "other.trt.onnx"))
    assert err.value.status == 2


def test_engines_are_keyed_by_tensorrt_version_and_gpu(tmp_path: Path) -> None:
    model = tmp_path / "model.trt.onnx"
    model.write_bytes(b"onnx")
    settings = {"build": {"flags": ["FP16"]}}
    one = trt_agent.engine_path(str(model), "10.3.0", "Orin", settings)
    assert one.startswith(str(tmp_path / "model.")) and one.endswith(".engine")
    assert one == trt_agent.engine_path(str(model), "10.3.0", "Orin", settings)
    assert one != trt_agent.engine_path(str(model), "10.4.0", "Orin", settings)
    assert one != trt_agent.engine_path(str(model), "10.3.0", "Tesla T4", settings)
    assert one != trt_agent.engine_path(str(model), "10.3.0", "Orin", {"build": {"flags": []}})
