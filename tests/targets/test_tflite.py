"""TFLite target: one onnx2tf run serves fp32, fp16, full-int8 and dynamic-range int8;
runners speak ONNX layout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edge.core.cache
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo, TensorSpec
from targets.base import ConversionError
from targets.tflite import TFLiteTarget, litert_runner, onnx2tf_run
from targets.tflite import target as tflite
from tests.support.digits import DigitsModel

TARGET = TFLiteTarget()
needs_tflite = pytest.mark.skipif(TARGET.missing() is not None,
                                  reason=str(TARGET.missing()))


def _dataset(x: np.ndarray, name: str = "input") -> Dataset:
    return Dataset(feeds=tuple({name: x[i:i + 1]} for i in range(len(x))))


def _run_all(runner: Any, x: np.ndarray, name: str = "input") -> np.ndarray:
    return np.concatenate([runner.run({name: x[i:i + 1]})[0] for i in range(len(x))])


# ---------------------------------------------------------------- digits, end to end (slow)


@pytest.fixture(scope="module")
def digits(digits_model: DigitsModel) -> dict[str, Any]:
    trained = digits_model
    evaluation = np.load(trained.eval)
    return {"model": inspect_model(trained.onnx), "calib": _dataset(np.load(trained.calib)),
            "x": evaluation["input"], "y": evaluation["labels"]}


@pytest.fixture(scope="module")
def reference(digits: dict[str, Any]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(digits["model"].path, providers=["CPUExecutionProvider"])
    x = digits["x"]
    return np.concatenate([session.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


@pytest.fixture(scope="module")
def converted(digits: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("tflite-cache")
    out: dict[str, Any] = {"workdir": workdir, "seconds": {}, "artifacts": {}, "notes": {}}
    for precision in ("int8", "fp32", "fp16", "int8-dynamic"):  # one onnx2tf run serves all
        start = time.perf_counter()
        path, notes = TARGET.convert(digits["model"], precision, calib=digits["calib"],
                                     workdir=workdir)
        out["seconds"][precision] = time.perf_counter() - start
        out["artifacts"][precision], out["notes"][precision] = path, notes
    return out


@pytest.mark.slow
@needs_tflite
def test_onnx2tf_runs_once_per_workdir(digits: dict[str, Any], converted: dict[str, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    workdir = converted["workdir"]
    run = json.loads((workdir / tflite.MARKER).read_text())
    assert set(run["files"]) == set(tflite.FILES) and run["exit_code"] == 0
    assert run["files"]["int8-dynamic"] == "model_dynamic_range_quant.tflite"
    # Two calibration passes, not four: onnx2tf's int16-activation models are not converted.
    assert (workdir / tflite.LOG).read_text().count(
        "edge: int16-activation model not converted") == 2
    assert all(converted["seconds"][p] < 2 for p in ("fp32", "fp16", "int8-dynamic"))
    print(f"\nonnx2tf: {run['seconds']:.1f} s, peak {run['peak_rss_mb']:.0f} MB RSS; "
          f"first convert {converted['seconds']['int8']:.1f} s, "
          f"cached {converted['seconds']['fp32'] * 1000:.0f} ms")

    def spawn(*args: Any) -> None:
        raise AssertionError("onnx2tf ran again for a completed workdir")

    monkeypatch.setattr(onnx2tf_run, "spawn", spawn)  # a new target instance must reuse the run
    path, _ = TFLiteTarget().convert(digits["model"], "int8", calib=digits["calib"],
                                     workdir=workdir)
    assert path == converted["artifacts"]["int8"]
    assert {p.name for p in workdir.iterdir()} == {
        *tflite.FILES.values(), tflite.MARKER, tflite.LOG, ".lock"}


@pytest.mark.slow
@needs_tflite
def test_fp32_matches_onnxruntime(digits: dict[str, Any], converted: dict[str, Any],
                                  reference: np.ndarray) -> None:
    runner = TARGET.load(converted["artifacts"]["fp32"], digits["model"], threads=1)
    out = _run_all(runner, digits["x"])
    assert out.shape == reference.shape and out.dtype == np.float32
    assert float(np.abs(out - reference).max()) < 1e-4


@pytest.mark.slow
@needs_tflite
def test_int8_accuracy_within_one_point(digits: dict[str, Any], converted: dict[str, Any],
                                        reference: np.ndarray) -> None:
    runner = TARGET.load(converted["artifacts"]["int8"], digits["model"], threads=2)
    out = _run_all(runner, digits["x"])
    accuracy = float((out.argmax(1) == digits["y"]).mean())
    ref_accuracy = float((reference.argmax(1) == digits["y"]).mean())
    assert ref_accuracy > 0.9
    assert accuracy >= ref_accuracy - 0.01, (accuracy, ref_accuracy)


@pytest.mark.slow
@needs_tflite
def test_int8_is_full_integer_with_float_io(digits: dict[str, Any],
                                            converted: dict[str, Any]) -> None:
    artifact = converted["artifacts"]["int8"]
    assert artifact.name.endswith("_integer_quant.tflite")
    notes = " ".join(converted["notes"]["int8"])
    assert "model_integer_quant.tflite" in notes and "I/O float32" in notes
    interp = TARGET.load(artifact, digits["model"], threads=1).interpreter
    dtypes = [np.dtype(t["dtype"]) for t in interp.get_tensor_details()]
    io = interp.get_input_details() + interp.get_output_details()
    assert all(np.dtype(d["dtype"]) == np.float32 for d in io)
    assert dtypes.count(np.dtype(np.int8)) >= 10  # 5 weight tensors + every activation
    assert dtypes.count(np.dtype(np.float32)) == len(io)  # float only at the edges


@pytest.mark.slow
@needs_tflite
def test_int8_dynamic_accuracy_within_one_point(digits: dict[str, Any],
                                                converted: dict[str, Any],
                                                reference: np.ndarray) -> None:
    artifact = converted["artifacts"]["int8-dynamic"]
    assert artifact.name == "model_dynamic_range_quant.tflite"
    notes = " ".join(converted["notes"]["int8-dynamic"])
    assert "dynamic-range" in notes and "I/O float32" in notes
    runner = TARGET.load(artifact, digits["model"], threads=1)
    details = runner.interpreter.get_tensor_details()
    assert sum(np.dtype(t["dtype"]) == np.int8 for t in details) >= 3  # big weight tensors
    io = runner.interpreter.get_input_details() + runner.interpreter.get_output_details()
    assert all(np.dtype(d["dtype"]) == np.float32 for d in io)
    out = _run_all(runner, digits["x"])
    accuracy = float((out.argmax(1) == digits["y"]).mean())
    ref_accuracy = float((reference.argmax(1) == digits["y"]).mean())
    assert accuracy >= ref_accuracy - 0.01, (accuracy, ref_accuracy)


@pytest.mark.slow
@needs_tflite
def test_fp16_keeps_accuracy(digits: dict[str, Any], converted: dict[str, Any],
                             reference: np.ndarray) -> None:
    runner = TARGET.load(converted["artifacts"]["fp16"], digits["model"], threads=1)
    dtypes = {np.dtype(t["dtype"]) for t in runner.interpreter.get_tensor_details()}
    assert np.dtype(np.float16) in dtypes
    out = _run_all(runner, digits["x"])
    assert (out.argmax(1) == reference.argmax(1)).mean() >= 0.99


# ---------------------------------------------------------------- layouts and names (slow)


def _two_output_model(path: Path) -> Path:
    """3-channel input named 'image:0'; outputs: pooled [1, 4] then feature map [1, 4, 8, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["image:0", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["feat"]),
             helper.make_node("GlobalAveragePool", ["feat"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["pooled"])]
    return _saved(path, helper.make_graph(
        nodes, "two_outputs",
        [helper.make_tensor_value_info("image:0", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 4, 8, 8])], weights))


