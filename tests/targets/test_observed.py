"""What really ran, as the runtime says (issue 43): each layer's unit and precision read after
edge times a load (the agent's loaders, here as on a device), and their shares of the MACs.

Real runtimes, no mocks: an OpenVINO fp32 IR loaded plainly on a bf16-capable CPU is observed
computing bf16 (the plain compile's own precision), and f32 with the hint edge loads it with;
ONNX Runtime says CPU for every node, and int8 for a quantized convolution; a runtime that
cannot say is "not observable", and a device's malformed reply is refused, never guessed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from devices.agent import observe
from devices.deploy import as_planned
from devices.measure import Rounds, observed_of, time_files_here
from edge.core.model import inspect_model
from edge.core.values import (
    Artifact,
    BenchResult,
    Candidate,
    CandidateResult,
    Dataset,
    Observed,
    ObservedLayer,
)
from targets import get_target
from targets.openvino import agent as openvino_agent
from targets.openvino import target as openvino

ROUNDS = Rounds(rounds=1, calls=3, warmup=1)
ROOT = Path(__file__).resolve().parents[2]


def _conv_fc(path: Path) -> Path:
    """A 3x3 convolution (8 -> 16 channels, 16x16 -> 14x14) then a matrix product (3136 -> 10):
    ``CONV_MACS`` and ``FC_MACS`` multiply-accumulates."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, n)
               for n, s in (("w", (16, 8, 3, 3)), ("fc", (16 * 14 * 14, 10)))]
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "flat_shape"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "conv_fc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [*weights, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


CONV_MACS = 16 * 14 * 14 * 8 * 9
FC_MACS = 10 * 16 * 14 * 14


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _conv_fc(tmp_path_factory.mktemp("observed") / "conv_fc.onnx")


def _observed(path: Path) -> Observed:
    result = time_files_here({"m": path}, ROUNDS, threads=1)["m"]
    assert result.observed is not None
    return result.observed


def test_onnxruntime_says_cpu_for_every_node_with_the_macs_of_its_shapes(
        model_file: Path) -> None:
    seen = _observed(model_file)
    assert seen.observable and seen.runtime == "onnxruntime" and seen.layers
    assert {layer.unit for layer in seen.layers} == {"CPU"}
    assert {layer.kernel for layer in seen.layers} == {"CPUExecutionProvider"}
    macs = {layer.op: layer.macs for layer in seen.layers}
    assert macs.get("Conv", macs.get("FusedConv")) == CONV_MACS and macs["MatMul"] == FC_MACS
    assert seen.by_macs and seen.share_of(unit="CPU", precision="f32") == pytest.approx(1.0)
    assert seen.line().startswith("ran: CPU f32 100% of MACs")


def test_onnxruntime_int8_is_observed_computing_int8(model_file: Path, tmp_path: Path) -> None:
    model = inspect_model(model_file)
    feeds = tuple({"x": s} for s in np.random.default_rng(1).standard_normal(
        (8, 1, 8, 16, 16)).astype(np.float32))
    path, _ = get_target("onnxruntime").convert(model, "int8", calib=Dataset(feeds=feeds),
                                                workdir=tmp_path)
    seen = _observed(path)
    conv = [layer for layer in seen.layers if "Conv" in layer.op]
    assert conv and all(layer.precision in ("i8", "u8") for layer in conv), conv
    assert seen.share_of(precision="f32") < 0.5  # the MACs ran in int8


