"""The mixed plan: which layers an int8 artifact keeps float, decided by the per-layer times of
its int8 and fp32 artifacts (real OpenVINO and NNCF) or by whole-model trials of each kind of
layer in float (real ONNX Runtime), and the candidate it makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model, layer_owner
from edge.core.values import Candidate
from edge.flows import mixed
from edge.flows.mixed import (
    KindTrial,
    LayerChoice,
    describe,
    describe_trial,
    layer_plan,
    slow_kinds,
)
from targets.onnxruntime import float_kinds
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
    assert "by the mixed plan" in made["reason"]
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


def test_float_kinds_are_the_int8_layers_between_convolutions() -> None:
    """Read from the reference: the kinds ONNX Runtime's quantizer runs in int8, but for the
    convolutions and products int8 is for, the activations folded into them, pure data moves,
    kinds it never quantizes (Max: a trial of it would change nothing) and nodes recovery
    already keeps float."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["c1"], name="relu"),  # folded into the conv
             helper.make_node("LeakyRelu", ["c1"], ["l"], name="act1"),
             helper.make_node("Max", ["l", "c"], ["m"], name="max"),
             helper.make_node("LeakyRelu", ["m"], ["a"]),  # unnamed: keep_float's name for it
             helper.make_node("Reshape", ["a", "s"], ["r"], name="reshape"),
             helper.make_node("Add", ["r", "r"], ["d"], name="add"),
             helper.make_node("Sigmoid", ["d"], ["y"], name="gate")]
    graph = helper.make_graph(nodes, "g", [x], [y], [
        numpy_helper.from_array(np.zeros((4, 4, 1, 1), np.float32), "w"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "s")])
    model = helper.make_model(graph)
    assert float_kinds(model) == {"Add": ("add",), "LeakyRelu": ("act1", "LeakyRelu(a)"),
                                  "Sigmoid": ("gate",)}
    assert float_kinds(model, ("add", "act1")) == {"LeakyRelu": ("LeakyRelu(a)",),
                                                   "Sigmoid": ("gate",)}


def test_the_kind_note_names_the_kinds_and_the_times() -> None:
    trial = KindTrial(kinds=(("LeakyRelu", 19), ("Max", 19)),
                      nodes=tuple(f"n{i}" for i in range(38)),
                      trial_ms=0.81, int8_ms=1.0)
    text = describe_trial(trial, threads=1)
    assert text.startswith("per-kind plan: 38 layer(s) kept float (LeakyRelu x19, Max x19)")
    assert "0.810 ms vs all-int8 1.000 ms" in text
    assert "(1 thread, interleaved; more than 10% faster to count)" in text


ORT_HERE = "extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\ncompute: {threads: 1}\n"


def test_the_kind_candidate_is_made_verified_and_timed(digits: DigitsModel,
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With any trial counted as faster, the int8 model is converted with its MaxPool layers
    (and whatever recovery kept) in float, verified, timed and explained."""
    monkeypatch.setattr(mixed, "TRIAL_GAIN", 1e9)
    found = _optimize(digits, tmp_path / "b", ORT_HERE)
    made, int8 = found["onnxruntime-int8-mixed"], found["onnxruntime-int8"]
    assert made["status"] in ("passed", "chosen"), made["reason"]
    assert "by the mixed plan" in made["reason"]
    note = next(n for n in made["artifact"]["notes"] if n.startswith("per-kind plan:"))
    assert "vs all-int8" in note and "MaxPool x2" in note
    nodes = {n.name: n.op_type for n in onnx.load(str(digits.onnx)).graph.node}
    added = set(made["artifact"]["kept_float"]) - set(int8["artifact"]["kept_float"])
    assert added and {nodes[n] for n in added} == {"MaxPool"}
    assert made["bench"]["p50_ms"] > 0
    assert made["artifact"]["sha256"] != int8["artifact"]["sha256"]


def test_without_a_faster_trial_the_kind_candidate_is_skipped(
        digits: DigitsModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mixed, "TRIAL_GAIN", 0.0)  # no trial can be that fast
    made = _optimize(digits, tmp_path / "b", ORT_HERE)["onnxruntime-int8-mixed"]
    assert made["status"] == "skipped", made["reason"]
    assert "in float the model took" in made["reason"] and "MaxPool x2" in made["reason"]
    assert "not 10% faster, the margin it needs to be chosen over all-int8" in made["reason"]