def _saved(path: Path, graph: Any) -> Path:
    """``graph`` as an opset-17, IR-8 ONNX file at ``path``."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.slow
@needs_tflite
def test_three_channel_two_outputs_offline(tmp_path: Path) -> None:
    """A 4-D 3-channel input makes onnx2tf fetch sample images: the workdir copy prevents it."""
    import onnxruntime as ort

    model = inspect_model(_two_output_model(tmp_path / "two.onnx"))
    x = np.random.default_rng(1).random((24, 3, 8, 8), dtype=np.float32)
    calib = _dataset(x[:16], "image:0")
    session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    for precision, tol in (("fp32", 1e-5), ("int8", 0.05)):
        path, notes = TARGET.convert(model, precision, calib=calib, workdir=tmp_path / "cache")
        assert "input 'image:0' [1, 3, 8, 8] is [1, 8, 8, 3] (channels-last) in the .tflite: " \
               "the runner transposes it (perm [0, 2, 3, 1])" in notes, notes
        assert any(n.startswith("output 'feat' [1, 4, 8, 8] is [1, 8, 8, 4]") for n in notes)
        assert not any("layout kept" in n for n in notes)
        runner = TARGET.load(path, model, threads=1)
        for i in range(16, 24):
            feed = {"image:0": x[i:i + 1]}
            got, want = runner.run(feed), session.run(None, feed)
            assert [g.shape for g in got] == [(1, 4), (1, 4, 8, 8)]
            for g, w in zip(got, want, strict=True):
                assert float(np.abs(g - w).max()) < tol, precision


def _gelu_model(path: Path) -> Path:
    """An attention block's MLP: MatMul, GELU as BERT exports it (0.5 x (1 + Erf(x / sqrt 2))),
    MatMul; input 'tokens' [1, 8, 16]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    consts = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 32)).astype(np.float32), "w1"),
              numpy_helper.from_array(rng.normal(0, 0.3, (32, 16)).astype(np.float32), "w2"),
              numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sqrt2"),
              numpy_helper.from_array(np.array(1.0, np.float32), "one"),
              numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["tokens", "w1"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["scaled"]),
             helper.make_node("Erf", ["scaled"], ["erf"]),
             helper.make_node("Add", ["erf", "one"], ["shifted"]),
             helper.make_node("Mul", ["h", "shifted"], ["gated"]),
             helper.make_node("Mul", ["gated", "half"], ["gelu"]),
             helper.make_node("MatMul", ["gelu", "w2"], ["hidden"])]
    return _saved(path, helper.make_graph(
        nodes, "gelu_mlp", [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 8, 16])], consts))


