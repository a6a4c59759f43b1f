"""OpenVINO on Intel's NPU and GPU: the CPU target's IR named for its device with a companion
JSON, verified here on the CPU plugin in the unit's precision, refused by the agent on this host
(OpenVINO sees only its CPU). Real OpenVINO and NNCF; only the CPU plugin's answers on CPUs other
than this host's (f16, f32 or bf16 for an f16 ask) come from a stand-in core, to check the choice
made on each (the real one is checked on whatever CPU runs the tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices.agent import runtimes
from devices.agent.errors import AgentError
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.plugins import full_suffix
from targets.base import ConversionError, ConvertSettings
from targets.openvino import RUNTIME, accel
from targets.openvino import agent as ov_agent
from targets.openvino.accel import OpenVINOGPUTarget, OpenVINONPUTarget, device_spec
from tests.support.cli import run_cli
from tests.support.digits import DigitsModel

NPU, GPU = OpenVINONPUTarget(), OpenVINOGPUTarget()
pytestmark = pytest.mark.skipif(NPU.missing() is not None, reason=str(NPU.missing()))


def _settings(**options: str) -> ConvertSettings:
    """Settings carrying the profile's accelerator options."""
    return ConvertSettings(accelerator=tuple(sorted(options.items())))


def _visible() -> list[str]:
    import openvino as ov

    return list(ov.Core().available_devices)


@pytest.fixture(scope="module")
def data(digits: DigitsModel) -> dict[str, Any]:
    model = inspect_model(digits.onnx)
    evaluation = np.load(digits.eval)
    return {"model": model, "calib": load_dataset(digits.calib, model),
            "x": evaluation["input"][:64], "y": evaluation["labels"][:64]}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openvino-shared")


def _convert(target: Any, data: dict[str, Any], precision: str, workdir: Path,
             **options: str) -> tuple[Path, tuple[str, ...]]:
    return target.convert(data["model"], precision, calib=data["calib"], workdir=workdir,
                          settings=_settings(**options))


def _accuracy(runner: Any, data: dict[str, Any]) -> float:
    x = data["x"]
    out = np.concatenate([runner.run({"input": x[i:i + 1]})[0] for i in range(len(x))])
    return float((out.argmax(1) == data["y"]).mean())


def test_the_runtime_declares_both_units() -> None:
    names = dict(RUNTIME.targets)
    assert names["openvino-npu"].endswith(":OpenVINONPUTarget")
    assert names["openvino-gpu"].endswith(":OpenVINOGPUTarget")
    assert {".npu.xml", ".gpu.xml"} <= set(RUNTIME.suffixes) == set(ov_agent.SUFFIXES)
    assert NPU.caps.precisions == ("int8", "fp16") and GPU.caps.precisions[0] == "fp16"
    assert NPU.caps.converts_with == GPU.caps.converts_with == "openvino"
    assert NPU.caps.companions == (".npu.bin", ".json") and GPU.caps.companions[0] == ".gpu.bin"
    assert set(RUNTIME.companions) == {".npu.bin", ".gpu.bin"}  # kept whole in a release
    assert (NPU.caps.host_runs, NPU.caps.accelerator) == ("cpu", "Intel NPU")
    assert (GPU.caps.host_runs, GPU.caps.accelerator) == ("cpu", "Intel GPU")


def test_a_priority_list_is_cut_to_the_devices_openvino_sees() -> None:
    assert ov_agent.runnable(["CPU", "GPU.0"], "AUTO:NPU,GPU.0,CPU") == "AUTO:GPU.0,CPU"
    assert ov_agent.runnable(["CPU", "NPU"], "NPU") == "NPU"
    with pytest.raises(AgentError, match="no NPU or GPU here") as refused:
        ov_agent.runnable(["CPU"], "AUTO:NPU,GPU")
    assert refused.value.status == 3 and "intel_vpu" in str(refused.value)


def test_device_options_come_from_the_profile() -> None:
    npu = OpenVINONPUTarget.unit
    assert device_spec(npu, "fp16", {})["device"] == "NPU"
    assert device_spec(npu, "int8", {"device": "AUTO:NPU,GPU,CPU"})["device"] == \
        "AUTO:NPU,GPU,CPU"
    gpu = device_spec(OpenVINOGPUTarget.unit, "fp32", {"device": "GPU.0"})
    assert gpu["config"]["INFERENCE_PRECISION_HINT"] == "f32"  # the GPU's default is f16
    for bad in ("VPU", "AUTO:TPU", "GPU"):
        with pytest.raises(ConversionError, match="device"):
            device_spec(npu, "fp16", {"device": bad})


@pytest.mark.slow
@pytest.mark.parametrize(("target", "precision"), [(NPU, "fp16"), (NPU, "int8"),
                                                   (GPU, "fp32")])
def test_the_ir_carries_its_device_and_verifies_on_the_cpu(
        target: Any, precision: str, data: dict[str, Any], workdir: Path) -> None:
    out, notes = _convert(target, data, precision, workdir)
    base = f"model_{precision}_{target.unit.device.lower()}"
    assert out.name == base + target.unit.suffix
    weights = base + target.unit.suffix.replace(".xml", ".bin")  # model_fp16_npu.npu.bin
    assert (workdir / weights).stat().st_size > 0  # companions: the name's base + suffix
    assert target.caps.companions == (target.unit.suffix.replace(".xml", ".bin"), ".json")
    import openvino as ov

    assert ov.Core().read_model(str(out)).outputs  # a plain load finds its weights
    spec = json.loads((workdir / f"{base}.json").read_text())["edge_accelerator"]
    assert spec["device"] == target.unit.device
    assert spec["computes"] == ("f32" if precision == "fp32" else "f16")
    assert (workdir / f"model_{precision}.xml").is_file()  # the CPU target's IR, shared
    assert any(target.unit.words in n for n in notes)
    runner = target.load(out, data["model"], threads=1)
    assert runner.computes in ("f32", "f16")
    assert _accuracy(runner, data) >= 0.9


