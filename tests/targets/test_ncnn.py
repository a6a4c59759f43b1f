"""NCNN: pnnx converts the trained digits CNN to NCNN (fp32 and fp16 on the CPU, fp32 and fp16
through Vulkan on this host's Vulkan device, Mesa's lavapipe), the host runner and the agent's
loader answer with the reference's names, shapes and dtypes, and ``edge optimize`` for rpi4,
rpi5 and rock5b gives verified ``ncnn-*`` candidates (per output, with the task metric) whose
three files (param, weights, settings) land in the bundle. Real pnnx, real ncnn; no mocks."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from devices.agent import observe, runtimes
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.plugins import full_suffix
from edge.core.profile import load_profile
from edge.core.values import Dataset, ModelInfo
from edge.flows.optimize import OptimizeOptions, optimize
from targets.base import ConversionError
from targets.ncnn import agent
from targets.ncnn.target import NcnnTarget, NcnnVulkanTarget
from targets.onnxruntime import OrtRunner
from tests.support.cli import run_edge
from tests.support.digits import DigitsModel

CPU, VULKAN = NcnnTarget(), NcnnVulkanTarget()
NCNN_ONLY = "extends: {base}\nid: {base}-ncnn\nruntimes: [ncnn, ncnn-vulkan]\n"


@pytest.fixture(scope="module")
def model(digits: DigitsModel) -> ModelInfo:
    return inspect_model(digits.onnx)


@pytest.fixture(scope="module")
def held_out(digits: DigitsModel, model: ModelInfo) -> Dataset:
    return load_dataset(digits.eval, model, want_labels=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ncnn")


def _vulkan() -> None:
    """Skip (a failure under EDGE_TEST_STRICT) where this host shows NCNN no Vulkan device."""
    reason = VULKAN.missing()
    if reason:
        pytest.skip(reason)


def _max_error(target: NcnnTarget, file: Path, reference: Path, model: ModelInfo,
               data: Dataset) -> tuple[float, float]:
    """(largest absolute difference from ONNX Runtime's fp32, top-1 agreement)."""
    runner, ref = target.load(file, model, threads=1), OrtRunner(reference, threads=1)
    got = [runner.run(f)[0] for f in data.feeds]
    want = [ref.run(f)[0] for f in data.feeds]
    error = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
    agree = np.mean([np.argmax(g) == np.argmax(w) for g, w in zip(got, want, strict=True)])
    return error, float(agree)


@pytest.mark.parametrize(("target", "precision", "bound"), [
    (CPU, "fp32", 1e-4), (CPU, "fp16", 2e-2), (VULKAN, "fp32", 1e-4), (VULKAN, "fp16", 5e-2)])
def test_the_digits_cnn_matches_the_reference(target: NcnnTarget, precision: str, bound: float,
                                              model: ModelInfo, held_out: Dataset,
                                              digits: DigitsModel, workdir: Path) -> None:
    if target.vulkan:
        _vulkan()
    file, notes = target.convert(model, precision, calib=Dataset(feeds=()),
                                 workdir=workdir / target.name)
    assert file.name.endswith(target.caps.suffix) and notes[0].startswith("pnnx to NCNN")
    for companion in target.caps.companions:
        assert file.with_name(file.name[: -len(target.caps.suffix)] + companion).is_file()
    error, agree = _max_error(target, file, digits.onnx, model, held_out)
    assert error < bound and agree >= 0.98, (error, agree)
    out = target.load(file, model, threads=1).run(held_out.feeds[0])
    assert [(o.shape, o.dtype) for o in out] == [((1, 10), np.float32)]


def test_the_settings_name_the_blobs_and_the_precision(model: ModelInfo,
                                                        workdir: Path) -> None:
    file, _ = CPU.convert(model, "fp16", calib=Dataset(feeds=()), workdir=workdir / "ncnn")
    settings = agent.read_settings(str(file))
    assert settings["fp16"] and not settings["vulkan"]
    assert settings["inputs"] == [{"blob": "in0", "name": "input", "shape": [1, 1, 8, 8],
                                   "mat": [1, 8, 8], "dtype": "float32"}]
    assert [o["blob"] for o in settings["outputs"]] == ["out0"]
    run, version = agent.load(str(file), 1)  # the agent's own loader, on random inputs
    assert version == "1.0.20261020" and run()[0].shape == (1, 10)


def test_a_second_conversion_is_the_cached_one(model: ModelInfo, workdir: Path) -> None:
    first, _ = CPU.convert(model, "fp32", calib=Dataset(feeds=()), workdir=workdir / "ncnn")
    stamp = first.stat().st_mtime_ns
    again, notes = CPU.convert(model, "fp32", calib=Dataset(feeds=()), workdir=workdir / "ncnn")
    assert again == first and again.stat().st_mtime_ns == stamp and notes


def test_a_batch_other_than_one_is_refused_in_one_line(model: ModelInfo, tmp_path: Path) -> None:
    batched = replace(model, inputs=(replace(model.inputs[0], shape=(4, 1, 8, 8)),))
    with pytest.raises(ConversionError, match="ncnn runs batch 1") as refused:
        CPU.convert(batched, "fp32", calib=Dataset(feeds=()), workdir=tmp_path)
    assert "\n" not in str(refused.value) and not list(tmp_path.glob("*.param"))


def test_the_loader_refuses_a_param_without_its_settings(tmp_path: Path) -> None:
    lone = tmp_path / "model.ncnn.param"
    lone.write_text("7767517\n0 0\n")
    with pytest.raises(agent.AgentError, match="deploy the bundle's files together") as refused:
        agent.load(str(lone), 1)
    assert refused.value.status == 2


def test_the_dry_run_for_rpi4_plans_the_ncnn_candidates(digits: DigitsModel) -> None:
    done = run_edge("optimize", str(digits.onnx), "--profile", "rpi4", "--dry-run", "--json")
    assert done.status == 0, done.stderr
    plan = {p["candidate"]: p for p in json.loads(done.stdout)["plan"]}
    assert plan["ncnn-fp32"]["keep"] and plan["ncnn-vulkan-fp32"]["keep"]
    assert "VideoCore VI" in plan["ncnn-vulkan-fp32"]["reason"] or \
        "Vulkan GPU" in plan["ncnn-vulkan-fp32"]["reason"]
    assert not plan["ncnn-fp16"]["keep"]  # the Cortex-A72 has no fp16 arithmetic


@pytest.mark.parametrize("base", ["rpi4", "rpi5", "rock5b"])
def test_optimize_gives_verified_ncnn_candidates(base: str, digits: DigitsModel,
                                                 tmp_path: Path) -> None:
    _vulkan()
    (tmp_path / "p.yaml").write_text(NCNN_ONLY.format(base=base))
    # exhaustive: every ncnn candidate converted, not only the one the order chooses
    options = OptimizeOptions(calib=digits.calib, eval=digits.eval, measure=False,
                              exhaustive=True)
    bundle = optimize(digits.onnx, load_profile(str(tmp_path / "p.yaml")), tmp_path / "b",
                      options)
    made = {r.candidate.id: r for r in bundle.candidates if r.artifact is not None}
    wanted = {"ncnn-fp32", "ncnn-vulkan-fp32"} | (
        {"ncnn-fp16"} if base != "rpi4" else set()) | (
        {"ncnn-vulkan-fp16"} if base == "rock5b" else set())
    assert set(made) == wanted
    for result in made.values():
        assert result.status in ("passed", "chosen"), result.reason
        assert result.fidelity is not None and all(o.passed for o in result.fidelity.outputs)
        artifact = result.artifact
        assert artifact is not None and artifact.runtime == "ncnn"
        files = [artifact.file, *(c.file for c in artifact.companions)]
        assert [Path(f).suffix for f in files[1:]] == [".bin", ".json"]
        assert all((tmp_path / "b" / f).is_file() for f in files)
        released = [f"model{full_suffix(f)}" for f in files]  # as a release names them
        assert released[1:] == ["model.bin", "model.json"]
        assert agent.stem_of(released[0]) == "model"  # where the loader looks for them


def test_vulkan_never_starts_in_edges_own_process(model: ModelInfo, workdir: Path) -> None:
    """A Vulkan instance (lavapipe's LLVM) in a process that loaded TensorFlow aborts it at exit:
    the probe and the ncnn-vulkan runner live in child processes, so an optimize that read a
    Keras model and verified ncnn-vulkan still exits 0."""
    _vulkan()
    file, _ = VULKAN.convert(model, "fp32", calib=Dataset(feeds=()), workdir=workdir / "vk")
    program = ("import sys, numpy as np, tensorflow\n"
               "from targets.ncnn.target import NcnnVulkanTarget, _vulkan_here\n"
               "from edge.core.model import inspect_model\n"
               "assert _vulkan_here()\n"
               "runner = NcnnVulkanTarget().load(sys.argv[1], inspect_model(sys.argv[2]), "
               "threads=1)\n"
               "print(runner.run({'input': np.zeros((1, 1, 8, 8), np.float32)})[0].shape)\n")
    assert _in_a_child(program, str(file), model.path).endswith("(1, 10)")


def _in_a_child(program: str, *args: str) -> str:
    """What ``program`` printed, run in a child Python (where edge starts Vulkan); it must
    exit 0."""
    done = subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_each_layers_unit_is_observed_on_vulkan_and_on_the_cpu(model: ModelInfo,
                                                                workdir: Path) -> None:
    """Issue 43: what NCNN ran, read from the loaded net through the agent's loader: on this
    host's Vulkan device (lavapipe) the layers NCNN routes to Vulkan are observed on the GPU,
    the artifact says it was made for the GPU; the CPU artifact runs every layer on the CPU.
    (Vulkan in a child process, as edge runs it.)"""
    _vulkan()
    file, _ = VULKAN.convert(model, "fp32", calib=Dataset(feeds=()), workdir=workdir / "vk")
    program = ("import json, sys\n"
               "from devices.agent import observe, runtimes\n"
               "run, _ = runtimes.load(sys.argv[1], 1)\n"
               "run()\n"
               "print(json.dumps(observe.observed(run, 'ncnn')))\n")
    seen = json.loads(_in_a_child(program, str(file)).splitlines()[-1])
    units = {layer["op"]: layer["unit"] for layer in seen["layers"]}
    assert seen["made_for"] == "GPU" and units["Convolution"] == "GPU", units
    assert {layer["precision"] for layer in seen["layers"]} == {"f32"}
    cpu, _ = CPU.convert(model, "fp32", calib=Dataset(feeds=()), workdir=workdir / CPU.name)
    run, _ = runtimes.load(str(cpu), 1)
    run()
    here = observe.observed(run, "ncnn")
    assert not here["made_for"] and {layer["unit"] for layer in here["layers"]} == {"CPU"}