@pytest.mark.slow
@needs_tflite
def test_gelus_erf_is_written_with_builtin_ops_litert_loads(tmp_path: Path) -> None:
    """Issue 41: onnx2tf writes Erf as the Select-TF op FlexErf, which LiteRT cannot load, so
    every TFLite candidate of a transformer failed; asked with -rtpo it writes builtins."""
    import onnxruntime as ort

    model = inspect_model(_gelu_model(tmp_path / "gelu.onnx"))
    x = np.random.default_rng(1).normal(0, 1, (12, 1, 8, 16)).astype(np.float32)
    calib = Dataset(feeds=tuple({"tokens": x[i]} for i in range(8)))
    path, notes = TARGET.convert(model, "fp32", calib=calib, workdir=tmp_path / "cache")
    assert any(n.startswith("Erf written with builtin ops (onnx2tf -rtpo") for n in notes), notes
    runner = TARGET.load(path, model, threads=1)  # a Flex op would fail here
    session = ort.InferenceSession(model.path, providers=["CPUExecutionProvider"])
    for i in range(8, 12):
        got, want = runner.run({"tokens": x[i]})[0], session.run(None, {"tokens": x[i]})[0]
        assert float(np.abs(got - want).max()) < 1e-2 * float(np.abs(want).max())
    run = json.loads((tmp_path / "cache" / onnx2tf_run.MARKER).read_text())
    assert run["pseudo_ops"] == ["Erf"]
    assert onnx2tf_run.pseudo_ops(inspect_model(_two_output_model(tmp_path / "two.onnx"))) == []


# ---------------------------------------------------------------- failures


@pytest.mark.slow
@needs_tflite
def test_garbage_onnx_gives_one_line_conversion_error_remembered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    model = ModelInfo(path=str(garbage), sha256="0" * 64, size_bytes=4096, opset=17,
                      inputs=(TensorSpec(name="input", shape=(1, 1, 8, 8), dtype="float32"),),
                      outputs=(TensorSpec(name="logits", shape=(1, 10), dtype="float32"),),
                      params=0, macs=0)
    calib = _dataset(np.zeros((4, 1, 8, 8), np.float32))
    workdir = tmp_path / "cache"
    with pytest.raises(ConversionError) as caught:
        TARGET.convert(model, "fp32", calib=calib, workdir=workdir)
    message = str(caught.value)
    assert "\n" not in message and "onnx2tf failed" in message
    assert str(workdir / "onnx2tf.log") in message
    assert "DecodeError" in message or "parsing" in message.lower()
    assert not (workdir / tflite.MARKER).exists()
    assert not list(workdir.glob(".onnx2tf-*"))  # scratch removed

    def spawn(*args: Any) -> None:
        raise AssertionError("onnx2tf ran again for a remembered failure")

    with monkeypatch.context() as patch:  # every precision, every rerun: the same reason, fast
        patch.setattr(onnx2tf_run, "spawn", spawn)
        for precision in ("int8", "fp16", "int8-dynamic", "fp32"):
            with pytest.raises(ConversionError) as again:
                TFLiteTarget().convert(model, precision, calib=calib, workdir=workdir)
            assert str(again.value).startswith(message) and "\n" not in str(again.value)
    real = edge.core.cache._version
    monkeypatch.setattr(edge.core.cache, "_version",
                        lambda dist: "999.0" if dist == "onnx2tf" else real(dist))
    with pytest.raises(ConversionError) as upgraded:  # a converter upgrade tries again
        TARGET.convert(model, "fp32", calib=calib, workdir=workdir)
    assert "remembered" not in str(upgraded.value) and "onnx2tf failed" in str(upgraded.value)


