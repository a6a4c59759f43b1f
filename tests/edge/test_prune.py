"""Structured pruning with distillation (``edge optimize --prune``): the plan adds pruned twins,
the ONNX reader reproduces the reference, only channels that other layers read are pruned,
MACs and sparsity are what the pruned model's own graph says, and the pruned candidates pass or
fail the same fidelity gates as any other (a too-aggressive prune is rejected with the reason).
Speed is not asserted here (bench/prune.py measures it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.capabilities import Capabilities
from edge.core.model import inspect_model
from edge.core.plan import make_plan, plan_pruned
from edge.core.profile import load_profile
from edge.core.values import Bundle, ModelInfo, TensorSpec
from edge.core.verify import Thresholds
from tests.support.cli import run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("torch_pruning")

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
DIGITS = SAMPLES / "digits.onnx"
ORT = {"onnxruntime": (Capabilities(runtime="onnxruntime", precisions=("fp32", "fp16", "int8",
                                                                        "int8-dynamic"),
                                    suffix=".onnx"), None)}


def _model(ops: dict[str, int] | None = None, path: str = "m.onnx") -> ModelInfo:
    spec = TensorSpec(name="x", shape=(1, 3), dtype="float32")
    return ModelInfo(path=path, sha256="0", size_bytes=1, opset=17, inputs=(spec,),
                     outputs=(spec,), params=1000, macs=0, ops=ops or {})


def _pruned_plan(model: ModelInfo) -> dict[str, object]:
    plan = make_plan(load_profile("x86-64"), model, ORT, "onnx")
    return {p.candidate.id: p for p in plan_pruned(plan, model, 0.5)}


# ---------------------------------------------------------------- the plan (pure)


def test_the_plan_adds_a_pruned_twin_of_each_kept_int8_and_fp32_candidate() -> None:
    plan = _pruned_plan(_model())
    pruned = [i for i in plan if i.endswith("-pruned")]
    assert pruned == ["onnxruntime-int8-pruned", "onnxruntime-fp32-pruned"]
    assert all(plan[i].keep and "50% of the channels pruned" in plan[i].reason for i in pruned)
    assert plan["onnxruntime-int8-pruned"].candidate.variant == "pruned"


def test_a_quantized_or_tflite_model_or_no_torch_pruning_means_no_prune_and_says_why() -> None:
    quantized = _pruned_plan(_model({"QLinearConv": 1}))
    assert "onnxruntime-int8-pruned" not in quantized  # int8 itself is not planned
    assert not quantized["onnxruntime-fp32-pruned"].keep
    assert "already int8" in quantized["onnxruntime-fp32-pruned"].reason
    plan = make_plan(load_profile("x86-64"), _model(), ORT, "onnx")
    absent = {p.candidate.id: p for p in plan_pruned(plan, _model(), 0.5, "torch_pruning not "
                                                     "installed (pip install 'edge[prune]')")}
    assert not absent["onnxruntime-int8-pruned"].keep
    assert "edge[prune]" in absent["onnxruntime-int8-pruned"].reason
    tflite = _pruned_plan(_model(path="m.tflite"))
    assert not tflite["onnxruntime-int8-pruned"].keep
    assert "ONNX reference" in tflite["onnxruntime-int8-pruned"].reason


def test_a_pruned_candidate_round_trips_without_changing_older_manifests() -> None:
    from edge.core.values import Candidate

    assert "variant" not in Candidate(target="onnxruntime", precision="int8").to_json()
    twin = Candidate(target="onnxruntime", precision="int8", variant="pruned")
    assert Candidate.from_json(twin.to_json()) == twin and twin.id == "onnxruntime-int8-pruned"


# ---------------------------------------------------------------- reading and pruning


def test_the_reader_reproduces_the_reference_on_a_batch() -> None:
    import onnxruntime as ort

    from edge.core.torch_graph import to_torch

    module = to_torch(onnx.load(str(DIGITS))).eval()
    x = np.load(SAMPLES / "digits_calib.npy")[:4].astype(np.float32)
    session = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"])
    want = np.concatenate([session.run(None, {"input": s[None]})[0] for s in x])
    with torch.no_grad():
        got = module(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_only_channels_another_layer_reads_are_pruned() -> None:
    from edge.core.torch_graph import to_torch
    from edge.flows.prune import prunable_layers

    digits = to_torch(onnx.load(str(DIGITS)))
    kinds = {n.layer: n.op for n in digits.nodes if n.layer}
    # 3 convolutions and the hidden Gemm; the output Gemm (the logits) stays whole
    assert sorted(kinds[k] for k in prunable_layers(digits)) == ["Conv", "Conv", "Conv", "Gemm"]
    fixed = to_torch(_conv_then_transpose())
    names = {n.layer: n.outputs[0] for n in fixed.nodes if n.layer}
    assert {names[k] for k in prunable_layers(fixed)} == {"a"}  # b feeds a transpose


def _conv_then_transpose() -> onnx.ModelProto:
    """x -> Conv a -> Relu -> Conv b -> Transpose -> y: b's channels are fixed by the layout."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("wa", (8, 3, 3, 3)), ("wb", (8, 8, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Conv", ["r", "wb"], ["b"]),
             helper.make_node("Transpose", ["b"], ["y"], perm=[0, 2, 3, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_unknown_op_is_refused_by_name() -> None:
    from edge.core.torch_graph import PruneError, to_torch

    model = _conv_then_transpose()
    model.graph.node[1].op_type = "Celu"
    with pytest.raises(PruneError, match="op Celu"):
        to_torch(model)


def _saved(tmp_path: Path, nodes: list, inits: list, x: list[int], y: list[int]) -> tuple:
    """The graph as an ONNX file, its ModelInfo and synthetic samples for it."""
    from edge.core.data import synthetic_dataset

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = inspect_model(path)
    with pytest.warns(UserWarning, match="synthetic"):
        return model, synthetic_dataset(model)


def test_a_pad_that_adds_channels_is_refused_by_name(tmp_path: Path) -> None:
    """MediaPipe's blocks widen a residual with a channel Pad: torch-pruning cannot follow."""
    from edge.core.torch_graph import PruneError
    from edge.flows.prune import PruneOptions, prune_model

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("wa", (8, 3, 3, 3)), ("wb", (4, 16, 1, 1)))]
    inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 8, 0, 0], np.int64), "p"))
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["a", "p"], ["wide"], name="widen"),
             helper.make_node("Conv", ["wide", "wb"], ["y"])]
    model, samples = _saved(tmp_path, nodes, inits, [1, 3, 8, 8], [1, 4, 8, 8])
    with pytest.raises(PruneError, match="Pad wide adds channels"):
        prune_model(model, samples, PruneOptions(budget_s=0))


