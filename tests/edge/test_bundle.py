"""Bundles are written all at once and read back with every artifact checked."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from edge.core.bundle import read_bundle, version_drift, write_bundle
from edge.core.errors import UsageError
from edge.core.values import (
    Artifact,
    BenchResult,
    Bundle,
    Candidate,
    CandidateResult,
    Fidelity,
    ModelInfo,
    Observed,
    TensorSpec,
)


def _bundle(payload: bytes) -> tuple[Bundle, str]:
    sha = hashlib.sha256(payload).hexdigest()
    cand = Candidate(target="onnxruntime", precision="int8")
    spec = TensorSpec(name="x", shape=(1, 2), dtype="float32")
    result = CandidateResult(
        candidate=cand, status="chosen", reason="r",
        artifact=Artifact(candidate=cand, file=f"artifacts/{sha}.onnx", sha256=sha,
                          size_bytes=len(payload), runtime="onnxruntime", notes=("n",)),
        fidelity=Fidelity(samples=3, cosine=0.99, max_abs=0.1, top1_agreement=1.0))
    source = ModelInfo(path="m.onnx", sha256="s", size_bytes=1, opset=17, inputs=(spec,),
                       outputs=(spec,), params=2, macs=2, ops={"MatMul": 1})
    bundle = Bundle(format=1, profile="rpi4", profile_spec={"id": "rpi4"}, source=source,
                    calibration="c", evaluation="e", candidates=(result,), chosen=cand.id,
                    reason="why")
    return bundle, f"artifacts/{sha}.onnx"


def test_round_trip(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"model-bytes")
    bundle, name = _bundle(b"model-bytes")
    out = write_bundle(tmp_path / "out", bundle, {name: tmp_path / "a"})
    assert read_bundle(out) == bundle
    assert (out / name).read_bytes() == b"model-bytes"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_rewrite_replaces_whole_bundle(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"one")
    (tmp_path / "b").write_bytes(b"two")
    first, name1 = _bundle(b"one")
    second, name2 = _bundle(b"two")
    out = write_bundle(tmp_path / "out", first, {name1: tmp_path / "a"})
    write_bundle(out, second, {name2: tmp_path / "b"})
    assert read_bundle(out) == second and not (out / name1).exists()


def test_failed_write_leaves_previous_bundle(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"one")
    first, name1 = _bundle(b"one")
    out = write_bundle(tmp_path / "out", first, {name1: tmp_path / "a"})
    second, name2 = _bundle(b"two")
    with pytest.raises(FileNotFoundError):
        write_bundle(out, second, {name2: tmp_path / "missing"})
    assert read_bundle(out) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "out"]


def test_refuses_to_overwrite_a_non_bundle(tmp_path: Path) -> None:
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("x")
    bundle, _ = _bundle(b"")
    with pytest.raises(UsageError, match="not an edge bundle"):
        write_bundle(tmp_path / "precious", bundle, {})
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "x"


def test_tampered_artifact_is_detected(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"model-bytes")
    bundle, name = _bundle(b"model-bytes")
    out = write_bundle(tmp_path / "out", bundle, {name: tmp_path / "a"})
    (out / name).unlink()
    (out / name).write_bytes(b"evil")
    with pytest.raises(UsageError, match="does not match its size and sha256"):
        read_bundle(out)


def test_manifest_is_plain_json(tmp_path: Path) -> None:
    bundle, _ = _bundle(b"")
    out = write_bundle(tmp_path / "out", bundle, {})
    data = json.loads((out / "manifest.json").read_text())
    assert data["chosen"] == "onnxruntime-int8"
    assert data["candidates"][0]["fidelity"]["cosine"] == 0.99


def _timed(version: str, source: str = "host", **versions: str) -> BenchResult:
    seen = Observed(runtime="onnxruntime", versions={k.replace("_", " "): v
                                                     for k, v in versions.items()})
    return BenchResult(where="h", runtime="onnxruntime", runs=1, warmup=0, threads=1, p50_ms=1,
                       p90_ms=1, p99_ms=1, mean_ms=1, device={"runtime_version": version},
                       source=source, observed=seen)  # type: ignore[arg-type]


def test_a_device_running_another_runtime_version_than_verified_is_said() -> None:
    """Issue 43: the versions that ran it are kept; a deploy to a device whose runtime version
    differs from the one the artifact was verified with says so (one line)."""
    bundle, _ = _bundle(b"m")
    verified = replace(bundle.candidates[0], bench=_timed("1.31.1"))
    bundle = replace(bundle, candidates=(verified,))
    said = version_drift(bundle, "onnxruntime-int8", _timed("1.20.0", "device"))
    assert said is not None and said.startswith("verified with onnxruntime 1.31.1 (the device "
                                                "runs 1.20.0) on h")
    assert version_drift(bundle, "onnxruntime-int8", _timed("1.31.1", "device")) is None
    assert version_drift(bundle, "tflite-int8", _timed("2.3.0", "device")) is None


def test_a_device_running_another_plugin_or_driver_than_verified_is_said() -> None:
    """The plugin and driver versions the runtime names (OpenVINO's plugin builds, NCNN's
    Vulkan driver) are compared too; the hardware's name is not a version."""
    bundle, _ = _bundle(b"m")
    verified = replace(bundle.candidates[0], bench=_timed(
        "1.31.1", CPU_plugin="b1", vulkan_device="llvmpipe", vulkan_driver="0.0.1"))
    bundle = replace(bundle, candidates=(verified,))
    same = _timed("1.31.1", "device", CPU_plugin="b1", vulkan_device="v3d",
                  vulkan_driver="0.0.1")
    assert version_drift(bundle, "onnxruntime-int8", same) is None
    said = version_drift(bundle, "onnxruntime-int8", _timed(
        "1.31.1", "device", CPU_plugin="b2", vulkan_device="llvmpipe", vulkan_driver="25.0"))
    assert said is not None and "CPU plugin b1 (the device runs b2)" in said
    assert "vulkan driver 0.0.1 (the device runs 25.0)" in said and "onnxruntime" not in said
    other_gpu = _timed("1.31.1", "device", CPU_plugin="b1", vulkan_device="v3d",
                       vulkan_driver="25.0")  # another GPU's driver is not a drifted one
    assert version_drift(bundle, "onnxruntime-int8", other_gpu) is None