@needs_tflite
def test_killed_run_leaves_no_artifact_and_is_remembered(tmp_path: Path) -> None:
    """A run cut short (here by the timeout) writes no marker, no artifact, no scratch dir;
    its failure is remembered: the other precisions fail at once with the same reason, and a
    longer timeout (another key) runs again."""

    class Impatient(TFLiteTarget):
        timeout_s = 1.0

    class LessImpatient(TFLiteTarget):
        timeout_s = 2.0

    model = inspect_model(_two_output_model(tmp_path / "two.onnx"))
    calib = _dataset(np.zeros((2, 3, 8, 8), np.float32), "image:0")
    workdir = tmp_path / "cache"
    with pytest.raises(ConversionError, match="timed out") as caught:
        Impatient().convert(model, "fp32", calib=calib, workdir=workdir)
    assert "\n" not in str(caught.value)
    assert {p.name for p in workdir.iterdir()} == {tflite.LOG, tflite.FAILED, ".lock"}
    for precision in ("fp16", "int8", "fp32"):
        start = time.perf_counter()
        with pytest.raises(ConversionError) as again:
            Impatient().convert(model, precision, calib=calib, workdir=workdir)
        assert time.perf_counter() - start < 1.0
        assert str(again.value).startswith(str(caught.value))
        assert "remembered" not in str(again.value)  # this command's own failure (issue 29)
    with pytest.raises(ConversionError, match="timed out after 2 s") as longer:
        LessImpatient().convert(model, "fp32", calib=calib, workdir=workdir)
    assert "remembered" not in str(longer.value)


def _tiny_model() -> ModelInfo:
    return ModelInfo(path="/nonexistent.onnx", sha256="a" * 64, size_bytes=0, opset=17,
                     inputs=(TensorSpec(name="x", shape=(1, 1, 8, 8), dtype="float32"),),
                     outputs=(TensorSpec(name="y", shape=(1, 10), dtype="float32"),),
                     params=0, macs=0)


def test_workdir_that_is_a_file_gives_conversion_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(ConversionError, match="cannot use workdir") as caught:
        TARGET.convert(_tiny_model(), "fp32", calib=Dataset(feeds=()), workdir=blocker)
    assert "\n" not in str(caught.value)


def test_missing_model_file_gives_conversion_error(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="does not exist"):
        TARGET.convert(_tiny_model(), "fp32", calib=Dataset(feeds=()), workdir=tmp_path)
    assert not (tmp_path / tflite.MARKER).exists()


def test_unknown_precision_gives_conversion_error(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="no int4 path"):
        TARGET.convert(_tiny_model(), "int4", calib=Dataset(feeds=()), workdir=tmp_path)
    with pytest.raises(ConversionError, match="no int8-io path"):  # a variant, not a precision
        TARGET.convert(_tiny_model(), "int8-io", calib=Dataset(feeds=()), workdir=tmp_path)


def test_interrupted_or_stale_runs_are_not_reused(tmp_path: Path) -> None:
    model = _tiny_model()
    for name in tflite.FILES.values():  # artifacts without a marker: an interrupted run
        (tmp_path / name).write_bytes(b"partial")
    assert onnx2tf_run.read_marker(tmp_path, model) is None
    marker = {"model_sha256": model.sha256, "files": {"fp32": tflite.FILES["fp32"]},
              "recipe": onnx2tf_run.RECIPE,
              "missing": {k: "no calibration samples" for k in tflite.FILES if k != "fp32"}}
    (tmp_path / tflite.MARKER).write_text(json.dumps(marker))
    assert onnx2tf_run.read_marker(tmp_path, model) == marker
    (tmp_path / tflite.FILES["fp32"]).unlink()  # a listed file is gone
    assert onnx2tf_run.read_marker(tmp_path, model) is None
    (tmp_path / tflite.MARKER).write_text(json.dumps({**marker, "model_sha256": "b" * 64}))
    assert onnx2tf_run.read_marker(tmp_path, model) is None
    (tmp_path / ".onnx2tf-old").mkdir()
    onnx2tf_run.clear(tmp_path)
    assert not (tmp_path / tflite.MARKER).exists() and not (tmp_path / ".onnx2tf-old").exists()
    assert not any((tmp_path / name).exists() for name in tflite.FILES.values())