@pytest.mark.slow
def test_the_agent_refuses_a_unit_openvino_does_not_see(data: dict[str, Any],
                                                        workdir: Path) -> None:
    out, _ = _convert(NPU, data, "fp16", workdir)
    if "NPU" in {d.split(".")[0] for d in _visible()}:  # a host with an NPU runs it there
        run, _ = runtimes.load(str(out), 1)
        run()
        return
    with pytest.raises(AgentError) as refused:
        runtimes.load(str(out), 1)
    assert refused.value.status == 3
    assert "OpenVINO has no NPU here" in str(refused.value)
    assert "intel_vpu" in str(refused.value)


@pytest.mark.slow
def test_a_priority_list_runs_on_what_openvino_sees(data: dict[str, Any],
                                                    workdir: Path, tmp_path: Path) -> None:
    out, _ = _convert(GPU, data, "fp16", workdir, device="AUTO:GPU,CPU")
    release = tmp_path / "release"  # as a release names them: model.gpu.xml, .gpu.bin, .json
    release.mkdir()
    base = out.name[:-len(".gpu.xml")]
    for src in (out, out.with_name(base + ".gpu.bin"), out.with_name(base + ".json")):
        (release / f"model{full_suffix(src.name)}").write_bytes(src.read_bytes())
    assert sorted(p.name for p in release.iterdir()) == ["model.gpu.bin", "model.gpu.xml",
                                                         "model.json"]
    import openvino as ov

    assert ov.Core().read_model(str(release / "model.gpu.xml")).outputs
    spec = ov_agent.accelerator_spec(str(release / "model.gpu.xml"))
    assert spec["device"] == "AUTO:GPU,CPU"
    run, version = runtimes.load(str(release / "model.gpu.xml"), 1)
    run()
    assert version


@pytest.mark.slow
def test_optimize_for_the_nuc_verifies_npu_and_gpu_candidates_and_the_agent_refuses(
        tmp_path: Path) -> None:
    """``edge optimize sample:digits --profile intel-nuc`` verifies the NPU and GPU IRs here;
    ``edge bench --candidate openvino-npu-fp16`` through the local agent (this host's CPU is the
    device) refuses with the missing driver, exit 3."""
    out = tmp_path / "nuc.bundle"
    result = run_cli("optimize", "sample:digits", "--profile", "intel-nuc", "-o", str(out),
                     "--json")
    assert result.status == 0, result.stderr
    passed = {f"{c['candidate']['target']}-{c['candidate']['precision']}"
              for c in result.json()["candidates"] if c["status"] in ("passed", "chosen")}
    assert {"openvino-npu-int8", "openvino-npu-fp16", "openvino-gpu-fp16",
            "openvino-gpu-int8", "openvino-gpu-fp32"} <= passed
    bench = run_cli("bench", str(out), "--candidate", "openvino-npu-fp16", "--runs", "5")
    assert bench.status == 3
    assert "OpenVINO has no NPU here" in bench.stderr and "intel_vpu" in bench.stderr


class _Compiled:
    """A compiled model that reports the precision its CPU plugin would compute in."""

    def __init__(self, computes: str) -> None:
        self.computes = computes

    def get_property(self, name: str) -> Any:
        assert name == "INFERENCE_PRECISION_HINT"
        return type("Hint", (), {"get_type_name": lambda _: self.computes})()


class _Core:
    """A CPU plugin that answers each asked precision from ``gives`` and records the asks."""

    def __init__(self, gives: dict[str, str]) -> None:
        self.gives, self.asked = gives, []

    def compile_model(self, ir: Any, device: str, config: dict[str, Any]) -> _Compiled:
        self.asked.append(config["INFERENCE_PRECISION_HINT"])
        return _Compiled(self.gives[config["INFERENCE_PRECISION_HINT"]])


@pytest.mark.parametrize(("gives", "asked", "computes"), [
    ({"f16": "f16"}, ["f16"], "f16"),  # an ARM CPU or x86 with AVX512-FP16
    ({"f16": "f32"}, ["f16"], "f32"),  # plain AVX2: f16 comes back f32
    ({"f16": "bf16", "f32": "f32"}, ["f16", "f32"], "f32"),  # AVX512-BF16 without f16
])
def test_the_cpu_emulates_the_units_f16_in_f16_or_f32_never_bf16(
        monkeypatch: pytest.MonkeyPatch, gives: dict[str, str], asked: list[str],
        computes: str) -> None:
    core = _Core(gives)
    monkeypatch.setattr(accel, "_core", lambda: core)
    assert accel.precision_of(accel._cpu_compiled(object(), 1, "f16")) == computes
    assert core.asked == asked


def test_a_cpu_that_cannot_compute_f32_either_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "_core", lambda: _Core({"f16": "bf16", "f32": "bf16"}))
    with pytest.raises(RuntimeError, match="computes bf16 on this host's CPU when asked for f16"):
        accel._cpu_compiled(object(), 1, "f16")
