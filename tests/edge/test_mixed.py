"""The mixed plan: which layers an int8 artifact keeps float, decided by the per-layer times of
its int8 and fp32 artifacts (real OpenVINO and NNCF) or by whole-model trials of each kind of
layer in float (real ONNX Runtime), and the candidate it makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from edge.core.model import inspect_model, layer_owner
from edge.core.values import Candidate
from edge.flows import mixed
from edge.flows.mixed import (
    ALL_KINDS,
    KindTrial,
    LayerChoice,
    describe,
    describe_trial,
    kind_plan,
    layer_plan,
    slow_kinds,
    trial_kinds,
)
from tests.support.cli import run_cli
from tests.support.digits import DigitsModel


def _layer(node: str, kind: str, int8: float, fp32: float) -> LayerChoice:
    return LayerChoice(node=node, kind=kind, int8_ms=int8, float_ms=fp32)


def test_a_kind_int8_does_not_speed_up_stays_float_whole() -> None:
    layers = [_layer("dw1", "GroupConvolution", 0.15, 0.12),
              _layer("dw2", "GroupConvolution", 0.05, 0.06),  # faster alone: still its kind's
              _layer("pw1", "Convolution", 0.10, 0.30),
              _layer("pool", "ReduceMean", 0.019, 0.020)]  # 5% faster: under the 10% asked
    plan = slow_kinds(layers)
    assert [c.node for c in plan] == ["dw1", "pool", "dw2"]  # most slowed first
    assert slow_kinds([_layer("pw", "Convolution", 0.09, 0.1)]) == []  # exactly 10% faster


def test_the_note_names_each_kind_with_its_totals() -> None:
    plan = [_layer(f"dw{i}", "GroupConvolution", 0.1, 0.1) for i in range(8)]
    text = describe(plan, threads=1)
    assert "8 layer(s) kept float" in text and "(1 thread, 20 profiled runs each)" in text
    assert "GroupConvolution x8: int8 0.800 ms vs float 0.800 ms" in text
    assert text.endswith("dw0, dw1, dw2, dw3, dw4, dw5 and 2 more")


def test_a_layer_belongs_to_the_longest_node_name_it_extends() -> None:
    bases = {"/0/Conv", "/0", "/1/Conv"}
    assert layer_owner("/0/Conv/WithoutBiases", bases) == "/0/Conv"
    assert layer_owner("/0/Relu", bases) == "/0"
    assert layer_owner("/1/Conv", bases) == "/1/Conv"
    assert layer_owner("/1/Convx", bases) is None and layer_owner("input/fq", bases) is None


def _optimize(digits: DigitsModel, out: Path, profile: str) -> dict[str, dict[str, Any]]:
    """``edge optimize --json`` of the digits model on ``profile`` (YAML text): id -> result."""
    (out.parent / "profile.yaml").write_text(profile)
    result = run_cli("optimize", str(digits.onnx), "--profile", str(out.parent / "profile.yaml"),
                     "--calib", str(digits.calib), "--eval", str(digits.eval), "-o", str(out),
                     "--json")
    assert result.status == 0, result.stderr
    return {Candidate(**c["candidate"]).id: c for c in result.json()["candidates"]}


OV_HERE = "extends: x86-64\nid: ov-only\nruntimes: [openvino]\ncompute: {threads: 1}\n"


@pytest.fixture(scope="module")
def every_kind_float(digits: DigitsModel,
                     tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The bundle (and its candidates) with every kind of layer counted as not sped up by int8:
    the plan keeps every timed layer float."""
    out = tmp_path_factory.mktemp("mixed") / "b"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mixed, "MIN_GAIN", 0.0)
        return out, _optimize(digits, out, OV_HERE)


def test_layers_map_to_the_reference_nodes(digits: DigitsModel, monkeypatch: pytest.MonkeyPatch,
                                           every_kind_float: tuple[Path, dict[str, Any]]) -> None:
    """Every timed layer of the real int8 and fp32 IRs is owned by a node of the ONNX file."""
    out, found = every_kind_float
    files = {k: out / found[f"openvino-{k}"]["artifact"]["file"] for k in ("int8", "fp32")}
    monkeypatch.setattr(mixed, "MIN_GAIN", 0.0)  # every kind "not sped up": the whole map
    plan = layer_plan(files["int8"], files["fp32"], inspect_model(Path(digits.onnx)), threads=1)
    nodes = {n.name for n in onnx.load(str(digits.onnx)).graph.node}
    kinds = {c.kind for c in plan}
    assert {"Convolution", "FullyConnected"} & kinds, kinds
    assert plan and {c.node for c in plan} <= nodes
    assert all(c.int8_ms >= 0 and c.float_ms >= 0 for c in plan)


def test_the_mixed_candidate_is_made_verified_and_timed(
        digits: DigitsModel, every_kind_float: tuple[Path, dict[str, Any]]) -> None:
    """With every kind counted as not sped up, the plan keeps every timed layer float: the
    candidate is converted with them in NNCF's ignored scope, verified, timed and explained."""
    _, found = every_kind_float
    made = found["openvino-int8-mixed"]
    assert made["status"] in ("passed", "chosen"), made["reason"]
    assert "by the per-layer plan" in made["reason"]
    note = next(n for n in made["artifact"]["notes"] if n.startswith("per-layer plan:"))
    nodes = {n.name for n in onnx.load(str(digits.onnx)).graph.node}
    kept = set(made["artifact"]["kept_float"])
    assert kept and kept <= nodes and f"{len(kept)} layer(s) kept float" in note
    assert "kept in float:" in " ".join(made["artifact"]["notes"])  # NNCF's ignored scope
    assert made["bench"]["p50_ms"] > 0 and found["openvino-int8"]["bench"]["p50_ms"] > 0
    assert made["artifact"]["sha256"] != found["openvino-int8"]["artifact"]["sha256"]


