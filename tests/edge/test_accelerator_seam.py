"""The seam every accelerator runtime plugs into: the profile's accelerator options reach the
conversion (and its cache key), the plan says the unit, how it is verified here and which
operators fall back to the CPU, the chooser ranks an artifact with CPU fallbacks after one
without until the device measures it, and every figure says where it comes from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from edge.core.capabilities import Capabilities
from edge.core.errors import UsageError
from edge.core.plan import FALLBACK_NOTE, accelerator_options, fallbacks_in, make_plan
from edge.core.profile import load_profile
from edge.core.select import choose_candidate
from edge.core.values import (
    SOURCES,
    Artifact,
    BenchResult,
    Candidate,
    CandidateResult,
    ModelInfo,
    TensorSpec,
)
from targets.base import ConvertSettings

NPU = Capabilities(runtime="npu-x", precisions=("int8",), suffix=".x.tflite",
                   accelerator="Test NPU", host_runs="simulated")
CPU = Capabilities(runtime="tflite", precisions=("int8", "fp32"), suffix=".tflite")


def _model() -> ModelInfo:
    spec = TensorSpec(name="x", shape=(1, 3), dtype="float32")
    return ModelInfo(path="m", sha256="0", size_bytes=1, opset=17, inputs=(spec,),
                     outputs=(spec,), params=1000, macs=0)


def _profile(tmp_path: Path, options: str = "{platform: rk3588}") -> Path:
    path = tmp_path / "board.yaml"
    path.write_text("extends: rpi5\nid: npu-board\nruntimes: [tflite]\naccelerators:\n"
                    f"  - {{kind: npu, name: Test NPU, precisions: [int8], runtime: tflite, "
                    f"memory_mb: 2, options: {options}}}\n")
    return path


def test_the_accelerators_options_reach_the_conversion_and_its_cache_key(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path))
    assert profile.accelerators[0].memory_mb == 2
    options = accelerator_options(profile)
    assert options == {"tflite": (("platform", "rk3588"),)}
    plain, npu = ConvertSettings(), ConvertSettings(accelerator=options["tflite"])
    assert plain.digest() == "default" and npu.digest() != plain.digest()
    other = ConvertSettings(accelerator=(("platform", "rk3566"),))
    assert other.digest() != npu.digest()


@pytest.mark.parametrize("options", ["{Platform: x}", "{platform: \"a\\nb\"}"])
def test_an_option_must_be_a_plain_word_and_one_line(tmp_path: Path, options: str) -> None:
    with pytest.raises(UsageError, match="option"):
        load_profile(_profile(tmp_path, options))


def test_a_runtime_no_plug_in_offers_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("extends: rpi5\nid: p\nruntimes: [tflite, no-such-npu]\n")
    with pytest.raises(UsageError, match="unknown runtime 'no-such-npu'"):
        load_profile(path)


def test_the_plan_says_the_unit_how_it_is_verified_and_what_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "npu.yaml"
    path.write_text("extends: rpi5\nid: npu\nruntimes: [tflite, onnxruntime]\n")
    targets = {"tflite": (NPU, None)}
    plan = make_plan(load_profile(path), _model(), targets, fallbacks={"tflite": ("Gelu",)})
    reason = plan[0].reason
    assert plan[0].keep and "on the Test NPU" in reason and "simulator" in reason
    assert "1 operator kind(s) would fall back to the CPU: Gelu" in reason
    clean = make_plan(load_profile(path), _model(), targets, fallbacks={"tflite": ()})
    assert "every operator maps to it" in clean[0].reason
    unknown = make_plan(load_profile(path), _model(), targets)
    assert "known once converted" in unknown[0].reason


def test_fallbacks_are_read_from_the_targets_note() -> None:
    assert fallbacks_in(("made by x", f"{FALLBACK_NOTE}Gelu, Erf")) == ("Gelu", "Erf")
    assert fallbacks_in(("made by x",)) == ()


def _result(target: str, fallbacks: tuple[str, ...] = (), ms: float | None = None,
            source: str = "host") -> CandidateResult:
    cand = Candidate(target=target, precision="int8")
    artifact = Artifact(candidate=cand, file="a", sha256="0" * 64, size_bytes=1,
                        runtime=target, fallbacks=fallbacks)
    bench = None if ms is None else BenchResult(
        where="x", runtime=target, runs=1, warmup=0, threads=1, p50_ms=ms, p90_ms=ms,
        p99_ms=ms, mean_ms=ms, source=source)  # type: ignore[arg-type]
    return CandidateResult(candidate=cand, status="passed", reason="", artifact=artifact,
                           bench=bench)


def test_an_artifact_with_cpu_fallbacks_waits_for_a_measurement_on_the_device() -> None:
    order = ("rknn", "tflite")
    choice = choose_candidate([_result("rknn", ("Gelu",)), _result("tflite")], order,
                              trusted=False)
    assert choice.id == "tflite-int8"
    assert "rknn-int8 leave(s) operators to the CPU" in choice.reason
    clean = choose_candidate([_result("rknn"), _result("tflite")], order, trusted=False)
    assert clean.id == "rknn-int8"  # the accelerator first by the profile's order
    measured = choose_candidate([_result("rknn", ("Gelu",), 1.0), _result("tflite", (), 5.0)],
                                order, ms={"rknn-int8": 1.0, "tflite-int8": 5.0})
    assert measured.id == "rknn-int8"  # measured on the device, it wins on its time


def test_every_figure_says_where_it_comes_from() -> None:
    estimate = _result("ethos-u", ms=2.0, source="estimate").bench
    assert estimate is not None and not estimate.measured
    assert estimate.source_label == "vendor estimate" == SOURCES["estimate"]
    host = replace(estimate, source="host")
    assert host.measured and host.source_label == "this host only"
    assert estimate.to_json()["source"] == "estimate"


def test_an_accelerators_candidate_needs_a_precision_its_unit_computes(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text("extends: rpi5\nid: gpu\nruntimes: [tflite]\naccelerators:\n"
                    "  - {kind: gpu, name: Old GPU, precisions: [fp32, fp16], runtime: tflite}\n")
    caps = replace(NPU, precisions=("int8", "fp16"))
    plan = {p.candidate.precision: p for p in make_plan(load_profile(path), _model(),
                                                          {"tflite": (caps, None)})}
    assert not plan["int8"].keep
    assert plan["int8"].reason == "the Old GPU computes fp32, fp16, not int8"
    assert plan["fp16"].keep


def test_a_figure_written_before_sources_reads_as_a_timing_where_it_ran() -> None:
    old = _result("tflite", ms=1.0).bench
    assert old is not None
    legacy = replace(old, source=None, where="pi@raspberrypi")
    assert legacy.measured and legacy.source_label == "measured on pi@raspberrypi"
    assert "source" not in legacy.to_json()
