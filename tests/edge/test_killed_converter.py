"""A converter child killed by a signal (an interrupted run, the OOM killer) failed for the host,
not for the model: its failure is never remembered, so the next run converts again. Found when
an interrupted test run left a failure that the conversion caches, now kept between runs
(issue 38), would have served to every later run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edge.core.errors import UsageError
from edge.core.intake import tf
from edge.core.intake.common import NoOnnxReference
from edge.core.intake.memory import failure_marker, remembered_failure
from targets.base import ConversionError
from targets.tflite import onnx2tf_run


@pytest.fixture
def killed_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A "python" that kills itself with SIGKILL: a real child stopped by a real signal."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nkill -9 $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    return fake


def test_an_intake_child_killed_by_a_signal_is_not_remembered(tmp_path: Path,
                                                               killed_python: Path) -> None:
    source, out = tmp_path / "m.tflite", tmp_path / "ref" / "m.onnx"
    out.parent.mkdir()
    with pytest.raises(UsageError, match="stopped by signal 9") as raised:
        with remembered_failure(out, source):
            tf._run_child({}, out.with_suffix(".log"), source, "tflite")
    assert not isinstance(raised.value, NoOnnxReference)
    assert not failure_marker(out).exists()


def test_an_intake_child_that_fails_is_remembered(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    with pytest.raises(NoOnnxReference):
        with remembered_failure(out, tmp_path / "m.tflite"):
            raise UsageError("m.tflite: could not convert this tflite model to ONNX: DENSIFY")
    assert "DENSIFY" in failure_marker(out).read_text()


def test_a_killed_onnx2tf_is_not_remembered_a_failed_one_is(tmp_path: Path) -> None:
    log = tmp_path / "onnx2tf.log"
    log.write_text("Could not find cuda drivers on your machine\n")
    with pytest.raises(ConversionError, match="stopped by signal 15.*not remembered"):
        onnx2tf_run._check_run(tmp_path, -15, False, 60.0, log)
    with pytest.raises(onnx2tf_run._RunFailed, match="exit 1"):
        onnx2tf_run._check_run(tmp_path, 1, False, 60.0, log)
