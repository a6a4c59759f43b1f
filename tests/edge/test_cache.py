"""Conversion cache keys cannot go stale: a recipe change or a converter upgrade rebuilds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import edge.core.cache
import targets
from edge.core.cache import cache_root
from edge.core.profile import load_profile
from edge.flows.optimize import OptimizeOptions, optimize
from targets import source_files
from targets.onnxruntime import OnnxRuntimeTarget
from targets.tflite import TFLiteTarget
from tests.support.digits import DigitsModel


def _ort_dirs() -> dict[Path, int]:
    """Every onnxruntime conversion directory in the cache, with its int8 file's mtime."""
    found = {}
    for folder in (cache_root() / "convert").glob("*/onnxruntime-*"):
        int8 = folder / "model_int8_qdq.onnx"
        assert int8.is_file(), folder
        found[folder] = int8.stat().st_mtime_ns
    return found


def _optimize(digits: DigitsModel, profile: Path, out: Path) -> None:
    bundle = optimize(digits.onnx, load_profile(profile), out,
                      OptimizeOptions(calib=digits.calib, eval=digits.eval, measure=False))
    assert bundle.chosen is not None


@pytest.fixture
def ort_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile with ONNX Runtime alone, and a conversion cache of this test's own."""
    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))
    profile = tmp_path / "ort-only.yaml"
    profile.write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    return profile


def test_same_recipe_and_converters_reuse_the_cache(digits: DigitsModel, ort_only: Path,
                                                    tmp_path: Path) -> None:
    _optimize(digits, ort_only, tmp_path / "a")
    before = _ort_dirs()
    _optimize(digits, ort_only, tmp_path / "b")
    assert _ort_dirs() == before  # no new directory, no file rewritten


def test_a_recipe_change_rebuilds(digits: DigitsModel, ort_only: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _optimize(digits, ort_only, tmp_path / "a")
    before = _ort_dirs()
    bumped = dataclasses.replace(OnnxRuntimeTarget.caps, recipe=OnnxRuntimeTarget.caps.recipe + 1)
    monkeypatch.setattr(OnnxRuntimeTarget, "caps", bumped)
    _optimize(digits, ort_only, tmp_path / "b")
    after = _ort_dirs()
    new = set(after) - set(before)
    assert len(new) == 1, after  # the old recipe's directory is never served again
    assert all(after[d] == t for d, t in before.items())  # and is left as it was


def test_a_converter_upgrade_rebuilds(digits: DigitsModel, ort_only: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _optimize(digits, ort_only, tmp_path / "a")
    before = _ort_dirs()
    real = edge.core.cache._version

    def upgraded(dist: str) -> str:
        return "999.0" if dist == "onnxruntime" else real(dist)

    monkeypatch.setattr(edge.core.cache, "_version", upgraded)
    _optimize(digits, ort_only, tmp_path / "b")
    assert len(set(_ort_dirs()) - set(before)) == 1


def test_the_modules_a_target_converts_with_key_its_cache() -> None:
    """An edit of the onnx2tf run or the LiteRT runner (split out of targets/tflite/target.py)
    must not serve artifacts made by the old code: their sources are part of the key."""
    folder = Path(targets.__file__).parent

    def names(target: Any) -> set[str]:
        return {path.relative_to(folder).as_posix() for path in source_files(target)}

    assert {"tflite/target.py", "tflite/onnx2tf_run.py", "tflite/litert_runner.py"} <= \
        names(TFLiteTarget())
    assert names(OnnxRuntimeTarget()) == {"onnxruntime/target.py", "base.py"}