def test_without_a_slow_kind_the_mixed_candidate_is_skipped(
        digits: DigitsModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mixed, "MIN_GAIN", 1e9)  # int8 counts as faster on every kind
    made = _optimize(digits, tmp_path / "b", OV_HERE)["openvino-int8-mixed"]
    assert made["status"] == "skipped" and "nothing to keep float" in made["reason"]


def test_not_planned_from_a_host_that_is_not_the_device(digits: DigitsModel,
                                                        tmp_path: Path) -> None:
    """An aarch64 profile optimized on this x86_64 host: its int8 and fp32 pass, but their
    per-layer times here say nothing of the device's kernels, so no plan is made from them."""
    found = _optimize(digits, tmp_path / "b", "extends: rpi4\nid: rpi4-ov\nruntimes: [openvino]\n")
    assert found["openvino-int8"]["status"] in ("passed", "chosen")
    made = found["openvino-int8-mixed"]
    assert made["status"] == "skipped", made["reason"]
    assert "do not stand for the aarch64 device's kernels" in made["reason"]


def _trial(label: str, ms: float, nodes: int = 2) -> KindTrial:
    kinds = ("Max", "LeakyRelu") if label == ALL_KINDS else (label,)
    return KindTrial(label=label, kinds=kinds, trial_ms=ms, int8_ms=1.0,
                     nodes=tuple(f"{k}{i}" for k in kinds for i in range(nodes)))


def test_the_kind_plan_keeps_float_what_made_the_model_faster() -> None:
    """A kind counts when its trial was 3% faster than all-int8; the plan is the faster of
    those kinds together (their gains summed) and every kind at once."""
    alone = [_trial("LeakyRelu", 0.95), _trial("Max", 0.98)]  # Max: 2% is noise
    plan = kind_plan([*alone, _trial(ALL_KINDS, 0.99)])
    assert plan is not None and plan.kinds == ("LeakyRelu",) and plan.trial_ms == 0.95
    plan = kind_plan([*alone, _trial(ALL_KINDS, 0.93)])
    assert plan is not None and plan.label == ALL_KINDS and len(plan.nodes) == 4
    both = kind_plan([_trial("LeakyRelu", 0.95), _trial("Max", 0.96), _trial(ALL_KINDS, 1.2)])
    assert both is not None and both.kinds == ("LeakyRelu", "Max")
    assert both.trial_ms == pytest.approx(0.91)  # estimated: 0.05 + 0.04 gained
    assert kind_plan([_trial("Max", 0.98), _trial(ALL_KINDS, 1.01)]) is None


def test_the_kind_note_names_the_kinds_and_every_trial() -> None:
    trials = [_trial("LeakyRelu", 0.95), _trial("Max", 1.01)]
    text = describe_trial(trials[0], trials, threads=1)
    assert text.startswith("per-kind plan: 2 layer(s) of the kind(s) LeakyRelu kept float")
    assert "0.950 ms vs all-int8 1.000 ms" in text and "(1 thread," in text
    assert text.endswith("LeakyRelu in float 0.950 ms; Max in float 1.010 ms")


ORT_HERE = "extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\ncompute: {threads: 1}\n"


@pytest.fixture(scope="module")
def every_trial_gains(digits: DigitsModel,
                      tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The ONNX Runtime bundle with every kind trial counted as faster than all-int8."""
    out = tmp_path_factory.mktemp("kinds") / "b"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mixed, "TRIAL_GAIN", 1e9)
        return out, _optimize(digits, out, ORT_HERE)


def test_trial_kinds_are_the_int8_layers_between_convolutions(
        digits: DigitsModel, every_trial_gains: tuple[Path, dict[str, Any]]) -> None:
    """Read from the real QDQ artifact: the nodes a DequantizeLinear feeds, but for the
    convolutions and products int8 is for (and pure data movement)."""
    out, found = every_trial_gains
    kinds = trial_kinds(out / found["onnxruntime-int8"]["artifact"]["file"])
    nodes = {n.name: n.op_type for n in onnx.load(str(digits.onnx)).graph.node}
    assert "MaxPool" in kinds, kinds
    assert not {"Conv", "Gemm", "Flatten"} & set(kinds)
    assert all(nodes[n] == kind for kind, of in kinds.items() for n in of)


def test_the_kind_candidate_is_made_verified_and_timed(
        digits: DigitsModel, every_trial_gains: tuple[Path, dict[str, Any]]) -> None:
    _, found = every_trial_gains
    made = found["onnxruntime-int8-mixed"]
    assert made["status"] in ("passed", "chosen"), made["reason"]
    note = next(n for n in made["artifact"]["notes"] if n.startswith("per-kind plan:"))
    assert "MaxPool in float" in note and "vs all-int8" in note
    kept = set(made["artifact"]["kept_float"])
    nodes = {n.name: n.op_type for n in onnx.load(str(digits.onnx)).graph.node}
    assert kept and {nodes[n] for n in kept} <= {"MaxPool", "Relu"}
    assert made["bench"]["p50_ms"] > 0
    assert made["artifact"]["sha256"] != found["onnxruntime-int8"]["artifact"]["sha256"]


def test_without_a_faster_trial_the_kind_candidate_is_skipped(
        digits: DigitsModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mixed, "TRIAL_GAIN", 0.0)  # no trial can be that fast
    made = _optimize(digits, tmp_path / "b", ORT_HERE)["onnxruntime-int8-mixed"]
    assert made["status"] == "skipped", made["reason"]
    assert "no kind of layer in float made the model 100% faster than all-int8" in made["reason"]
    assert "MaxPool in float" in made["reason"]