def test_asymmetric_same_padding_keeps_the_macs_countable(tmp_path: Path) -> None:
    """TensorFlow's SAME padding at stride 2 pads one side more: the reader pads explicitly, and
    the exporter writes F.pad's pads as a ConstantOfShape/Concat chain that hid every later shape
    (a pruned MediaPipe hand model counted 0.6M MACs, not 87.5M). The export is folded: the
    pruned model's MACs are its convolutions' own."""
    from edge.flows.prune import PruneOptions, prune_model

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("wa", (16, 3, 3, 3)), ("wb", (8, 16, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], strides=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "wb"], ["y"], pads=[1, 1, 1, 1])]
    model, samples = _saved(tmp_path, nodes, inits, [1, 3, 16, 16], [1, 8, 8, 8])
    assert model.macs == 16 * 3 * 9 * 64 + 8 * 16 * 9 * 64
    pruned = prune_model(model, samples, PruneOptions(ratio=0.5, budget_s=0))
    assert pruned.pruning.channels_after == 8 + 8  # half of the first conv's 16 (y stays 8)
    assert pruned.model.macs == 8 * 3 * 9 * 64 + 8 * 8 * 9 * 64 == pruned.pruning.macs_after
    assert "ConstantOfShape" not in pruned.model.ops


# ---------------------------------------------------------------- through edge optimize


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "ort-only.yaml"
    path.write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    return path


def _optimize(profile: Path, out: Path, ratio: float, budget_s: float,
              steps: int | None) -> Bundle:
    from edge.flows.optimize import OptimizeOptions, optimize
    from edge.flows.prune import PruneOptions

    options = OptimizeOptions(calib=SAMPLES / "digits_calib.npy",
                              eval=SAMPLES / "digits_eval.npz", measure=False,
                              limits=Thresholds(max_drop=1.0),
                              # every candidate converted: these tests judge the pruned twins,
                              # which rank after the plain ones in the order
                              exhaustive=True,
                              prune=PruneOptions(ratio=ratio, budget_s=budget_s,
                                                 max_steps=steps))
    return optimize(DIGITS, load_profile(profile), out, options)


@pytest.fixture(scope="module")
def pruned(profile: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, Path]:
    """Half the channels pruned, 600 distillation steps (a step cap: the same every run)."""
    out = tmp_path_factory.mktemp("pruned") / "digits.bundle"
    return _optimize(profile, out, 0.5, 600.0, 600), out


