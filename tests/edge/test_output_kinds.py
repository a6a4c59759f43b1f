"""Output kinds from what the outputs really are (issue 29): a CTC recognizer whose graph
declares another output shape than it produces, and a multi-label sigmoid map.

The CTC model is trained here (a few seconds, CTC loss on synthetic feature frames) and
exported as PyTorch writes CTC scores, time first: [T, 1, C] raw scores, its ONNX output
declared [1, seqlen]. Judged by cosine and RMS error (what edge did before), a candidate that
changes 6 of 48 decoded strings passes; judged as ctc it is rejected.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edge.core.model import inspect_model
from edge.core.values import Candidate, Dataset, Fidelity, TensorSpec
from edge.core.verify import Thresholds, judge, measure, parse_metrics
from edge.core.verify.kinds import ctc_greedy
from tests.support.cli import run_cli
from tests.support.ctc_model import CLASSES, FEATURES, FRAMES, build


@dataclass(frozen=True)
class Recognizer:
    """The exported CTC model, its held-out inputs with their label strings, fp32 outputs."""

    path: Path
    inputs: list[np.ndarray]
    labels: list[tuple[int, ...]]
    outputs: list[np.ndarray]


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recognizer]:
    path = tmp_path_factory.mktemp("ctc") / "ctc.onnx"
    inputs, labels = build(path, 48)
    feeds = [x[None] for x in inputs]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = [session.run(None, {"x": x})[0] for x in feeds]
    yield Recognizer(path=path, inputs=feeds, labels=[tuple(int(c) for c in la) for la in labels],
                     outputs=outputs)


def _measure(ref: list[np.ndarray], got: list[np.ndarray], declared: tuple[TensorSpec, ...],
             limits: Thresholds | None = None) -> Fidelity:
    data = Dataset(feeds=({},) * len(ref))
    names = [spec.name for spec in declared]
    return measure([[r] for r in ref], [[g] for g in got], data, limits, names,
                   declared=declared)


def _strings(outputs: list[np.ndarray], blank: int = 0) -> list[tuple[int, ...]]:
    return [ctc_greedy(o[:, 0], blank) for o in outputs]


def _substituted(outputs: list[np.ndarray], every: int = 8) -> list[np.ndarray]:
    """Every ``every``-th utterance with one symbol frame read as another symbol: the smallest
    raise of one score that makes a frame's arg-max a symbol other than its own and its
    neighbours' (so the decoded string changes); one of T x C values moves."""
    changed = [o.copy() for o in outputs]
    for out in changed[::every]:
        scores = out[:, 0]
        frame, other = min(_swaps(scores), key=lambda fo: scores[fo[0]].max() - scores[fo])
        scores[frame, other] = scores[frame].max() + 0.01
    return changed


def _swaps(scores: np.ndarray) -> list[tuple[int, int]]:
    """(frame, symbol) pairs: a symbol frame and a symbol its arg-max could turn into."""
    best = np.concatenate([[0], scores.argmax(-1), [0]])
    return [(t, c) for t in range(len(scores)) if best[t + 1] != 0
            for c in range(1, CLASSES) if c not in best[t:t + 3]]


def test_the_recognizer_is_real_and_declares_another_shape(recognizer: Recognizer) -> None:
    assert _strings(recognizer.outputs) == recognizer.labels  # it reads every utterance
    (out,) = inspect_model(recognizer.path).outputs
    assert out.shape == (1, "seqlen") and recognizer.outputs[0].shape == (FRAMES, 1, CLASSES)
    assert out.last_op == "Conv"  # behind the Transpose to time first


def test_ctc_scores_time_first_are_judged_as_ctc_with_the_reason(
        recognizer: Recognizer) -> None:
    declared = inspect_model(recognizer.path).outputs
    fid = _measure(recognizer.outputs, recognizer.outputs, declared)
    (out,) = fid.outputs
    assert out.kind == "ctc" and out.passed
    assert f"observed [{FRAMES}, 1, {CLASSES}] (declared [1, seqlen])" in out.why
    assert "time first" in out.why and "class 0 (the blank) is the arg-max on" in out.why


def test_a_candidate_changing_decoded_strings_is_rejected(recognizer: Recognizer) -> None:
    declared = inspect_model(recognizer.path).outputs
    changed = _substituted(recognizer.outputs)
    differ = sum(a != b for a, b in zip(_strings(changed), recognizer.labels, strict=True))
    assert differ == 6  # 6 of 48 strings, 12.5 %
    values = Thresholds(metrics=parse_metrics(["logits=values"])[0])
    as_values = _measure(recognizer.outputs, changed, declared, values)
    assert judge(as_values, values) is None  # by cosine and RMS error it would pass
    kept = as_values.outputs[0]
    assert (kept.cosine or 0.0) >= 0.98 and (kept.rel_rms or 1.0) < 0.1
    fid = _measure(recognizer.outputs, changed, declared)
    failure = judge(fid, Thresholds())
    assert failure is not None and "6 of 48 decoded strings differ (blank 0)" in failure


