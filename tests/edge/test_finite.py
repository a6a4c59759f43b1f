"""Finite-number discipline (issue 14): NaN, Inf and absurd magnitudes in data, labels, CLI
numbers and profiles are refused with one line naming what to fix, and no fidelity comparison
lets NaN pass (``nan > limit`` is False: a NaN drop or cosine used to pass)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.core.data import load_dataset
from edge.core.errors import UsageError
from edge.core.values import Dataset, ModelInfo, OutputFidelity, TensorSpec
from edge.core.verify import Thresholds, measure, output_failure
from tests.support.cli import run_cli
from tests.support.verify_models import two_scale_model, uniform_inputs

IMAGE = TensorSpec(name="x", shape=(1, 1, 4, 4), dtype="float32")


def _model(*inputs: TensorSpec) -> ModelInfo:
    return ModelInfo(path="m.onnx", sha256="0", size_bytes=1, opset=17, inputs=inputs,
                     outputs=(TensorSpec(name="y", shape=(1, 3), dtype="float32"),),
                     params=0, macs=0)


@pytest.mark.parametrize(("poison", "words"), [
    (np.nan, "1 of 80 values NaN or Inf (first in sample 3)"),
    (-np.inf, "1 of 80 values NaN or Inf (first in sample 3)"),
    (3e38, "1 of 80 values beyond +/-1e+18 (first in sample 3)"),
])
def test_data_with_nan_inf_or_absurd_values_is_refused(tmp_path: Path, poison: float,
                                                       words: str) -> None:
    data = np.ones((5, 1, 4, 4), np.float32)
    data[3, 0, 2, 1] = poison
    np.save(tmp_path / "d.npy", data)
    with pytest.raises(UsageError, match="input 'x' has ") as caught:
        load_dataset(tmp_path / "d.npy", _model(IMAGE))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_all_nan_calibration_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.full((4, 1, 4, 4), np.nan, np.float32))
    with pytest.raises(UsageError, match="64 of 64 values NaN or Inf"):
        load_dataset(tmp_path / "d.npy", _model(IMAGE))


def test_negative_labels_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((4, 1, 4, 4)), labels=np.full(4, -7))
    with pytest.raises(UsageError, match="4 are negative"):
        load_dataset(tmp_path / "d.npz", _model(IMAGE), want_labels=True)


def _outputs(rows: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    return [(row[None, :],) for row in rows]


def test_labels_outside_the_outputs_classes_are_refused() -> None:
    rows = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    data = Dataset(feeds=({},) * 4, labels=np.array([0, 1, 7, 0]), source="t")
    with pytest.raises(UsageError, match="1 of 4 labels are not class ids 0..2 \\(e.g. 7\\)"):
        measure(_outputs(rows), _outputs(rows), data, Thresholds(metrics=(("y", "classes"),)),
                ["y"])


def test_an_original_whose_output_is_nan_cannot_be_verified_against() -> None:
    ref = np.ones((4, 3), np.float32)
    ref[1, 2] = np.nan
    data = Dataset(feeds=({},) * 4, source="t")
    with pytest.raises(UsageError, match="output 'y' of the original model holds 1 NaN"):
        measure(_outputs(ref), _outputs(np.ones((4, 3), np.float32)), data, Thresholds(), ["y"])


def test_a_nan_drop_fails() -> None:
    out = OutputFidelity(name="y", kind="probs", why="t", passed=True, reason="",
                         drop=float("nan"), detail="flips")
    assert output_failure(out, Thresholds()) is not None
    labelled = OutputFidelity(name="y", kind="classes", why="t", passed=True, reason="",
                              accuracy=float("nan"), reference_accuracy=0.5)
    assert output_failure(labelled, Thresholds()) is not None


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("finite")
    two_scale_model(root / "two.onnx")
    np.save(root / "two.npy", uniform_inputs(40, (1, 8)))
    bad = uniform_inputs(40, (1, 8))
    bad[7, 0, 3] = np.nan
    np.save(root / "nan.npy", bad)
    (root / "ort.yaml").write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    return root


def _one_line(result, words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.status == 2, result.stderr
    assert len(result.error_lines) == 1 and words in result.error_lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flags", [("--eval", "nan.npy"), ("--calib", "nan.npy")])
def test_optimize_with_a_nan_sample_is_one_line_exit_2(work: Path, flags: tuple[str, str]) -> None:
    out = work / "never.bundle"
    result = run_cli("optimize", str(work / "two.onnx"), "--profile", str(work / "ort.yaml"),
                     flags[0], str(work / flags[1]), "-o", str(out))
    _one_line(result, "1 of 320 values NaN or Inf (first in sample 7)")
    assert not out.exists()


@pytest.mark.parametrize(("command", "flag", "value"), [
    ("partition", "--bandwidth", "nan"),
    ("partition", "--rtt", "inf"),
    ("optimize", "--min-cosine", "nan"),
    ("optimize", "--max-error", "inf"),
    ("optimize", "--latency-budget", "nan"),
])
def test_cli_numbers_must_be_finite(work: Path, command: str, flag: str, value: str) -> None:
    out = work / "never"
    result = run_cli(command, str(work / "two.onnx"), "--profile", str(work / "ort.yaml"),
                     flag, value, "-o", str(out))
    assert result.status == 2, result.stderr
    assert f"{value!r} is not a finite number" in result.stderr and not out.exists()


def test_a_profile_with_a_nan_link_is_refused(work: Path) -> None:
    (work / "nan-link.yaml").write_text(
        "extends: x86-64\nid: nan-link\n"
        "link: {kind: wifi5, uplink_mbps: 10, downlink_mbps: 20, rtt_ms: .inf}\n")
    result = run_cli("profiles", "validate", str(work / "nan-link.yaml"))
    assert result.status == 2, result.stderr
    assert "rtt_ms" in result.stderr and len(result.error_lines) == 1
    assert "Traceback" not in result.stderr


def test_one_number_per_sample_gets_its_cosine_over_the_samples() -> None:
    # int8 rounds a wake-word probability of 1e-5 to 0: per sample the cosine was 0 (one side
    # all zeros) and 1 whenever both were positive -- a sign test, not a similarity
    ref = np.array([[0.79], [1e-5], [2e-5], [0.06], [3e-5]], np.float32)
    got = np.array([[0.78], [0.0], [0.0], [0.065], [0.0]], np.float32)
    data = Dataset(feeds=({},) * 5, source="t")
    fid = measure(_outputs(ref), _outputs(got), data, Thresholds(metrics=(("y", "values"),)),
                  ["y"])
    assert fid.outputs[0].cosine > 0.999 and fid.outputs[0].passed
    flipped = measure(_outputs(ref), _outputs(-got), data, Thresholds(metrics=(("y", "values"),)),
                      ["y"])
    assert flipped.outputs[0].cosine < -0.99 and not flipped.outputs[0].passed