def test_pruned_candidates_keep_fidelity_and_show_macs_and_sparsity(
        pruned: tuple[Bundle, Path]) -> None:
    bundle, out = pruned
    results = {r.candidate.id: r for r in bundle.candidates}
    for cid in ("onnxruntime-int8-pruned", "onnxruntime-fp32-pruned"):
        result = results[cid]
        assert result.status in ("passed", "chosen"), result.reason
        fid, p = result.fidelity, result.pruning
        assert fid is not None and p is not None
        assert fid.reference_accuracy is not None and fid.accuracy is not None
        assert fid.reference_accuracy - fid.accuracy <= 0.01 + 1e-9  # the gate: --max-drop 1
        assert "sparsity" in result.reason and "keeps fidelity" in result.reason
        assert p.distill_steps == 600 and p.distill_samples == 100  # all of --calib
        assert p.loss_after < p.loss_before / 10
    p = results["onnxruntime-fp32-pruned"].pruning
    artifact = results["onnxruntime-fp32-pruned"].artifact
    assert p is not None and artifact is not None
    counted = inspect_model(out / artifact.file)  # the pruned model's own graph
    assert (counted.params, counted.macs) == (p.params_after, p.macs_after)
    assert (p.params_before, p.macs_before) == (bundle.source.params, bundle.source.macs)
    assert p.macs_after < 0.35 * p.macs_before  # conv MACs scale with in x out channels
    assert p.sparsity == round(1 - p.params_after / p.params_before, 4) and p.sparsity > 0.5
    assert p.channels_after < p.channels_before and p.layers_whole == 1


def test_the_manifest_and_report_carry_the_pruning(pruned: tuple[Bundle, Path]) -> None:
    from edge.core.documents import read_json
    from edge.flows.report import render_bundle_report

    bundle, out = pruned
    raw = json.loads((out / "manifest.json").read_text())
    entry = next(c for c in raw["candidates"] if c["candidate"].get("variant") == "pruned")
    assert {"sparsity", "macs_before", "macs_after", "params_after", "distill_seconds",
            "distill_samples", "sha256"} <= set(entry["pruning"])
    assert "pruning" not in next(c for c in raw["candidates"] if c["candidate"]["target"]
                                 == "original")
    assert read_json("manifest", out / "manifest.json") == bundle
    html = render_bundle_report(out)
    assert "Pruned candidates" in html and "onnxruntime-int8-pruned" in html


def test_a_too_aggressive_prune_is_rejected_with_the_reason(
        profile: Path, tmp_path: Path) -> None:
    """90% of the channels and no distillation: the pruned model loses the digits."""
    bundle = _optimize(profile, tmp_path / "b", 0.9, 0.0, None)
    results = {r.candidate.id: r for r in bundle.candidates}
    for cid in ("onnxruntime-int8-pruned", "onnxruntime-fp32-pruned"):
        result = results[cid]
        assert result.status == "rejected"
        assert "accuracy" in result.reason and "below fp32" in result.reason
        assert "--max-drop 1.0" in result.reason and ", 0 steps on 100 samples" in result.reason
    assert results["onnxruntime-fp32"].status in ("passed", "chosen")
    assert bundle.chosen is not None and not bundle.chosen.endswith("-pruned")


def test_cli_prune_flags_and_dry_run(profile: Path) -> None:
    run = run_cli("optimize", "sample:digits", "--profile", str(profile), "--prune",
                  "--dry-run", "--json")
    assert run.status == 0, run.stderr
    plan = {p["candidate"]: p for p in run.json()["plan"]}
    assert plan["onnxruntime-int8-pruned"]["keep"]
    assert "50% of the channels" in plan["onnxruntime-int8-pruned"]["reason"]
    run = run_cli("optimize", "sample:digits", "--profile", str(profile), "--prune", "0.3",
                  "--dry-run", "--json")
    assert "30% of the channels" in {p["candidate"]: p for p in run.json()["plan"]}[
        "onnxruntime-fp32-pruned"]["reason"]
    bad = run_cli("optimize", "sample:digits", "--profile", str(profile), "--prune", "1.5",
                  "--dry-run")
    assert bad.status == 2 and "--prune" in bad.stderr


def test_a_pruned_twin_is_chosen_only_when_measurably_faster() -> None:
    from edge.core.select import choose_candidate
    from edge.core.values import Artifact, Candidate, CandidateResult

    def result(variant: str) -> CandidateResult:
        cand = Candidate(target="onnxruntime", precision="int8", variant=variant)
        artifact = Artifact(candidate=cand, file=f"artifacts/{cand.id}", sha256=cand.id,
                            size_bytes=1, runtime="onnxruntime")
        return CandidateResult(candidate=cand, status="passed", reason="keeps fidelity",
                               artifact=artifact)

    both = [result("pruned"), result("")]
    tied = {"onnxruntime-int8": 1.0, "onnxruntime-int8-pruned": 0.95}
    assert choose_candidate(both, ("onnxruntime",), ms=tied).id == "onnxruntime-int8"
    faster = {"onnxruntime-int8": 1.0, "onnxruntime-int8-pruned": 0.6}
    assert choose_candidate(both, ("onnxruntime",), ms=faster).id == "onnxruntime-int8-pruned"
    # unmeasured (timings off the device): the full model ranks first
    assert choose_candidate(both, ("onnxruntime",)).id == "onnxruntime-int8"
