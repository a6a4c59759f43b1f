"""Ethos-U target (targets/ethosu): the TFLite target's full-int8 digits model compiled by the
real Vela 5.2.0 (its toolchain environment) for the profile's NPU, verified with LiteRT's
reference kernels, Vela's estimate read from its summary; CPU fallbacks named; the device
loader refuses without the Ethos-U driver or delegate. No mocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices.agent.errors import AgentError
from devices.agentfile import agent_file
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.ethosu import EthosUTarget, VelaConfig, source_of
from targets.ethosu import agent as ethosu_agent
from targets.ethosu.vela import DEFAULT, VelaError, compile_model
from targets.tflite import TFLiteTarget

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
# LiteRT's Delegate.__del__ raises AttributeError (collected in a later test) after a library
# that failed to load: the refusal tests make one on purpose
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
needs_tflite = pytest.mark.skipif(TFLiteTarget().missing() is not None,
                                  reason=str(TFLiteTarget().missing()))


def _settings(**options: str) -> ConvertSettings:
    """Settings carrying a profile accelerator's options."""
    return ConvertSettings(accelerator=tuple(sorted(options.items())))


# ---------------------------------------------------------------- configuration (fast)


def test_options_name_every_vela_setting_and_unknown_ones_are_refused() -> None:
    config = VelaConfig.from_options({"config": "ethos-u55-128", "memory_mode": "Shared_Sram",
                                      "system_config": "Ethos_U55_High_End_Embedded"})
    assert config.args(Path("/nowhere")) == [
        "--config", "Arm/vela.ini", "--accelerator-config", "ethos-u55-128",
        "--system-config", "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram"]
    assert VelaConfig.from_options({}) == DEFAULT  # the i.MX 93's NPU, never Vela's defaults
    with pytest.raises(VelaError, match="no accelerator config 'ethos-u99'.*ethos-u65-256"):
        VelaConfig.from_options({"config": "ethos-u99"})
    with pytest.raises(VelaError, match="no memory_mode 'Dram_Only'"):
        VelaConfig.from_options({"memory_mode": "Dram_Only"})


def test_the_generated_system_config_is_written_for_vela(tmp_path: Path) -> None:
    args = DEFAULT.args(tmp_path)
    ini = tmp_path / "edge_vela.ini"
    assert args[:4] == ["--config", "Arm/vela.ini", "--config", str(ini)]
    text = ini.read_text()
    assert text.startswith("[System_Config.NXP_iMX93]\n")
    assert "core_clock=1e9" in text and "Dram_clock_scale=0.46875" in text


def test_predicted_fallbacks_are_the_onnx_ops_vela_does_not_place() -> None:
    model = ModelInfo(path="m.onnx", sha256="0", size_bytes=1, opset=17, inputs=(), outputs=(),
                      params=0, macs=0, ops={"Conv": 3, "Erf": 1, "Relu": 2, "TopK": 1})
    assert EthosUTarget().predict_fallbacks(model) == ("Erf", "TopK")
    assert EthosUTarget().predict_fallbacks(
        ModelInfo(path="m.onnx", sha256="0", size_bytes=1, opset=17, inputs=(), outputs=(),
                  params=0, macs=0)) is None


def test_an_unknown_profile_option_fails_the_conversion_in_one_line(tmp_path: Path) -> None:
    model = inspect_model(SAMPLES / "digits.onnx")
    calib = load_dataset(SAMPLES / "digits_calib.npy", model)
    with pytest.raises(ConversionError) as info:
        EthosUTarget().convert(model, "int8", calib=calib, workdir=tmp_path,
                               settings=_settings(config="ethos-u65-1024"))
    assert "ethos-u65-1024" in str(info.value) and "\n" not in str(info.value)


def test_int8_is_the_only_precision(tmp_path: Path) -> None:
    model = inspect_model(SAMPLES / "digits.onnx")
    calib = load_dataset(SAMPLES / "digits_calib.npy", model)
    with pytest.raises(ConversionError, match="no fp16 path"):
        EthosUTarget().convert(model, "fp16", calib=calib, workdir=tmp_path)


# ---------------------------------------------------------------- digits, real Vela (slow)


@pytest.fixture(scope="module")
def model() -> ModelInfo:
    return inspect_model(SAMPLES / "digits.onnx")


