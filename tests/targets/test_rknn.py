"""The real pinned converter in its own environment: rknn-toolkit2 2.5.0 (numpy 1.26.4, torch
1.13.1, onnx 1.18.0 — none of which edge's own environment could hold) converts the shipped
digits CNN to .rknn for an RK3588, fp16 and int8 on 8 calibration samples, and its versions
key the conversion cache and go into the manifest.

The environment (1.84 GB of wheels, 3.70 GB installed, about 2 minutes to build) is built
once into the test data cache (``EDGE_TEST_DATA``, default ~/.cache/edge-test-data/toolchains),
where CI keeps it between runs (and .ci/run may build it ahead, beside its other installs): a
run finds it built, or builds it. The RKNN runtime itself (plan, the simulator's verification)
comes with issue 28.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import targets
from edge.core.bundle import write_bundle
from edge.core.cache import cache_root
from edge.core.documents import read_json
from edge.core.model import inspect_model
from edge.core.toolchain import RECORD, BuiltToolchain, Toolchain, build, run
from edge.core.values import Bundle, Candidate, CandidateResult, Dataset, ModelInfo
from edge.flows.optimize import _store
from targets import workdir_name
from targets.base import ConvertSettings, Runtime
from targets.rknn.convert import TOOLCHAIN, RKNNConverter
from tests.support.mediapipe import cache_dir

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
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


@pytest.fixture(scope="module")
def workdir() -> Path:
    """The conversion directory edge keys by the converter's toolchain versions."""
    return cache_root() / "convert" / "digits" / _workdir_name(TOOLCHAIN)


def test_the_environment_holds_the_pinned_versions_edge_cannot(
        environment: BuiltToolchain) -> None:
    record = json.loads((environment.path / RECORD).read_text())
    assert record["installed"] | TOOLCHAIN.pins == record["installed"]  # every pin honoured
    out = run(TOOLCHAIN, ["-c", "import numpy, onnx, torch, rknn.api; print(numpy.__version__, "
                                "onnx.__version__, torch.__version__.split('+')[0])"],
              timeout_s=300)
    assert out.split() == ["1.26.4", "1.18.0", "1.13.1"]
    assert np.__version__.split(".")[0] == "2"  # edge's own numpy, meanwhile


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_rknn_converts_in_its_environment_and_is_cached(
        precision: str, environment: BuiltToolchain, digits: tuple[ModelInfo, Dataset],
        workdir: Path) -> None:
    model, calib = digits
    converter = RKNNConverter("rk3588")
    file, notes = converter.convert(model, precision, calib=calib, workdir=workdir)
    assert file.parent == workdir and file.read_bytes()[:4] == b"RKNN"
    assert file.stat().st_size > 10_000  # the weights of a 23k-parameter CNN
    assert notes[0] == "rknn-toolkit2 2.5.0 for rk3588, in its own environment"
    made = file.stat().st_mtime_ns
    assert converter.convert(model, precision, calib=calib, workdir=workdir)[0] == file
    assert file.stat().st_mtime_ns == made  # cached: converted once
    assert not list(workdir.glob(".*.partial"))


def test_the_toolchain_versions_key_the_cache_and_reach_the_manifest(
        environment: BuiltToolchain, digits: tuple[ModelInfo, Dataset], workdir: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, calib = digits
    converter = RKNNConverter("rk3588")
    file, notes = converter.convert(model, "int8", calib=calib, workdir=workdir)
    assert workdir.name == _workdir_name(TOOLCHAIN)
    assert _workdir_name(_with_pin("numpy==1.26.3")) != workdir.name  # another numpy, another

    cand = Candidate(target="rknn", precision="int8")
    artifact, files = _store(converter, cand, file, notes)
    assert artifact.toolchain == TOOLCHAIN.versions()
    result = CandidateResult(candidate=cand, status="passed", reason="converted",
                             artifact=artifact)
    bundle = Bundle(format=1, profile="rk3588-board", source=model, calibration="8 samples",
                    evaluation="none", candidates=(result,), chosen=None,
                    reason="conversion only")
    out = write_bundle(tmp_path / "bundle", bundle, files)
    manifest = json.loads((out / "manifest.json").read_text())
    recorded = manifest["candidates"][0]["artifact"]["toolchain"]
    assert {k: recorded[k] for k in ("rknn-toolkit2", "numpy", "torch", "onnx")} == {
        "rknn-toolkit2": "2.5.0", "numpy": "1.26.4", "torch": "1.13.1", "onnx": "1.18.0"}
    assert read_json("manifest", out / "manifest.json").candidates[0].artifact == artifact


def _with_pin(pin: str) -> Toolchain:
    """TOOLCHAIN with one distribution pinned to another version."""
    name = pin.split("==")[0]
    return replace(TOOLCHAIN, requirements=tuple(
        pin if r.startswith(f"{name}==") else r for r in TOOLCHAIN.requirements))


def _workdir_name(toolchain: Toolchain) -> str:
    """The conversion directory name of an RKNN converter run in ``toolchain``."""
    with pytest.MonkeyPatch.context() as patch:
        real = targets.runtimes()
        rknn = Runtime(name="rknn", targets=(("rknn", "targets.rknn.convert:RKNNConverter"),),
                       suffixes=(".rknn",), agent=None, profiler=None, provision=None,
                       label="RKNN", colour="#000000")
        patch.setattr(targets, "runtimes", lambda: real | {"rknn": rknn})
        patch.setattr(RKNNConverter, "caps", replace(RKNNConverter.caps, toolchain=toolchain))
        return workdir_name("rknn", ConvertSettings())


def test_the_simulator_finds_a_cached_artifacts_files_where_they_are_now(tmp_path: Path) -> None:
    """A cached artifact reached by another path than the one that converted it (the test data
    cache kept between runs, a moved cache) with its model moved: the simulator's request is
    rewritten to the model's and the artifact folder's paths of this run."""
    from edge.core.values import ModelInfo
    from targets.rknn import simulator

    here = tmp_path / "now"
    (here / "rknn_calib").mkdir(parents=True)
    np.save(here / "rknn_calib" / "0_0.npy", np.zeros((1, 1, 8, 8), np.float32))
    gone = "/gone/session/cache/convert/k/rknn"
    (here / "rknn_calib" / "dataset.txt").write_text(f"{gone}/rknn_calib/0_0.npy\n")
    request = here / "model_int8.request.json"
    request.write_text(json.dumps({"model": "/gone/model.onnx", "out": f"{gone}/m.rknn.part",
                                    "dataset": f"{gone}/rknn_calib/dataset.txt"}))
    model = ModelInfo(path=str(tmp_path / "model.onnx"), sha256="0" * 64, size_bytes=1,
                      opset=17, inputs=(), outputs=(), params=0, macs=0)
    written = simulator._relocated(request, model)
    spec = json.loads(written[0].read_text())
    assert spec["model"] == model.path and spec["out"] == str(here / "m.rknn.part")
    assert spec["dataset"] == str(written[1])
    assert written[1].read_text().split() == [str(here / "rknn_calib" / "0_0.npy")]
    assert all(p.parent in (here, here / "rknn_calib") for p in written)
