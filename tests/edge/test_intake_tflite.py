"""TFLite intake when no converter can make an ONNX model: mediapipe's sparse face detector
(its DENSIFY weights stop tf2onnx and tflite2onnx) is its own reference on LiteRT, the failure
names the operator and is remembered, and ``edge optimize`` still verifies a bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edge.core.intake import NoOnnxReference, inspect_tflite, to_reference
from edge.core.intake.tflite import named_operators
from tests.support import mediapipe
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sparse() -> Path:
    return mediapipe.sparse_face_detector()


def _faces(out: Path, count: int = 40) -> Path:
    """lfw_subset faces and non-faces scaled to the detector's 192x192 input, in [-1, 1]."""
    from skimage.transform import resize

    images, _ = mediapipe.lfw_faces()
    pick = np.r_[0:count // 2, 100:100 + count // 2]
    np.save(out, np.stack([resize(images[i], (192, 192), order=1) for i in pick])
            .astype(np.float32))
    return out


def test_no_converter_names_the_operator_and_the_failure_is_remembered(
        sparse: Path, tmp_path: Path) -> None:
    with pytest.raises(NoOnnxReference, match="unsupported operator DENSIFY: tf2onnx: ") as err:
        to_reference(sparse, tmp_path)
    assert "tflite2onnx: " in str(err.value) and "\n" not in str(err.value)
    markers = list(tmp_path.glob("*.failed.txt"))
    logs = list(tmp_path.glob("*.log"))
    assert len(markers) == 1 and len(logs) == 1
    logs[0].unlink()  # the converter child writes this log whenever it runs
    with pytest.raises(NoOnnxReference, match="DENSIFY.*remembered from an earlier run"):
        to_reference(sparse, tmp_path)
    assert not logs[0].exists()  # the converters did not run again


#: A "python" for the intake child whose first converter crashes the process (SIGSEGV) after
#: reporting the operator it could not convert, as tf2onnx does on BirdNET's RFFT2D.
_CRASHING = """#!{python}
import os, runpy, signal, sys
import edge.core.intake.tflite as chain
def crash(job):
    print("Failed to convert node 'x' OP=DENSIFY", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
chain._ATTEMPTS = (("tf2onnx", crash),) + chain._ATTEMPTS[1:]
sys.argv = ["edge.core.intake.tf", sys.argv[-1]]
runpy.run_module("edge.core.intake.tf", run_name="__main__")
"""


def test_a_converter_that_crashes_the_child_is_named_and_the_others_still_run(
        sparse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "python"
    fake.write_text(_CRASHING.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    with pytest.raises(NoOnnxReference, match=r"unsupported operator DENSIFY: tf2onnx: crashed "
                       r"\(SIGSEGV\) after it could not convert DENSIFY; ") as err:
        to_reference(sparse, tmp_path / "ref")
    assert "tflite2onnx: " in str(err.value)  # the chain went on past the crash
    assert len(list((tmp_path / "ref").glob("*.failed.txt"))) == 1  # a crash is the model's


def test_the_operator_is_taken_from_the_model_s_own_operators() -> None:
    reasons = ["tf2onnx: ValueError: cannot reshape", "tflite2onnx: Unsupported TFLite OP: "
               "124 DENSIFY!"]
    assert named_operators(reasons, ["DEPTHWISE_CONV_2D", "DENSIFY", "CONV_2D"]) == ["DENSIFY"]
    assert named_operators(["tf2onnx: ValueError: cannot reshape"], ["CONV_2D"]) == []
    both = ["tf2onnx: unsupported ops: RFFT2D", "tflite2onnx: Unsupported TFLite OP: REDUCE_MIN"]
    assert named_operators(both, ["RFFT2D", "REDUCE_MIN", "MUL"]) == ["REDUCE_MIN", "RFFT2D"]


def test_a_tflite_reference_is_described_by_litert(sparse: Path) -> None:
    info = inspect_tflite(sparse)
    assert [(s.name, s.shape, s.dtype) for s in info.inputs] == [
        ("input_1", (1, 192, 192, 3), "float32")]
    assert len(info.outputs) == 2 and info.ops["DENSIFY"] > 0 and info.params > 100_000


def test_optimize_verifies_a_bundle_from_a_tflite_no_converter_reads(
        sparse: Path, tmp_path: Path) -> None:
    calib = _faces(tmp_path / "faces.npy")
    # --exhaustive: every candidate converted, this test checks the ones not chosen
    result = run_cli("optimize", str(sparse), "--profile", "rpi4", "--calib", str(calib),
                     "-o", str(tmp_path / "b"), "--json", "--exhaustive")
    assert result.status == 0, result.stderr
    bundle = result.json()
    rows = {c["candidate"]["target"] + "-" + c["candidate"]["precision"]: c
            for c in bundle["candidates"]}
    # the user's .tflite competes as itself (the baseline noise never replaces), first
    original = rows["original-fp32"]
    assert bundle["candidates"][0] is original or bundle["candidates"][0] == original
    assert original["fidelity"]["cosine"] >= 0.9999 and original["status"] in ("passed",
                                                                                 "chosen")
    assert original["artifact"]["sha256"] == bundle["origin"]["sha256"]  # the original itself
    assert original["artifact"]["runtime"] == "tflite"
    assert rows["litert-fp32"]["status"] in ("passed", "chosen")
    assert "no ONNX reference" in rows["onnxruntime-*"]["reason"]
    static = rows["litert-int8"]  # calibrated: no orphaned weight tensor stops ai-edge-quantizer
    assert static["artifact"] is not None and static["fidelity"]["cosine"] >= 0.95, static
    assert static["status"] in ("passed", "chosen") or static["reason"].startswith("output '")
    dynamic = rows["litert-int8-dynamic"]  # made from the original, its weights decoded first
    # made and verified; its raw detector outputs keep cosine > 0.98 but lose about half their
    # spread (per-output verification judges that), so it may be rejected: said per output
    assert dynamic["fidelity"]["cosine"] >= 0.98
    assert dynamic["status"] in ("passed", "chosen") or dynamic["reason"].startswith("output '")
    assert any("DEQUANTIZE/DENSIFY" in n and "folded" in n for n in dynamic["artifact"]["notes"])
    assert bundle["chosen"] in ("original", "litert-int8", "litert-int8-dynamic")
    assert any("DENSIFY" in w for w in bundle["warnings"])


def test_a_failed_litert_variant_is_remembered_not_rebuilt(sparse: Path, tmp_path: Path) -> None:
    from ai_edge_litert.tools import flatbuffer_utils

    from edge.core.data import synthetic_dataset
    from targets import get_target
    from targets.base import ConversionError, ConvertSettings
    from targets.tflite.litert import op_names, prepared

    target, info = get_target("litert"), inspect_tflite(sparse)
    with pytest.warns(UserWarning):
        calib = synthetic_dataset(info, count=4)
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(prepared(sparse)[0]))
    every = ConvertSettings(keep_float=tuple(op_names(model.subgraphs[0])))
    nothing = r"static_wi8_ai8 made no int8 tensor: \d+ operator\(s\) kept float"
    with pytest.raises(ConversionError, match=nothing) as first:
        target.convert(info, "int8", calib=calib, workdir=tmp_path, settings=every)
    assert "remembered" not in str(first.value)
    marker = tmp_path / "model_int8.tflite.failed.txt"
    assert marker.read_text() == str(first.value)
    marker.write_text("the failure as remembered")  # what a second call reports, not re-runs
    with pytest.raises(ConversionError, match=r"^the failure as remembered \(remembered: "):
        target.convert(info, "int8", calib=calib, workdir=tmp_path, settings=every)
    original, _ = target.convert(info, "fp32", calib=calib, workdir=tmp_path)
    assert original.read_bytes() == sparse.read_bytes()


def test_a_missing_converter_is_not_remembered(sparse: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from edge.core.errors import UsageError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tf2onnx" else real(name, *a))
    with pytest.raises(UsageError, match="needs tf2onnx") as err:
        to_reference(sparse, tmp_path)
    assert not isinstance(err.value, NoOnnxReference)
    assert list(tmp_path.glob("*.failed.txt")) == []
