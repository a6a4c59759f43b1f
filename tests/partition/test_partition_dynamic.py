"""``edge partition`` of a model with dynamic dims: refused without a size, priced at the size of
the --calib data when given (issue 12, item 7)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.digits import DigitsModel
from tests.support.variants import dynamic_features


@pytest.fixture(scope="module")
def trunk(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dynamic_features(digits.onnx, tmp_path_factory.mktemp("dyn") / "trunk.onnx")


def _split(trunk: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    result = run_cli("partition", str(trunk), "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(out), *extra)
    return result.status, result.stdout, result.stderr


def test_dynamic_dims_without_a_size_are_a_one_line_usage_error(trunk: Path,
                                                                tmp_path: Path) -> None:
    status, _, stderr = _split(trunk, tmp_path / "split")
    assert status == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr
    assert "dynamic dims" in errors[0] and "--shape input=1,1,N,N" in errors[0]
    assert not (tmp_path / "split").exists()


def test_calib_data_sets_the_size_that_is_priced(trunk: Path, digits: DigitsModel,
                                                  tmp_path: Path) -> None:
    images = np.load(digits.calib)[:8]
    big = np.repeat(np.repeat(images, 4, axis=2), 4, axis=3)  # [8, 1, 32, 32]
    np.save(tmp_path / "frames.npy", big)
    status, _, stderr = _split(trunk, tmp_path / "calib", "--calib", str(tmp_path / "frames.npy"),
                               "--json")
    assert status == 0, stderr
    split = yaml.safe_load((tmp_path / "calib" / "split.yaml").read_text())
    assert split["inputs"][0]["shape"] == [1, 1, 32, 32]
    status, _, stderr = _split(trunk, tmp_path / "pinned", "--shape", "input=1,1,32,32")
    assert status == 0, stderr
    pinned = yaml.safe_load((tmp_path / "pinned" / "split.yaml").read_text())
    assert pinned["inputs"] == split["inputs"]
    # the same size is priced the same way, whichever flag gave it
    assert pinned["predicted"]["edge_ms"] == pytest.approx(split["predicted"]["edge_ms"])