@pytest.fixture(scope="module")
def converted(model: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("ethosu-cache")
    calib = load_dataset(SAMPLES / "digits_calib.npy", model)
    path, notes = EthosUTarget().convert(model, "int8", calib=calib, workdir=workdir)
    return {"workdir": workdir, "calib": calib, "path": path, "notes": notes}


@pytest.mark.slow
@needs_tflite
def test_digits_compiles_whole_onto_the_npu(converted: dict[str, Any]) -> None:
    path = converted["path"]
    assert path.name == "model_ethos-u65-256_NXP_iMX93_Dedicated_Sram_384KB.vela.tflite"
    assert path.is_file() and source_of(path).is_file() and source_of(path).suffix == ".int8"
    assert b"ethos-u" in path.read_bytes()  # Vela's custom operator holds the command stream
    notes = "\n".join(converted["notes"])
    assert "Vela 5.2.0 estimate for ethos-u65-256, NXP_iMX93, Dedicated_Sram_384KB" in notes
    assert "vendor estimate, not a measurement" in notes and "0 on the CPU" in notes
    assert "cpu fallback" not in notes and "reference kernels" in notes


@pytest.mark.slow
@needs_tflite
def test_the_estimate_is_vela_s_summary(converted: dict[str, Any], model: ModelInfo) -> None:
    bench = EthosUTarget().estimate(converted["path"], model)
    assert bench is not None and bench.runtime == "ethos-u" and bench.runs == 0
    assert bench.where == "Vela 5.2.0 estimate for ethos-u65-256, NXP_iMX93, Dedicated_Sram_384KB"
    assert bench.source == "estimate" and bench.source_label == "vendor estimate"
    assert 0 < bench.p50_ms == bench.p90_ms == bench.p99_ms == bench.mean_ms < 1.0
    metrics = bench.metrics
    assert metrics["npu_ops"] > 0 and metrics["cpu_ops"] == 0 and metrics["cycles"] > 0
    assert metrics["sram_kib"] > 0
    assert metrics["inferences_per_second"] == pytest.approx(1000.0 / bench.p50_ms, rel=1e-3)
    saved = json.loads(converted["path"].with_suffix(".json").read_text())
    assert saved["cycles"] == metrics["cycles"] and saved["vela"] == "5.2.0"


@pytest.mark.slow
@needs_tflite
def test_reference_kernels_verify_the_int8_model(converted: dict[str, Any],
                                                  model: ModelInfo) -> None:
    runner = EthosUTarget().load(converted["path"], model, threads=4)
    optimized = TFLiteTarget().load(source_of(converted["path"]), model, threads=1)
    data = np.load(SAMPLES / "digits_eval.npz")
    name = model.inputs[0].name
    ref = [runner.run({name: x[None]})[0] for x in data["input"]]
    fast = [optimized.run({name: x[None]})[0] for x in data["input"]]
    accuracy = np.mean([int(np.argmax(r)) == y for r, y in zip(ref, data["labels"],
                                                                strict=True)])
    assert accuracy >= 0.95
    # the reference and optimized int8 kernels agree to within an int8 step or so
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(ref, fast, strict=True)) < 0.5


@pytest.mark.slow
@needs_tflite
def test_the_cached_artifact_is_reused(converted: dict[str, Any], model: ModelInfo) -> None:
    stamp = converted["path"].stat().st_mtime_ns
    path, notes = EthosUTarget().convert(model, "int8", calib=converted["calib"],
                                         workdir=converted["workdir"])
    assert path == converted["path"] and path.stat().st_mtime_ns == stamp
    assert notes == converted["notes"]


@pytest.mark.slow
@needs_tflite
def test_a_float_model_leaves_every_op_on_the_cpu(converted: dict[str, Any],
                                                  tmp_path: Path) -> None:
    """Vela places only int8 (and int16) ops: onnx2tf's float32 digits model stays on the CPU,
    and the report names each op type Vela left there."""
    source = converted["workdir"] / "model_float32.tflite"
    compiled, report = compile_model(source, tmp_path / "float", DEFAULT)
    assert compiled.is_file() and report.npu_ops == 0 and report.cpu_ops > 0
    assert report.cpu_fallbacks == ("CONV_2D", "MAX_POOL_2D", "TRANSPOSE", "RESHAPE",
                                    "FULLY_CONNECTED")


# ---------------------------------------------------------------- the device loader


@pytest.mark.slow
@needs_tflite
def test_the_agent_refuses_without_the_driver_node(converted: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("EDGE_ETHOSU_DEVICE", str(tmp_path / "ethosu0"))
    with pytest.raises(AgentError) as info:
        ethosu_agent.load(str(converted["path"]), 1)
    assert info.value.status == 3 and "Ethos-U driver is not loaded" in str(info.value)
    assert str(tmp_path / "ethosu0") in str(info.value)


@pytest.mark.slow
@needs_tflite
def test_the_agent_refuses_without_the_delegate(converted: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    node = tmp_path / "ethosu0"
    node.write_text("")
    monkeypatch.setenv("EDGE_ETHOSU_DEVICE", str(node))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    with pytest.raises(AgentError) as info:
        ethosu_agent.load(str(converted["path"]), 1)
    assert info.value.status == 3 and "libethosu_op_delegate.so is not installed" in \
        str(info.value)
    not_a_library = source_of(converted["path"])  # a file, but no shared object
    monkeypatch.setenv("EDGE_ETHOSU_DELEGATE", str(not_a_library))
    with pytest.raises(AgentError) as info:
        ethosu_agent.load(str(converted["path"]), 1)
    assert info.value.status == 3 and "did not load" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.slow
@needs_tflite
def test_the_zipped_agent_picks_the_ethos_u_loader_and_refuses(converted: dict[str, Any],
                                                               tmp_path: Path) -> None:
    """The agent file edge pushes to devices, run here: the compound suffix .vela.tflite
    routes the file to runtime_ethos-u.py (not the plain tflite loader), which refuses."""
    argv = [sys.executable, str(agent_file()), "bench", str(converted["path"]), "--runs", "1",
            "--rounds", "1"]
    env = dict(os.environ, EDGE_ETHOSU_DEVICE=str(tmp_path / "ethosu0"))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error.startswith("ethos-u: the Ethos-U driver is not loaded"), error