def test_marker_from_before_a_variant_existed_is_stale(tmp_path: Path) -> None:
    """A run recorded before int8-dynamic existed neither kept nor explained it: run again."""
    model = _tiny_model()
    old = {"fp32": "model_float32.tflite", "fp16": "model_float16.tflite",
           "int8": "model_integer_quant.tflite"}
    for name in old.values():
        (tmp_path / name).write_bytes(b"tflite")
    marker = {"model_sha256": model.sha256, "files": old, "missing": {},
              "recipe": onnx2tf_run.RECIPE}
    (tmp_path / tflite.MARKER).write_text(json.dumps(marker))
    assert onnx2tf_run.read_marker(tmp_path, model) is None
    marker["missing"] = {"int8-dynamic": "failed", "int8-io": "failed"}
    (tmp_path / tflite.MARKER).write_text(json.dumps(marker))
    assert onnx2tf_run.read_marker(tmp_path, model) == marker


def test_no_calibration_explains_every_int8_variant(tmp_path: Path) -> None:
    flags, run = onnx2tf_run.prepare(_two_output_model_info(tmp_path), Dataset(feeds=()), tmp_path)
    assert "-oiqt" not in flags
    assert run["missing"] == dict.fromkeys(("int8", "int8-dynamic", "int8-io"),
                                           "no calibration samples")


def _two_output_model_info(tmp_path: Path) -> ModelInfo:
    return inspect_model(_two_output_model(tmp_path / "two.onnx"))


def test_missing_reports_one_line_or_none() -> None:
    reason = TARGET.missing()
    assert reason is None or "\n" not in reason


# ---------------------------------------------------------------- mapping helpers (fast)


def test_layouts_prefer_channels_last() -> None:
    assert litert_runner.layouts((1, 1, 8, 8), (1, 8, 8, 1)) == [(0, 2, 3, 1)]
    assert litert_runner.layouts((1, 8, 8, 8), (1, 8, 8, 8)) == [(0, 2, 3, 1), None]
    assert litert_runner.layouts((1, 10), (1, 10)) == [None]
    assert litert_runner.layouts(("N", 3, 16), (-1, 16, 3)) == [(0, 2, 1)]
    assert litert_runner.layouts((1, 2, 4, 4, 4), (1, 4, 4, 4, 2)) == [(0, 2, 3, 4, 1)]
    assert litert_runner.layouts((1, 10), (1, 11)) == []


def test_outputs_are_ordered_by_number() -> None:
    details = [{"name": "PartitionedCall:1", "index": 7}, {"name": "PartitionedCall:0", "index": 9}]
    assert litert_runner.by_number(details, {}) == [1, 0]
    details = [{"name": "Identity", "index": 3}, {"name": "Identity_1", "index": 4}]
    assert litert_runner.by_number(details, {}) == [0, 1]
    assert litert_runner.by_number([{"name": "x", "index": 1}], {1: "output_0"}) == [0]
    assert litert_runner.by_number([{"name": "logits", "index": 1}], {}) is None


def test_quantized_io_round_trips() -> None:
    spec = TensorSpec(name="x", shape=(1, 2, 1, 1), dtype="float32")
    binding = litert_runner.Binding(spec=spec, index=0, name="x", perm=(0, 2, 3, 1),
                                    dtype=np.dtype(np.int8), scale=1 / 255, zero_point=-128)
    value = np.array([0.0, 1.0], np.float32).reshape(1, 2, 1, 1)
    quantized = litert_runner.to_tflite(value, binding)
    assert quantized.dtype == np.int8 and quantized.shape == (1, 1, 1, 2)
    assert quantized.ravel().tolist() == [-128, 127]
    np.testing.assert_allclose(litert_runner.from_tflite(quantized, binding), value, atol=1e-6)


def test_reason_picks_the_error_line(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("I0000 00:00:1.0 noise\n\x1b[32mINFO:\x1b[0m ok\nTraceback\n"
                   "ValueError: bad input shape\n\n  \n")
    assert onnx2tf_run.reason(log) == "ValueError: bad input shape"


def test_a_kept_input_prefers_its_own_layout() -> None:
    """[1, 8, 8, 8] fits both ways: onnx2tf's channels-last unless the input was kept."""
    spec = TensorSpec(name="x", shape=(1, 8, 8, 8), dtype="float32")
    assert litert_runner._perms(spec, (1, 8, 8, 8), ()) == [(0, 2, 3, 1), None]
    assert litert_runner._perms(spec, (1, 8, 8, 8), ("x",)) == [None, (0, 2, 3, 1)]
    assert litert_runner._perms(spec, (1, 8, 8, 8), ("y",)) == [(0, 2, 3, 1), None]
