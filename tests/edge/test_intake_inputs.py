"""Models whose inputs are not one float image: 0-d scalars, int64/int32/bool/uint8, recurrent
state, several inputs. Data files, synthetic data, the targets' runners, the device agent's
random inputs and ``edge optimize`` end to end on a streaming audio model (tests/support/audio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices.agent import runtimes
from edge.core.data import load_dataset, synthetic_dataset
from edge.core.errors import UsageError
from edge.core.model import inspect_model
from edge.core.values import ModelInfo, TensorSpec
from targets.onnxruntime import agent as ort_agent
from tests.support import audio
from tests.support.cli import run_cli


def _model(*inputs: TensorSpec) -> ModelInfo:
    return ModelInfo(path="m.onnx", sha256="0", size_bytes=1, opset=17, inputs=inputs,
                     outputs=(TensorSpec(name="y", shape=(1, 1), dtype="float32"),),
                     params=0, macs=0)


SR = TensorSpec(name="sr", shape=(), dtype="int64")
AUDIO = TensorSpec(name="audio", shape=(1, 4), dtype="float32")


@pytest.fixture(scope="module")
def vad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The streaming audio model and 64 streamed chunks (audio, carried state, sr [N])."""
    root = tmp_path_factory.mktemp("vad")
    model = audio.build(root / "vad.onnx")
    return model, audio.data(model, root / "vad.npz")


def test_a_0d_int64_input_takes_one_value_per_sample_as_a_0d_array(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", audio=np.zeros((3, 1, 4)), sr=np.full(3, 16000, np.int64))
    feeds = load_dataset(tmp_path / "d.npz", _model(AUDIO, SR)).feeds
    value = feeds[1]["sr"]
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.int64
    assert int(value) == 16000


def test_a_0d_input_also_takes_n_by_1_data(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", audio=np.zeros((3, 1, 4)), sr=np.full((3, 1), 8000))
    value = load_dataset(tmp_path / "d.npz", _model(AUDIO, SR)).feeds[2]["sr"]
    assert isinstance(value, np.ndarray) and value.shape == () and int(value) == 8000


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "int64"])
def test_integer_and_bool_inputs_get_their_dtype(tmp_path: Path, dtype: str) -> None:
    spec = TensorSpec(name="m", shape=(1, 5), dtype=dtype)
    np.savez(tmp_path / "d.npz", m=np.ones((4, 5), np.float64))
    value = load_dataset(tmp_path / "d.npz", _model(spec)).feeds[0]["m"]
    assert value.dtype == np.dtype(dtype) and value.shape == (1, 5)


@pytest.mark.parametrize("dtype, data, says", [
    ("int64", np.full((4, 5), 0.5), "non-integer float64 values"),
    ("bool", np.full((4, 5), 2.0), "non-0/1 float64 values"),
])
def test_fractional_data_for_an_integer_input_is_refused(tmp_path: Path, dtype: str,
                                                         data: np.ndarray, says: str) -> None:
    np.savez(tmp_path / "d.npz", m=data)
    with pytest.raises(UsageError, match=f"input 'm' is {dtype} but its data holds {says}"):
        load_dataset(tmp_path / "d.npz", _model(TensorSpec(name="m", shape=(1, 5), dtype=dtype)))


def test_synthetic_data_gives_arrays_for_0d_bool_and_dynamic_inputs() -> None:
    flag = TensorSpec(name="flag", shape=(), dtype="bool")
    ids = TensorSpec(name="ids", shape=("batch", "seq"), dtype="int64")
    with pytest.warns(UserWarning):
        feed = synthetic_dataset(_model(SR, flag, ids), count=8).feeds[3]
    assert all(isinstance(v, np.ndarray) for v in feed.values())
    assert feed["sr"].shape == () and feed["flag"].dtype == np.bool_
    assert feed["ids"].shape == (1, 1) and set(np.unique(feed["ids"])) <= {0, 1}


@pytest.mark.parametrize("ort_type, dtype", [
    ("tensor(int64)", np.int64), ("tensor(bool)", np.bool_), ("tensor(uint8)", np.uint8),
    ("tensor(int32)", np.int32), ("tensor(double)", np.float64)])
def test_the_agents_random_inputs_are_arrays_of_every_dtype(ort_type: str, dtype: type) -> None:
    value = runtimes.random_input(np, [], ort_agent.ort_dtype(np, ort_type))
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype
    ids = runtimes.random_input(np, ["batch", 16], np.int64)
    assert ids.shape == (1, 16) and ids.min() >= 0  # valid embedding ids


def test_the_agent_runs_the_audio_model_with_its_scalar_and_state(
        vad: tuple[Path, Path]) -> None:
    run, _ = ort_agent.load(str(vad[0]), 1)
    prob, state = run()
    assert prob.shape == (1, 1) and state.shape == (2, 1, audio.HIDDEN)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_the_runners_take_the_0d_int64_input(vad: tuple[Path, Path], target: str,
                                             tmp_path: Path) -> None:
    from targets import get_target

    model = inspect_model(vad[0])
    data = load_dataset(vad[1], model)
    want = get_target("onnxruntime").load(vad[0], model, threads=1).run(data.feeds[5])
    made = get_target(target)
    file, _ = made.convert(model, "fp32", calib=data, workdir=tmp_path)
    got = _computing_fp32(made, file, model).run(data.feeds[5])
    assert np.allclose(got[0], want[0], atol=1e-4) and np.allclose(got[1], want[1], atol=1e-4)


def _computing_fp32(made: Any, file: Path, model: Any) -> Any:
    """The fp32 artifact loaded to compute in fp32 (a plain OpenVINO load computes bf16 on an
    AVX512-BF16/AMX CPU; optimize verifies that load there)."""
    if made.name != "openvino":
        return made.load(file, model, threads=1)
    from targets.openvino import load_with_hint

    return load_with_hint(file, model, threads=1, hint="f32")


def test_optimize_runs_a_streaming_audio_model_with_a_0d_int64_input(
        vad: tuple[Path, Path], tmp_path: Path) -> None:
    result = run_cli("optimize", str(vad[0]), "--profile", "x86-64", "--calib", str(vad[1]),
                     "-o", str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    bundle = result.json()
    passed = [c for c in bundle["candidates"] if c["status"] in ("passed", "chosen")]
    assert bundle["chosen"] and len(passed) >= 2
    assert all(c["fidelity"]["samples"] >= 10 for c in passed)
    assert [s["shape"] for s in bundle["source"]["inputs"]] == [[1, 256], [2, 1, 32], []]
