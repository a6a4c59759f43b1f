"""The RKNN runtime end to end with the real rknn-toolkit2 2.5.0 (its own environment, no mocks):
``edge optimize`` for the ROCK 5B verifies rknn-int8 and rknn-fp16 per output in the toolkit's
simulator; the profile's NPU options choose the SoC; the simulator child is kept for every run
of a runner and returns the reference model's outputs, in its order and NCHW layout; the
operators the compiler leaves to the CPU are reported, and predicted from the ONNX operators.

The environment is built once into the test data cache (as tests/targets/test_rknn.py). The
heavy models (the bench MobileNetV2 and three trained zoo models) are in
tests/targets/test_rknn_models.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.toolchain import BuiltToolchain, build
from edge.core.values import Dataset, ModelInfo
from targets import get_target, runtime_for_suffix
from targets.base import ConversionError, ConvertSettings
from targets.rknn.convert import TOOLCHAIN
from targets.rknn.simulator import SimulatorError, SimulatorRunner
from targets.rknn.target import RKNNTarget
from tests.support.cli import run_cli
from tests.support.mediapipe import cache_dir

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def environment() -> Iterator[BuiltToolchain]:
    """rknn-toolkit2's environment, in the test data cache kept between runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_TOOLCHAIN_DIR", str(cache_dir() / "toolchains"))
        yield build(TOOLCHAIN)


@pytest.fixture(scope="module")
def digits() -> tuple[ModelInfo, Dataset]:
    model = inspect_model(SAMPLES / "digits.onnx")
    calib = np.load(SAMPLES / "digits_calib.npy")[:8]
    name = model.inputs[0].name
    return model, Dataset(feeds=tuple({name: calib[i:i + 1]} for i in range(len(calib))))


def test_rknn_is_a_registered_runtime_for_the_npu() -> None:
    target = get_target("rknn")
    assert isinstance(target, RKNNTarget)
    assert target.caps.accelerator == "Rockchip NPU" and target.caps.host_runs == "simulated"
    runtime = runtime_for_suffix(".rknn")
    assert runtime is not None and runtime.name == "rknn"
    assert runtime.provision is not None
    assert runtime.provision.requirements == ("rknn-toolkit-lite2==2.5.0",)


