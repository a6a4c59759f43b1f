"""bench/peers.py judges every row per output with edge's own verify: outputs matched by name,
shape or NHWC transpose; a broken or missing output makes a row drop out or lose fidelity."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from peerbench.judging import judge_rows  # noqa: E402
from peerbench.matching import MatchError, match  # noqa: E402
from peerbench.runners import Row, ort_run  # noqa: E402

METRICS = ["scores=classes", "features=values"]


def _two_outputs(path: Path) -> Path:
    """x [N, 8] -> scores [N, 4] (MatMul) and features [N, 2, 1, 4] (x * 2, reshaped)."""
    weight = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"]),
             helper.make_node("Mul", ["x", "two"], ["doubled"]),
             helper.make_node("Reshape", ["doubled", "shape"], ["features"])]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 2, 1, 4])],
        [numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         numpy_helper.from_array(np.array([-1, 2, 1, 4], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _row(name: str, base: Row, change, names: list[str]) -> Row:  # type: ignore[no-untyped-def]
    """A peer row whose outputs are the baseline's, changed by ``change``."""
    assert base.run is not None
    run = base.run
    return Row(name, "peer", "test", "fp32", "-", run=lambda x: change(run(x)), names=names)


@pytest.fixture
def judged(tmp_path: Path) -> dict[str, Row]:
    path = _two_outputs(tmp_path / "two.onnx")
    np.save(tmp_path / "eval.npy", np.random.default_rng(1).standard_normal((40, 8), np.float32))
    loaded = ort_run(str(path), 1)
    base = Row("fp32", "baseline", "onnxruntime", "fp32", "-", run=loaded.run,
               names=loaded.names)
    noise = np.random.default_rng(2)
    rows = [base,
            _row("reordered", base, lambda o: [o[1], o[0]], ["features:0", "scores:0"]),
            _row("nhwc", base, lambda o: [o[0], o[1].transpose(0, 2, 3, 1)], ["a", "b"]),
            _row("broken", base, lambda o: [o[0], o[1] + noise.standard_normal(o[1].shape)],
                 loaded.names),
            _row("missing", base, lambda o: [o[0]], ["scores"])]
    judge_rows(rows, str(tmp_path / "eval.npy"), METRICS)
    return {r.name: r for r in rows}


def test_matched_rows_keep_and_say_how(judged: dict[str, Row]) -> None:
    for name in ("fp32", "reordered", "nhwc"):
        assert judged[name].fidelity["keeps"], judged[name].fidelity["failure"]
    assert [o["kind"] for o in judged["fp32"].fidelity["outputs"]] == ["classes", "values"]
    assert judged["reordered"].fidelity["matched"][0] == "scores <- scores:0 (by name)"
    assert "NHWC transpose" in judged["nhwc"].fidelity["matched"][1]


def test_a_broken_output_loses_fidelity(judged: dict[str, Row]) -> None:
    fid = judged["broken"].fidelity
    assert fid["keeps"] is False
    assert fid["failure"].startswith("output 'features'")
    assert [o["passed"] for o in fid["outputs"]] == [True, False]


def test_an_unmatched_row_drops_out_saying_why(judged: dict[str, Row]) -> None:
    row = judged["missing"]
    assert row.run is None and not row.fidelity
    assert row.error is not None and "'features' [1, 2, 1, 4]" in row.error


def test_same_shaped_outputs_go_by_name_before_order() -> None:
    a, b = np.zeros((1, 3)), np.ones((1, 3))
    picks = match(["p", "q"], [a, b], ["q", "p"], [b, a])
    assert [p.index for p in picks] == [1, 0]
    with pytest.raises(MatchError, match="no unused output"):
        match(["p", "q"], [a, np.zeros((1, 5))], ["x", "y"], [a, a])


def test_labelled_digits_judged_by_accuracy(tmp_path: Path) -> None:
    """A real model with labels: its one output as classes with accuracy; a row whose scores
    are rolled by one class loses fidelity on accuracy."""
    samples = ROOT / "edge" / "samples"
    with np.load(samples / "digits_eval.npz") as held:
        np.savez(tmp_path / "eval.npz", input=held["input"][:60], labels=held["labels"][:60])
    loaded = ort_run(str(samples / "digits.onnx"), 1)
    base = Row("fp32", "baseline", "onnxruntime", "fp32", "-", run=loaded.run,
               names=loaded.names)
    rolled = _row("rolled", base, lambda o: [np.roll(o[0], 1, axis=-1)], loaded.names)
    judge_rows([base, rolled], str(tmp_path / "eval.npz"), [])
    assert base.fidelity["keeps"] and base.fidelity["outputs"][0]["kind"] == "classes"
    assert base.fidelity["accuracy"] == base.fidelity["reference_accuracy"] > 0.5
    assert not rolled.fidelity["keeps"] and "accuracy" in rolled.fidelity["failure"]
    assert rolled.fidelity["keeps_old_rule"] is False