def test_a_static_int8_that_keeps_the_strings_passes(recognizer: Recognizer,
                                                     tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter({"x": x} for x in recognizer.inputs[:16])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    int8 = tmp_path / "ctc-int8.onnx"
    quantize_static(str(recognizer.path), str(int8), Reader(), activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    session = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    got = [session.run(None, {"x": x})[0] for x in recognizer.inputs]
    fid = _measure(recognizer.outputs, got, inspect_model(recognizer.path).outputs)
    assert fid.outputs[0].kind == "ctc" and judge(fid, Thresholds()) is None
    assert "0 of 48 decoded strings differ" in fid.outputs[0].reason


def test_layout_is_a_metric_option() -> None:
    assert parse_metrics(["out=ctc:blank=5,layout=tnc", "seq=sequence:layout=ntc"])[0]
    with pytest.raises(Exception, match="layout='nct' is not one of ntc, tnc"):
        parse_metrics(["out=ctc:layout=nct"])


def test_optimize_reports_the_kind_and_why(recognizer: Recognizer, tmp_path: Path) -> None:
    np.save(tmp_path / "calib.npy", np.stack(recognizer.inputs))
    (tmp_path / "ort.yaml").write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    result = run_cli("optimize", str(recognizer.path), "--profile", str(tmp_path / "ort.yaml"),
                     "--calib", str(tmp_path / "calib.npy"), "-o", str(tmp_path / "out"),
                     "--json")
    assert result.status == 0, result.stderr
    bundle = result.json()
    judged = [o for c in bundle["candidates"] if c.get("fidelity")
              for o in c["fidelity"]["outputs"]]
    assert judged and all(o["kind"] == "ctc" for o in judged)
    assert "(declared [1, seqlen])" in judged[0]["why"]
    assert {Candidate(**c["candidate"]).id for c in bundle["candidates"]} >= {"onnxruntime-fp32"}


# ---------------------------------------------------------------- sigmoid maps


def _sigmoid_map(path: Path) -> None:
    """x [1, T, F] -> MatMul -> Sigmoid -> Reshape: one probability per frame and class."""
    weight = np.random.default_rng(1).normal(size=(FEATURES, CLASSES)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["p"]),
             helper.make_node("Reshape", ["p", "shape"], ["probs_map"])]
    graph = helper.make_graph(
        nodes, "sigmoid-map",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, FRAMES, FEATURES])],
        [helper.make_tensor_value_info("probs_map", TensorProto.FLOAT, [1, FRAMES, CLASSES])],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel()),
         helper.make_tensor("shape", TensorProto.INT64, [3], [1, FRAMES, CLASSES])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))


def _flipped(outputs: list[np.ndarray], share: float) -> list[np.ndarray]:
    """The decisions nearest 0.5 pushed just across it (a ``share`` of all decisions)."""
    flat = np.stack(outputs).ravel().copy()
    nearest = np.argsort(np.abs(flat - 0.5))[:int(share * flat.size)]
    flat[nearest] = np.where(flat[nearest] >= 0.5, 0.499, 0.501)
    return list(flat.reshape(np.stack(outputs).shape))


def test_a_sigmoid_map_is_judged_as_probabilities(tmp_path: Path) -> None:
    _sigmoid_map(tmp_path / "map.onnx")
    declared = inspect_model(tmp_path / "map.onnx").outputs
    assert declared[0].last_op == "Sigmoid"
    session = ort.InferenceSession(str(tmp_path / "map.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    ref = [session.run(None, {"x": rng.normal(size=(1, FRAMES, FEATURES)).astype(np.float32)})[0]
           for _ in range(20)]
    same = _measure(ref, ref, declared)
    assert same.outputs[0].kind == "probs" and "Sigmoid" in same.outputs[0].why
    flipped = _flipped(ref, 0.02)
    values = Thresholds(metrics=parse_metrics(["probs_map=values"])[0])
    assert judge(_measure(ref, flipped, declared, values), values) is None
    failure = judge(_measure(ref, flipped, declared), Thresholds())
    assert failure is not None and "probabilities cross 0.5" in failure
    assert judge(_measure(ref, _flipped(ref, 0.005), declared), Thresholds()) is None


def test_an_unknown_float_output_says_how_to_name_its_kind() -> None:
    ref = [np.random.default_rng(3).normal(size=(1, 4, 5, 5)) for _ in range(4)]
    spec = TensorSpec(name="features", shape=(1, 4, 5, 5), dtype="float32", last_op="Conv")
    (out,) = _measure(ref, ref, (spec,)).outputs
    assert out.kind == "values" and out.why.startswith("default")
    assert "--metric features=KIND" in out.why and "ctc" in out.why


def test_batch_first_rows_with_a_background_class_stay_a_sequence_and_say_how_to_ask_ctc(
        ) -> None:
    # per-anchor class scores (softmax rows, class 0 the background on most rows) are not CTC
    # frames: judged position by position, the reason points out the ctc option
    classes = np.where(np.random.default_rng(4).random((6, 1, 40)) < 0.7, 0,
                       np.random.default_rng(5).integers(1, 4, size=(6, 1, 40)))
    rows = list(np.eye(4)[classes] * 0.9 + 0.025)
    spec = TensorSpec(name="scores", shape=(1, 40, 4), dtype="float32", last_op="Softmax")
    (out,) = _measure(rows, rows, (spec,)).outputs
    assert out.kind == "sequence" and "rows are softmax" in out.why
    assert "--metric scores=ctc:blank=0" in out.why


def test_argmax_indices_are_judged_by_exact_match(tmp_path: Path) -> None:
    nodes = [helper.make_node("ArgMax", ["x"], ["ids"], axis=-1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "argmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50, 6])],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 50])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), str(tmp_path / "ids.onnx"))
    declared = inspect_model(tmp_path / "ids.onnx").outputs
    session = ort.InferenceSession(str(tmp_path / "ids.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    ref = [session.run(None, {"x": rng.normal(size=(1, 50, 6)).astype(np.float32)})[0]
           for _ in range(10)]
    assert _measure(ref, ref, declared).outputs[0].kind == "exact"
    changed = [r.copy() for r in ref]
    changed[0][0, :10] = (changed[0][0, :10] + 1) % 6  # 10 of 500 indices: 2 %
    failure = judge(_measure(ref, changed, declared), Thresholds())
    assert failure is not None and "10 of 500 values differ" in failure
