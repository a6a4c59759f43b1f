"""Pinned dims and If branches built for other shapes (silero-vad 5, issue 12).

silero-vad 5 branches on its 0-d int64 ``sr`` input: a 16 kHz network and an 8 kHz one, each
ending in an LSTM. Pinning ``input`` to 512 samples (the 16 kHz chunk) let ONNX Runtime infer
static shapes through the 8 kHz branch, which hands its LSTM a rank-4 tensor at that length, and
ONNX Runtime refused the whole reference ("First input tensor must have rank 3"): ``edge
optimize`` died with exit 4. The model here is that shape in miniature.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.errors import UsageError
from edge.core.intake import to_reference
from edge.core.intake.branches import NOTES_KEY
from tests.support.cli import run_cli

HIGH, LOW = 16000, 8000


def _const(name: str, value: object) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(value)))


def _out(name: str, rank: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * rank)


def _lstm(tag: str, seq: str, size: int, hidden: int = 3) -> list[onnx.NodeProto]:
    """An LSTM over ``seq`` [steps, 1, size], its last hidden state squeezed to [1, hidden]."""
    rng = np.random.default_rng(size)
    weights = [(rng.standard_normal((1, 4 * hidden, n)) * 0.5).astype(np.float32)
               for n in (size, hidden)]
    return [_const(f"{tag}_W", weights[0]), _const(f"{tag}_R", weights[1]),
            helper.make_node("LSTM", [seq, f"{tag}_W", f"{tag}_R"], [f"{tag}_Y", f"{tag}_h"],
                             name=f"{tag}_lstm", hidden_size=hidden),
            _const(f"{tag}_axis", [0]),
            helper.make_node("Squeeze", [f"{tag}_h", f"{tag}_axis"], [f"{tag}_out"])]


def _branch(tag: str, size: int) -> onnx.GraphProto:
    """A network built for x [1, size]: one frame of ``size`` -> [1, 1, size], more frames ->
    [1, 1, F, size] (like silero's "squeeze when one frame"), then the LSTM, which only takes
    the one-frame rank-3 tensor: at another length the branch cannot run."""
    one = helper.make_graph([_const(f"{tag}_one", [1, 1, size]),
                             helper.make_node("Reshape", ["x", f"{tag}_one"], [f"{tag}_a"])],
                            f"{tag}_one_frame", [], [_out(f"{tag}_a", 3)])
    many = helper.make_graph([_const(f"{tag}_many", [1, 1, -1, size]),
                              helper.make_node("Reshape", ["x", f"{tag}_many"], [f"{tag}_b"])],
                             f"{tag}_frames", [], [_out(f"{tag}_b", 4)])
    nodes = [helper.make_node("Shape", ["x"], [f"{tag}_dims"]), _const(f"{tag}_last", -1),
             helper.make_node("Gather", [f"{tag}_dims", f"{tag}_last"], [f"{tag}_n"]),
             _const(f"{tag}_size", size),
             helper.make_node("Equal", [f"{tag}_n", f"{tag}_size"], [f"{tag}_single"]),
             helper.make_node("If", [f"{tag}_single"], [f"{tag}_seq"], name=f"{tag}_frames_if",
                              then_branch=one, else_branch=many),
             *_lstm(tag, f"{tag}_seq", size)]
    return helper.make_graph(nodes, tag, [], [_out(f"{tag}_out", 2)])


def _vad(path: Path, high: int = 4, low: int = 2) -> Path:
    """x [?, ?] float and sr 0-d int64 -> y: the ``high``-sample network when sr == 16000,
    else the ``low``-sample one."""
    nodes = [_const("rate", np.int64(HIGH)),
             helper.make_node("Equal", ["sr", "rate"], ["is_high"]),
             helper.make_node("If", ["is_high"], ["y"], name="rate_if",
                              then_branch=_branch("high", high), else_branch=_branch("low", low))]
    graph = helper.make_graph(
        nodes, "vad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]),
                       helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [_out("y", 2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def _run(path: Path, x: np.ndarray, sr: int) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "sr": np.array(sr, np.int64)})[0]


def _x(n: int) -> np.ndarray:
    return np.linspace(-1, 1, n, dtype=np.float32)[None]


def test_the_source_runs_each_branch_at_its_own_length_only(tmp_path: Path) -> None:
    source = _vad(tmp_path / "vad.onnx")
    assert _run(source, _x(4), HIGH).shape == (1, 3)
    assert _run(source, _x(2), LOW).shape == (1, 3)
    with pytest.raises(Exception, match="LSTM"):
        _run(source, _x(4), LOW)


def test_pinning_keeps_the_branch_that_can_run_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = _vad(tmp_path / "vad.onnx")
    with caplog.at_level(logging.WARNING, logger="edge"):
        ref = to_reference(source, tmp_path / "work", shapes={"x": (1, 4)})
    np.testing.assert_allclose(_run(ref, _x(4), HIGH), _run(source, _x(4), HIGH), rtol=1e-6)
    # sr = 8000 failed in the source at 4 samples; the reference runs the kept branch
    np.testing.assert_allclose(_run(ref, _x(4), LOW), _run(source, _x(4), HIGH), rtol=1e-6)
    model = onnx.load(str(ref))
    assert [i.name for i in model.graph.input] == ["x", "sr"]
    assert "rate_if" not in {n.name for n in model.graph.node}
    assert {n.name for n in model.graph.node if n.op_type == "If"} == {"high_frames_if"}
    note = ("rate_if: its else branch cannot run at the pinned input dims (onnxruntime refuses "
            "the model with it), so only its then branch is kept: where its condition is_high "
            "is false the reference runs the then branch too")
    assert {p.key: p.value for p in model.metadata_props}[NOTES_KEY] == note
    assert note in caplog.messages


def test_a_cached_reference_says_again_which_branch_it_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = _vad(tmp_path / "vad.onnx")
    first = to_reference(source, tmp_path / "work", shapes={"x": (1, 4)})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="edge"):
        assert to_reference(source, tmp_path / "work", shapes={"x": (1, 4)}) == first
    assert any(m.startswith("rate_if: its else branch cannot run") for m in caplog.messages)


def test_the_other_length_keeps_the_other_branch(tmp_path: Path) -> None:
    source = _vad(tmp_path / "vad.onnx")
    ref = to_reference(source, tmp_path / "work", shapes={"x": (1, 2)})
    np.testing.assert_allclose(_run(ref, _x(2), HIGH), _run(source, _x(2), LOW), rtol=1e-6)
    assert "only its else branch is kept" in str(onnx.load(str(ref)).metadata_props)


def test_without_pins_both_branches_stay(tmp_path: Path) -> None:
    source = _vad(tmp_path / "vad.onnx")
    ref = to_reference(source, tmp_path / "work")  # its Constant nodes become initializers
    assert ref != source
    assert [n.name for n in onnx.load(str(ref)).graph.node if n.op_type == "If"] == ["rate_if"]
    assert _run(ref, _x(2), LOW).shape == _run(ref, _x(4), HIGH).shape == (1, 3)


def test_no_branch_that_can_run_is_a_one_line_usage_error(tmp_path: Path) -> None:
    source = _vad(tmp_path / "vad.onnx", high=2, low=2)  # neither branch takes 4 samples
    with pytest.raises(UsageError) as caught:
        to_reference(source, tmp_path / "work", shapes={"x": (1, 4)})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{source}: onnxruntime cannot load the reference ONNX at the "
                              "pinned input dims (")
    assert "rank 3" in message


def test_optimize_a_vad_with_an_if_on_its_sample_rate(tmp_path: Path) -> None:
    source = _vad(tmp_path / "vad.onnx")
    rng = np.random.default_rng(1)
    for name, n in (("calib", 16), ("eval", 24)):
        np.savez(tmp_path / f"{name}.npz", x=rng.standard_normal((n, 4)).astype(np.float32),
                 sr=np.full(n, HIGH, np.int64))
    profile = tmp_path / "x86-64-ort.yaml"
    profile.write_text("extends: x86-64\nid: x86-64-ort\nruntimes: [onnxruntime]\n")
    result = run_cli("optimize", str(source), "--profile", str(profile), "--calib",
                     str(tmp_path / "calib.npz"), "--eval", str(tmp_path / "eval.npz"),
                     "-o", str(tmp_path / "bundle"), "--metric", "y=values", "--json")
    assert result.status == 0, result.stderr[-800:]
    assert "rate_if: its else branch cannot run at the pinned input dims" in result.stderr
    report = result.json()
    assert [s["shape"] for s in report["source"]["inputs"]] == [[1, 4], []]
    judged = [c for c in report["candidates"] if c["status"] in ("passed", "chosen")]
    assert judged and all(c["fidelity"]["outputs"][0]["why"] == "--metric y=values"
                          for c in judged)
    own = next(c for c in report["candidates"] if c["candidate"]["target"] == "original")
    assert own["status"] in ("passed", "chosen"), own["reason"]
    assert any(n.startswith("rate_if: its else branch") for n in own["artifact"]["notes"])
