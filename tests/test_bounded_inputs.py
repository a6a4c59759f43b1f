"""Sizes and numbers a file declares are checked before edge acts on them (issue 27): array
headers against the bytes behind them, inventory host ranges and nesting, baselines, and the
text and numbers the report draws."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge.core import data
from edge.core.data import load_dataset
from edge.core.errors import UsageError
from edge.core.model import inspect_model
from tests.support.hostile import tiny_model
from tests.support.hostile_sizes import npy_bytes, zip_bytes


@pytest.fixture
def model(tmp_path: Path) -> object:
    return inspect_model(tiny_model(tmp_path / "m.onnx"))


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


# ---------------------------------------------------------------- arrays


@pytest.mark.parametrize("content", [
    npy_bytes((10**11, 4)), npy_bytes((4, 10**11), "<f8", fortran=True),
    npy_bytes((10**11, 4), version=2), npy_bytes((-(10**11), -4)),
], ids=["huge", "fortran", "v2", "negative"])
def test_an_npy_header_declaring_more_than_the_file_holds_is_refused(
        tmp_path: Path, model: object, content: bytes) -> None:
    path = tmp_path / "d.npy"
    path.write_bytes(content)
    with pytest.raises(UsageError, match="d.npy: its header declares"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npy_over_the_budget_is_refused_before_it_is_read(
        tmp_path: Path, model: object, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.npy"
    np.save(path, np.zeros((64, 4), np.float32))
    monkeypatch.setattr(data, "MAX_DATA_BYTES", 512)
    with pytest.raises(UsageError, match="more than edge reads"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npz_member_is_checked_and_extra_members_are_never_read(
        tmp_path: Path, model: object) -> None:
    good = _npy(np.ones((8, 4), np.float32))
    extra = tmp_path / "extra.npz"
    extra.write_bytes(zip_bytes([("x.npy", good, 0, len(good)),
                                 ("junk.npy", npy_bytes((10**11, 4)), 0, 144)]))
    assert len(load_dataset(extra, model).feeds) == 8  # type: ignore[arg-type]
    huge = tmp_path / "huge.npz"
    huge.write_bytes(zip_bytes([("x.npy", npy_bytes((10**11, 4)), 0, 144)]))
    with pytest.raises(UsageError, match="member x: its header declares"):
        load_dataset(huge, model)  # type: ignore[arg-type]


def test_a_deflate_bomb_is_refused_by_its_declared_size(
        tmp_path: Path, model: object, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", _npy(np.zeros((4096, 4), np.float32)))
    monkeypatch.setattr(data, "MAX_DATA_BYTES", 4096)
    with pytest.raises(UsageError, match="more than edge reads"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npz_of_too_many_members_is_refused(tmp_path: Path, model: object) -> None:
    good = _npy(np.ones((8, 4), np.float32))
    path = tmp_path / "d.npz"
    path.write_bytes(zip_bytes([(f"m{i}.npy", good, 0, len(good)) for i in range(1100)]))
    with pytest.raises(UsageError, match="1,100 members"):
        load_dataset(path, model)  # type: ignore[arg-type]
