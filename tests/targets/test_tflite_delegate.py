"""TFLite for an NPU behind an external delegate: the int8 model with a companion JSON naming
the library, verified on LiteRT's CPU here; the agent loads a real external delegate (a null
delegate built here with the C compiler: it takes no operators) and refuses a device without
the profile's library. Real onnx2tf and LiteRT, no mocks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices.agent import runtimes
from devices.agent.errors import AgentError
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from targets.base import ConversionError, ConvertSettings
from targets.tflite import RUNTIME
from targets.tflite import agent as tflite_agent
from targets.tflite.delegate import DEFAULT_LIBRARY, TFLiteDelegateTarget, library_spec
from tests.support.cli import run_cli
from tests.support.digits import DigitsModel
from tests.support.null_delegate import build_null_delegate, compiler

TARGET = TFLiteDelegateTarget()
pytestmark = pytest.mark.skipif(TARGET.missing() is not None, reason=str(TARGET.missing()))

def _settings(**options: str) -> ConvertSettings:
    """Settings carrying the profile's accelerator options."""
    return ConvertSettings(accelerator=tuple(sorted(options.items())))


@pytest.fixture(scope="module")
def converted(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = inspect_model(digits.onnx)
    workdir = tmp_path_factory.mktemp("tflite-shared")
    path, notes = TARGET.convert(model, "int8", calib=load_dataset(digits.calib, model),
                                 workdir=workdir, settings=_settings(delegate=DEFAULT_LIBRARY))
    evaluation = np.load(digits.eval)
    return {"model": model, "path": path, "notes": notes, "workdir": workdir,
            "x": evaluation["input"][:64], "y": evaluation["labels"][:64]}


@pytest.fixture(scope="module")
def null_delegate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if compiler() is None:
        pytest.skip("no C compiler to build the null delegate")
    return build_null_delegate(tmp_path_factory.mktemp("delegate"))


def _release(converted: dict[str, Any], folder: Path, library: str) -> Path:
    """The artifact as a release names it (model.delegate.tflite + model.json), for
    ``library``."""
    folder.mkdir()
    model = folder / "model.delegate.tflite"
    model.write_bytes(converted["path"].read_bytes())
    spec = json.loads(_spec_file(converted["path"]).read_text())
    spec["edge_delegate"]["library"] = library
    (folder / "model.json").write_text(json.dumps(spec))
    return model


def _spec_file(path: Path) -> Path:
    """The companion JSON: the artifact's name without its suffix, then .json."""
    return path.with_name(path.name[:-len(".delegate.tflite")] + ".json")


def test_the_target_is_tflite_int8_named_for_its_delegate() -> None:
    assert dict(RUNTIME.targets)["tflite-delegate"].endswith(":TFLiteDelegateTarget")
    assert ".delegate.tflite" in RUNTIME.suffixes == tflite_agent.SUFFIXES
    assert (TARGET.caps.host_runs, TARGET.caps.accelerator) == ("cpu",
                                                                "NPU (TFLite external delegate)")
    assert TARGET.caps.precisions == ("int8",) and TARGET.caps.converts_with == "tflite"
    assert TARGET.caps.suffix == ".delegate.tflite" and TARGET.caps.companions == (".json",)


def test_the_library_and_its_options_come_from_the_profile() -> None:
    assert library_spec({})["library"] == DEFAULT_LIBRARY
    spec = library_spec({"delegate": "/opt/lib/libvx_delegate.so", "cache_file_path": "/tmp/c"})
    assert spec["library"] == "/opt/lib/libvx_delegate.so"
    assert spec["options"] == {"cache_file_path": "/tmp/c"}
    with pytest.raises(ConversionError, match="absolute path"):
        library_spec({"delegate": "libvx_delegate.so"})


@pytest.mark.slow
def test_the_int8_model_names_its_delegate_and_verifies_here(converted: dict[str, Any]) -> None:
    path = converted["path"]
    assert path.name == "model_int8_npu.delegate.tflite"
    spec = json.loads(_spec_file(path).read_text())["edge_delegate"]
    assert spec["library"] == DEFAULT_LIBRARY
    assert any("external delegate" in n for n in converted["notes"])
    runner = TARGET.load(path, converted["model"], threads=1)
    x = converted["x"]
    out = np.concatenate([runner.run({"input": x[i:i + 1]})[0] for i in range(len(x))])
    assert float((out.argmax(1) == converted["y"]).mean()) >= 0.9


@pytest.mark.slow
def test_the_agent_refuses_a_device_without_the_library(converted: dict[str, Any],
                                                        tmp_path: Path) -> None:
    model = _release(converted, tmp_path / "release", "/usr/lib/libvx_delegate.so")
    if Path("/usr/lib/libvx_delegate.so").exists():
        pytest.skip("this host has the VX delegate")
    with pytest.raises(AgentError) as refused:
        runtimes.load(str(model), 1)
    assert refused.value.status == 3
    assert "/usr/lib/libvx_delegate.so" in str(refused.value)
    assert "lacks" in str(refused.value)


@pytest.mark.slow
def test_the_agent_loads_a_real_external_delegate(converted: dict[str, Any], tmp_path: Path,
                                                  null_delegate: Path) -> None:
    model = _release(converted, tmp_path / "release", str(null_delegate))
    run, version = runtimes.load(str(model), 1)
    run()
    assert version != "unknown"
    args = argparse.Namespace(model=str(model), runs=5, threads=1)
    report = tflite_agent.cmd_delegate(args)
    assert report["library"] == str(null_delegate) and report["p50_ms"] > 0
    assert report["partitions"] == 0 and report["taken"] == []  # the null delegate takes none
    assert len(report["cpu"]) == report["model_ops"] > 0 or not report["listed"]


@pytest.mark.slow
def test_the_operators_a_delegate_took_are_named(converted: dict[str, Any]) -> None:
    """LiteRT's default XNNPACK delegate is a real delegate that takes operators: its
    partition's operators are found by walking back from the partition's outputs."""
    interpreter = _plain(converted["path"])
    report = tflite_agent.delegated(interpreter)
    if not report["listed"]:
        pytest.skip("this LiteRT lists no nodes")
    assert report["partitions"] >= 1 and "CONV_2D" in report["taken"]
    assert len(report["taken"]) + len(report["cpu"]) == report["model_ops"]


def _plain(path: Path) -> Any:
    """The model in LiteRT's interpreter with its default delegates (XNNPACK)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    return interpreter


@pytest.mark.slow
def test_a_delegate_that_does_not_load_is_refused(converted: dict[str, Any],
                                                  tmp_path: Path) -> None:
    broken = tmp_path / "libbroken_delegate.so"
    broken.write_bytes(b"not an ELF file")
    model = _release(converted, tmp_path / "release", str(broken))
    with pytest.raises(AgentError, match="did not load") as refused:
        runtimes.load(str(model), 1)
    assert refused.value.status == 3


def _optimize(profile: str, out: Path) -> dict[str, Any]:
    result = run_cli("optimize", "sample:digits", "--profile", profile, "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    document: dict[str, Any] = result.json()
    return document


@pytest.mark.slow
def test_the_imx8mp_candidate_is_refused_by_the_local_agent(tmp_path: Path) -> None:
    """``edge optimize sample:digits --profile imx8mp`` verifies the delegate's int8 model here;
    ``edge bench`` of it through the local agent (this host is the device) names the missing
    library, exit 3."""
    out = tmp_path / "imx.bundle"
    document = _optimize("imx8mp", out)
    ours = next(c for c in document["candidates"]
                if c["candidate"]["target"] == "tflite-delegate")
    assert ours["status"] in ("passed", "chosen")
    assert ours["artifact"]["file"].endswith(".delegate.tflite")
    bench = run_cli("bench", str(out), "--candidate", "tflite-delegate-int8", "--runs", "5")
    assert bench.status == 3
    assert "/usr/lib/libvx_delegate.so" in bench.stderr and "lacks" in bench.stderr


@pytest.mark.slow
def test_a_real_delegate_runs_through_the_local_agent(tmp_path: Path,
                                                      null_delegate: Path) -> None:
    """A profile naming the null delegate: the local agent loads the model through it and
    times it (the bench's figure is this host's CPU, the delegate taking nothing: it fell
    back, accepted here with --allow-fallback)."""
    profile = tmp_path / "imx-null.yaml"
    profile.write_text(
        "extends: imx8mp\nid: imx-null\naccelerators:\n  - kind: npu\n    name: null delegate\n"
        "    tops: 1\n    precisions: [int8]\n    runtime: tflite-delegate\n"
        f"    options: {{delegate: {null_delegate}}}\nruntimes: [tflite-delegate, tflite]\n")
    out = tmp_path / "null.bundle"
    _optimize(str(profile), out)
    bench = run_cli("bench", str(out), "--candidate", "tflite-delegate-int8", "--runs", "5",
                    "--json", "--allow-fallback")
    assert bench.status == 0, bench.stderr
    assert bench.json()["bench"]["p50_ms"] > 0
    assert bench.json()["bench"]["observed"]["made_for"] == "the NPU"
    refused = run_cli("deploy", str(out), "--candidate", "tflite-delegate-int8", "--runs", "5")
    assert refused.status == 1, refused.stderr
    assert "fell back on" in refused.stderr and "keeps its current release" in refused.stderr
    deployed = run_cli("deploy", str(out), "--candidate", "tflite-delegate-int8", "--runs", "5",
                       "--allow-fallback")
    assert deployed.status == 0, deployed.stderr
    assert "ran " in deployed.stdout and "(installed, not active)" not in deployed.stdout


@pytest.mark.slow
def test_a_delegate_that_takes_nothing_is_observed_and_bench_says_it_fell_back(
        converted: dict[str, Any], tmp_path: Path, null_delegate: Path) -> None:
    """Issue 43: the null delegate loads and claims no operator: what ran is observed (every
    operator on the CPU, 0 % on the NPU the artifact was made for) and ``edge bench`` exits 1
    naming the share and the layers, unless --allow-fallback."""
    model = _release(converted, tmp_path / "release", str(null_delegate))
    refused = run_cli("bench", str(model), "--runs", "5", "--json")
    assert refused.status == 1, refused.stderr
    assert "fell back: 100% of the MACs ran on CPU, not on the NPU as the artifact was made " \
           "to (" in refused.stderr and "--allow-fallback" in refused.stderr
    observed = json.loads(refused.stdout)["bench"]["observed"]
    assert observed["made_for"] == "the NPU" and observed["runtime"] == "tflite"
    assert {layer["unit"] for layer in observed["layers"]} == {"CPU"}
    assert any(layer["op"] == "CONV_2D" and layer["macs"] > 0 for layer in observed["layers"])
    allowed = run_cli("bench", str(model), "--runs", "5", "--allow-fallback")
    assert allowed.status == 0, allowed.stderr
    assert "\nran         CPU i8 100% of MACs (" in allowed.stdout, allowed.stdout