def test_an_openvino_ir_loaded_plainly_computes_what_the_cpu_prefers(model_file: Path,
                                                                     tmp_path: Path) -> None:
    """On this AVX512-BF16 host a plain compile of an fp32 IR (as OpenVINO's converter writes
    it) computes bf16, with the f32 hint f32: both observed per layer from the runtime graph.
    edge's own fp32 IR marks its nodes precise, so even a plain load computes f32 (observed,
    while the compiled model's INFERENCE_PRECISION_HINT property still says the CPU's)."""
    import openvino as ov

    core = ov.Core()
    ir = tmp_path / "plain.xml"
    ov.save_model(core.read_model(str(model_file)), str(ir), compress_to_fp16=False)
    plain = openvino_agent.openvino_observed(core.compile_model(str(ir), "CPU"))
    hinted = openvino_agent.openvino_observed(
        core.compile_model(str(ir), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}))
    conv = {rec["op"]: rec for rec in plain["layers"]}["Convolution"]
    assert conv["precision"] == openvino.plain_precision() and conv["unit"] == "CPU"
    assert conv["macs"] == CONV_MACS
    assert {rec["precision"] for rec in hinted["layers"] if rec["macs"]} == {"f32"}
    edges, _ = get_target("openvino").convert(inspect_model(model_file), "fp32",
                                              calib=Dataset(feeds=()), workdir=tmp_path / "w")
    marked = openvino_agent.openvino_observed(core.compile_model(str(edges), "CPU"))
    assert {rec["precision"] for rec in marked["layers"] if rec["macs"]} == {"f32"}
    loaded = _observed(edges)  # as the agent loads it, with the hint the IR records
    assert loaded.share_of(precision="f32") == pytest.approx(1.0)
    assert "runtime graph" in loaded.method and not loaded.made_for


def test_a_runtime_that_cannot_say_is_not_observable() -> None:
    seen = observe.observed(lambda: None, "ncnn")
    assert "why_not" in seen and not seen.get("layers")
    value = observed_of(seen, "ncnn")
    assert value is not None and not value.observable
    assert value.line() == "ran: not observable (ncnn does not say which unit or precision " \
                           "ran each layer)"


def test_a_runtime_that_fails_to_say_is_not_observable() -> None:
    def broken() -> dict:
        raise RuntimeError("no runtime graph\nsecond line")

    seen = observe.observed(observe.Loaded(lambda: None, broken), "openvino")
    assert seen["why_not"] == "openvino could not say: no runtime graph"


@pytest.mark.parametrize("reply", [
    {"layers": [{"name": "a", "op": "Conv", "unit": "CPU", "precision": "f32", "macs": -5}]},
    {"layers": [{"name": "a", "op": "Conv", "unit": "CPU", "precision": "x" * 5000}]},
    {"layers": "everything"},
    {"layers": [{"name": "a", "op": "Conv", "unit": "CPU", "precision": "f32",
                 "macs": float("nan")}]},
])
def test_a_devices_malformed_reply_is_refused_not_guessed(reply: dict) -> None:
    value = observed_of(reply, "onnxruntime")
    assert value is not None and not value.observable and not value.layers
    assert value.why_not.startswith("the agent's reply was malformed")


def test_shares_are_of_macs_and_fall_back_to_layers() -> None:
    def layer(unit: str, precision: str, macs: int) -> ObservedLayer:
        return ObservedLayer(name=f"{unit}{precision}{macs}", op="Conv", unit=unit,
                             precision=precision, macs=macs)

    mixed = Observed(runtime="tflite", layers=(layer("NPU", "i8", 900), layer("CPU", "f32", 100),
                                               layer("CPU", "f32", 0)))
    assert [(s.unit, s.precision, s.share, s.layers) for s in mixed.shares()] == [
        ("NPU", "i8", 0.9, 1), ("CPU", "f32", 0.1, 2)]
    assert mixed.line() == "ran: NPU i8 90%, CPU f32 10% of MACs (3 layers)"
    counted = Observed(runtime="tflite", layers=(layer("CPU", "f32", 0), layer("NPU", "i8", 0)))
    assert not counted.by_macs and counted.share_of(unit="NPU") == 0.5
    assert Observed.from_json(mixed.to_json()) == mixed


