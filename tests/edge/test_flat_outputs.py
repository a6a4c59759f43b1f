"""An original whose output barely varies over the data (wrong preprocessing, an untrained
model) is said to, and not judged on its noise (issue 42): before, a random-init classifier got
"top-1 differs on 13 of 13 rows" and "largest 13.5 of spread" from differences of 1e-8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from edge.core.values import Dataset
from edge.core.verify import Thresholds, judge, measure
from tests.support.cli import run_cli


def _flat(rng: np.random.Generator, count: int = 13) -> list[np.ndarray]:
    """[1, 10] logits: one bias, the input's part 1e-8 of it."""
    bias = rng.normal(size=(1, 10))
    return [bias + 1e-8 * rng.normal(size=(1, 10)) for _ in range(count)]


def test_an_output_that_barely_varies_is_values_scaled_by_its_values() -> None:
    rng = np.random.default_rng(0)
    ref = _flat(rng)
    got = [r + 1e-8 * rng.normal(size=r.shape) for r in ref]  # round-off sized
    labels = np.array([int(r.argmax()) for r in ref])
    data = Dataset(feeds=({},) * len(ref), labels=labels)
    fid = measure([[r] for r in ref], [[g] for g in got], data, Thresholds(), ["logits"])
    (out,) = fid.outputs
    assert out.kind == "values" and "barely varies over these 13 samples" in out.why
    assert judge(fid, Thresholds()) is None  # noise is not a changed top-1
    assert out.rel_rms is not None and out.rel_rms < 1e-6


def _model(path: Path) -> None:
    """x [1, 8] -> MatMul(W * 1e-9) + B: logits that hardly depend on the input."""
    rng = np.random.default_rng(1)
    weight = (rng.normal(size=(8, 10)) * 1e-9).astype(np.float32)
    bias = rng.normal(size=(10,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"]),
             helper.make_node("Add", ["z", "b"], ["logits"])]
    graph = helper.make_graph(
        nodes, "flat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, bias.shape, bias)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), str(path))


def test_optimize_says_once_that_the_original_barely_varies(tmp_path: Path) -> None:
    _model(tmp_path / "flat.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(2).normal(size=(30, 1, 8))
            .astype(np.float32))
    (tmp_path / "ort.yaml").write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    result = run_cli("optimize", str(tmp_path / "flat.onnx"), "--profile",
                     str(tmp_path / "ort.yaml"), "--calib", str(tmp_path / "x.npy"), "-o",
                     str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    warned = [w for w in result.json()["warnings"] if "barely varies" in w]
    assert len(warned) == 1 and "wrong preprocessing, or an untrained model?" in warned[0]
    kinds = {o["kind"] for c in result.json()["candidates"] if c.get("fidelity")
             for o in c["fidelity"]["outputs"]}
    assert kinds == {"values"}