def test_optimize_for_rock5b_verifies_rknn_int8_and_fp16_in_the_simulator(
        tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    result = run_cli("optimize", "sample:digits", "--profile", "rock5b", "-o", str(out),
                     "--json")
    assert result.status == 0, result.stderr[-800:]
    report = result.json()
    made = {c["candidate"]["precision"]: c for c in report["candidates"]
            if c["candidate"]["target"] == "rknn"}
    assert set(made) == {"int8", "fp16"}
    for precision, cand in made.items():
        assert cand["status"] in ("passed", "chosen"), cand["reason"]
        assert [o["name"] for o in cand["fidelity"]["outputs"]] == ["logits"]
        assert cand["fidelity"]["outputs"][0]["passed"]
        artifact = cand["artifact"]
        assert artifact["runtime"] == "rknn" and artifact["file"].endswith(".rknn")
        assert (out / artifact["file"]).read_bytes()[:4] == b"RKNN"
        assert "rknn-toolkit2 2.5.0 for rk3588, in its own environment" in artifact["notes"]
        # the last Gemm becomes an NPU convolution whose output is reshaped on the CPU
        assert artifact["fallbacks"] == ["Reshape"], precision
        assert not (cand.get("bench") or {}).get("p50_ms")  # no host time stands for the NPU's


def test_the_profiles_npu_options_choose_the_soc(digits: tuple[ModelInfo, Dataset],
                                                 tmp_path: Path) -> None:
    model, calib = digits
    target = RKNNTarget()
    settings = ConvertSettings(accelerator=(("platform", "rk3566"),))
    file, notes = target.convert(model, "fp16", calib=calib, workdir=tmp_path / "rk3566",
                                 settings=settings)
    assert file.name == "model_rk3566_fp16.rknn"
    assert notes[0] == "rknn-toolkit2 2.5.0 for rk3566, in its own environment"
    assert b"rk3566" in file.read_bytes()
    with pytest.raises(ConversionError, match="does not build for platform 'rk9999'"):
        target.convert(model, "fp16", calib=calib, workdir=tmp_path / "bad",
                       settings=ConvertSettings(accelerator=(("platform", "rk9999"),)))


def _two_outputs(path: Path) -> Path:
    """x [1,3,6,5] -> vec [1,4] (pool, flatten), feat [1,4,6,5] (conv, relu), erf [1,2,6,5]
    (conv, then Erf: a CPU operator): three outputs, a 4-D one NCHW, declared out of the order
    the compiler makes them in."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w", (4, 3, 3, 3)), ("w2", (2, 3, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["feat"]),
             helper.make_node("Conv", ["x", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["feat"], ["g"]),
             helper.make_node("Flatten", ["g"], ["vec"]),
             helper.make_node("Erf", ["c2"], ["erf"])]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "three", [value("x", TensorProto.FLOAT, [1, 3, 6, 5])],
        [value("vec", TensorProto.FLOAT, [1, 4]), value("feat", TensorProto.FLOAT, [1, 4, 6, 5]),
         value("erf", TensorProto.FLOAT, [1, 2, 6, 5])], weights)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    onnx.save(proto, path)
    return path


def test_one_simulator_child_serves_every_run_in_the_reference_order_and_layout(
        tmp_path: Path) -> None:
    model = inspect_model(_two_outputs(tmp_path / "three.onnx"))
    rng = np.random.default_rng(1)
    samples = [rng.standard_normal((1, 3, 6, 5)).astype(np.float32) for _ in range(6)]
    target = RKNNTarget()
    assert target.predict_fallbacks(model) == ("Erf",)
    file, notes = target.convert(model, "fp16", calib=Dataset(feeds=()), workdir=tmp_path / "w")
    assert "cpu fallback: Erf, Reshape" in notes
    session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    runner = target.load(file, model, threads=1)
    child = runner._child.pid
    try:
        for x in samples:
            got, want = runner.run({"x": x}), session.run(None, {"x": x})
            assert [g.shape for g in got] == [(1, 4), (1, 4, 6, 5), (1, 2, 6, 5)]
            for g, w in zip(got, want, strict=True):
                assert g.dtype == np.float32
                assert np.abs(g - w).max() < 0.02 * (np.abs(w).max() + 1)  # fp16 on the NPU
        assert runner._child.pid == child and runner._child.poll() is None  # one child
    finally:
        runner.close()
    assert runner._child.poll() is not None
    with pytest.raises(SimulatorError):
        runner.run({"x": samples[0]})


def test_an_artifact_without_its_request_is_refused_in_one_line(
        digits: tuple[ModelInfo, Dataset], tmp_path: Path) -> None:
    model, _ = digits
    stray = tmp_path / "model.rknn"
    stray.write_bytes(b"RKNN")
    with pytest.raises(SimulatorError, match="model.request.json is not beside it"):
        SimulatorRunner(stray, model)


def test_a_child_that_cannot_build_says_why_and_is_gone(
        digits: tuple[ModelInfo, Dataset], tmp_path: Path) -> None:
    model, _ = digits
    artifact = tmp_path / "model_rk3588_fp16.rknn"
    artifact.write_bytes(b"RKNN")
    bad = {"model": str(tmp_path / "absent.onnx"), "platform": "rk3588", "precision": "fp16",
           "inputs": None, "shapes": None, "algorithm": "normal", "out": "", "dataset": None}
    artifact.with_suffix(".request.json").write_text(json.dumps(bad))
    # the simulator rebuilds from the model where this run has it: here, nowhere
    absent = dataclasses.replace(model, path=str(tmp_path / "absent.onnx"))
    with pytest.raises(SimulatorError, match="did not start|exited"):
        SimulatorRunner(artifact, absent)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial")]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".request-")]  # removed