#: The edge.fleet collection's device-side module (it cannot import edge) asked in a child
#: Python: importing ansible patches sys.intern for the whole process, which PyTorch's
#: compiler then refuses (an executorch conversion later in the same pytest worker failed).
CHECK_PLANNED = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("edge_fleet_release", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    module.check_planned("r1", json.loads(sys.argv[2]))
    print("ok")
except module.Failed as exc:
    print("refused:", exc)
"""


def _fleet_module_says(observed: dict) -> str:
    module = ROOT / "devices" / "ansible" / "plugins" / "modules" / "release.py"
    done = subprocess.run([sys.executable, "-c", CHECK_PLANNED, str(module),
                           json.dumps(observed)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("layers", [
    (("NPU", 900), ("CPU", 100)), (("NPU", 800), ("CPU", 200)), (("CPU", 5), ("CPU", 0)),
    (("NPU", 0), ("CPU", 0), ("CPU", 0)), (("NPU", 0),)])
def test_the_fleet_module_refuses_a_fallback_by_the_same_rule(layers: tuple) -> None:
    """The ansible module (on the device, without edge) refuses before the switch exactly when
    edge's own rule says the artifact fell back."""
    seen = Observed(runtime="tflite", made_for="NPU", layers=tuple(
        ObservedLayer(name=str(k), op="CONV_2D", unit=u, precision="i8", macs=m)
        for k, (u, m) in enumerate(layers)))
    said = _fleet_module_says(seen.to_json())
    assert said.startswith("refused:") == (seen.fell_back() is not None), said
    assert said == "ok" or ("fell back" in said and "keeps its current release" in said)


def test_an_accelerator_ir_without_its_json_is_still_made_for_its_unit(tmp_path: Path) -> None:
    lone = tmp_path / "model.npu.xml"
    lone.write_text("<net/>")
    assert openvino_agent.made_for(str(lone)) == "NPU"
    assert openvino_agent.made_for(str(tmp_path / "model.xml")) == ""
    assert openvino_agent.listed_devices("GPU.0") == ["GPU"]


def test_deploy_on_device_leaves_out_a_candidate_that_fell_back() -> None:
    """edge deploy --on-device chooses among the candidates that ran as planned; one that fell
    back stays in only when none ran as planned (the deploy then refuses it) or when allowed."""
    def result(target: str) -> CandidateResult:
        return CandidateResult(candidate=Candidate(target=target, precision="int8"),
                               status="passed", reason="r")

    def bench(unit: str) -> BenchResult:
        seen = Observed(runtime="tflite", made_for="NPU", layers=(ObservedLayer(
            name="c", op="CONV_2D", unit=unit, precision="i8", macs=10),))
        return BenchResult(where="d", runtime="tflite", runs=1, warmup=0, threads=1, p50_ms=1,
                           p90_ms=1, p99_ms=1, mean_ms=1, observed=seen)

    npu, cpu = result("tflite-delegate"), result("tflite")
    installed = [(npu, "a"), (cpu, "b")]
    benches = {"tflite-delegate-int8": bench("CPU"), "tflite-int8": bench("NPU")}
    assert as_planned(installed, benches, allowed=False) == [cpu]
    assert as_planned(installed, benches, allowed=True) == [npu, cpu]
    every = {k: bench("CPU") for k in benches}
    assert as_planned(installed, every, allowed=False) == [npu, cpu]


def _ran(precisions: tuple[tuple[str, int], ...], planned: str = "",
         made_for: str = "") -> Observed:
    return Observed(runtime="openvino", made_for=made_for, planned=planned, layers=tuple(
        ObservedLayer(name=f"l{k}", op="Convolution", unit="CPU", precision=p, macs=m)
        for k, (p, m) in enumerate(precisions)))


def test_a_precision_off_the_plan_is_a_fallback() -> None:
    """int8 planned and float MACs beyond the share, or fp32 verified and bf16/f16 MACs beyond
    it, fell back (one line naming the share and the layers); fp16, int8-dynamic and a mixed
    int8 plan are not held to one precision."""
    said = _ran((("u8", 800), ("f32", 200)), planned="int8").fell_back()
    assert said is not None and said.startswith("20% of the MACs ran in f32, not in int8 as "
                                                "planned (1 layers: l1)")
    assert _ran((("u8", 950), ("f32", 50)), planned="int8").fell_back() is None
    said = _ran((("bf16", 900), ("f32", 100)), planned="fp32").fell_back()
    assert said is not None and "ran in bf16, where fp32 was verified" in said
    assert _ran((("bf16", 900),), planned="").fell_back() is None
    assert _ran((("f32", 0), ("f32", 0)), planned="int8").fell_back() is None  # no MACs said
    plans = {(p, v): Candidate(target="openvino", precision=p, variant=v).planned
             for p, v in (("int8", ""), ("int8", "mixed"), ("int8", "pruned"), ("fp32", ""),
                          ("fp16", ""), ("int8-dynamic", ""), ("bf16", ""))}
    assert plans == {("int8", ""): "int8", ("int8", "mixed"): "", ("int8", "pruned"): "int8",
                     ("fp32", ""): "fp32", ("fp16", ""): "", ("int8-dynamic", ""): "",
                     ("bf16", ""): ""}


def test_a_timing_is_held_to_its_candidates_plan() -> None:
    seen = _ran((("f32", 10),))
    bench = BenchResult(where="h", runtime="openvino", runs=1, warmup=0, threads=1, p50_ms=1,
                        p90_ms=1, p99_ms=1, mean_ms=1, observed=seen)
    assert bench.fell_back is None
    def artifact(target: str = "openvino", **more: object) -> Artifact:
        return Artifact(candidate=Candidate(target=target, precision="int8"), file="m.xml",
                        runtime="openvino", sha256="0" * 64, size_bytes=1, **more)

    held = bench.planned_for(artifact())
    assert held.observed is not None and held.observed.planned == "int8"
    assert held.fell_back is not None and "not in int8 as planned" in held.fell_back
    assert Observed.from_json(held.observed.to_json()) == held.observed
    # a recovered int8 artifact (layers kept in float) and the user's own file run as verified
    for shipped in (artifact(kept_float=("conv",)), artifact(float_ops=("Conv",)),
                    artifact("original")):
        assert bench.planned_for(shipped).fell_back is None and shipped.planned == ""
    assert bench.planned_for(None).fell_back is None


@pytest.mark.parametrize("precisions", [
    (("u8", 800), ("f32", 200)), (("u8", 950), ("f32", 50)), (("bf16", 900), ("f32", 100)),
    (("f16", 10), ("i8", 100))])
@pytest.mark.parametrize("planned", ["int8", "fp32", ""])
def test_the_fleet_module_holds_the_precision_plan_by_the_same_rule(
        precisions: tuple, planned: str) -> None:
    seen = _ran(precisions, planned=planned)
    said = _fleet_module_says(seen.to_json())
    assert said.startswith("refused:") == (seen.fell_back() is not None), said


def test_optimize_does_not_choose_a_candidate_that_fell_back_over_one_as_planned() -> None:
    """Measured within the noise of each other, the candidate that ran as planned is chosen,
    and the reason names the one that fell back; faster beyond the noise, it still wins."""
    from edge.core.select import choose_candidate

    def result(precision: str, ms: float, planned: str) -> CandidateResult:
        seen = _ran((("f32", 100),), planned=planned)
        bench = BenchResult(where="h", runtime="openvino", runs=1, warmup=0, threads=1,
                            p50_ms=ms, p90_ms=ms, p99_ms=ms, mean_ms=ms, observed=seen)
        return CandidateResult(candidate=Candidate(target="openvino", precision=precision),
                               status="passed", reason="r", bench=bench)

    int8, fp32 = result("int8", 1.0, "int8"), result("fp32", 1.05, "fp32")
    assert int8.bench is not None and int8.bench.fell_back
    choice = choose_candidate([int8, fp32], ["openvino"], ms={"openvino-int8": 1.0,
                                                              "openvino-fp32": 1.05})
    assert choice.id == "openvino-fp32", choice
    assert "openvino-int8 fell back (100% of the MACs ran in f32" in choice.reason
    faster = choose_candidate([int8, fp32], ["openvino"], ms={"openvino-int8": 0.5,
                                                              "openvino-fp32": 1.05})
    assert faster.id == "openvino-int8"


def test_edge_and_the_fleet_module_agree_at_the_boundary() -> None:
    """Exactly 10 % away is not a fallback, on both sides (integer sums, one division)."""
    seen = Observed(runtime="tflite", made_for="NPU", layers=tuple(
        ObservedLayer(name=str(k), op="CONV_2D", unit=u, precision=p, macs=m)
        for k, (u, p, m) in enumerate((("NPU", "f16", 6), ("NPU", "i8", 3), ("CPU", "f32", 1)))))
    assert seen.fell_back() is None and _fleet_module_says(seen.to_json()) == "ok"
