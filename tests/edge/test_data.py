"""Data files: shapes adapted per DESIGN.md, every bad input named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.core.data import SyntheticDataWarning, dataset_digest, load_dataset, synthetic_dataset
from edge.core.errors import UsageError
from edge.core.values import ModelInfo, TensorSpec


def _model(*inputs: TensorSpec) -> ModelInfo:
    return ModelInfo(path="m.onnx", sha256="0", size_bytes=1, opset=17, inputs=inputs,
                     outputs=(TensorSpec(name="y", shape=(1, 10), dtype="float32"),),
                     params=0, macs=0)


IMAGE = TensorSpec(name="x", shape=(1, 1, 8, 8), dtype="float32")


def test_npy_without_batch_dim_gets_one(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(5 * 64, dtype=np.float64).reshape(5, 1, 8, 8))
    data = load_dataset(tmp_path / "d.npy", _model(IMAGE))
    assert len(data) == 5
    assert data.feeds[2]["x"].shape == (1, 1, 8, 8) and data.feeds[2]["x"].dtype == np.float32
    assert data.feeds[2]["x"][0, 0, 0, 0] == 128


def test_npy_with_batch_dim_is_kept(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.zeros((3, 1, 1, 8, 8), np.float32))
    assert load_dataset(tmp_path / "d.npy", _model(IMAGE)).feeds[0]["x"].shape == (1, 1, 8, 8)


def test_symbolic_batch_accepts_samples(tmp_path: Path) -> None:
    spec = TensorSpec(name="x", shape=("N", 4), dtype="float32")
    np.save(tmp_path / "d.npy", np.ones((6, 4), np.float32))
    assert load_dataset(tmp_path / "d.npy", _model(spec)).feeds[0]["x"].shape == (1, 4)


def test_npz_keyed_by_input_with_labels(tmp_path: Path) -> None:
    ids = TensorSpec(name="ids", shape=(1, 3), dtype="int64")
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 1, 8, 8)), ids=np.ones((4, 3)),
             labels=np.arange(4))
    data = load_dataset(tmp_path / "d.npz", _model(IMAGE, ids), want_labels=True)
    assert data.feeds[0]["ids"].dtype == np.int64 and list(data.labels) == [0, 1, 2, 3]
    assert load_dataset(tmp_path / "d.npz", _model(IMAGE, ids)).labels is None


@pytest.mark.parametrize("content, message", [
    (lambda p: np.savez(p / "d.npz", y=np.zeros((2, 1, 8, 8))), "no array for input(s) x"),
    (lambda p: np.savez(p / "d.npz", x=np.zeros((2, 1, 8, 8)), labels=np.zeros(3)),
     "'labels' has 3 entries for 2 samples"),
    (lambda p: (p / "d.npz").write_bytes(b"garbage"), "not a readable .npz"),
])
def test_bad_npz_is_named(tmp_path: Path, content, message: str) -> None:
    content(tmp_path)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_dataset(tmp_path / "d.npz", _model(IMAGE), want_labels=True)


def test_npy_for_two_input_model_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.zeros((2, 1, 8, 8)))
    two = _model(IMAGE, TensorSpec(name="z", shape=(1,), dtype="float32"))
    with pytest.raises(UsageError, match="give an .npz keyed by input name"):
        load_dataset(tmp_path / "d.npy", two)


def test_missing_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_dataset(tmp_path / "nope.npy", _model(IMAGE))
    (tmp_path / "d.csv").write_text("1,2")
    with pytest.raises(UsageError, match=r"\.npy, \.npz or a folder of images"):
        load_dataset(tmp_path / "d.csv", _model(IMAGE))


def test_image_folder_is_resized_and_scaled(tmp_path: Path) -> None:
    pil = pytest.importorskip("PIL.Image")
    for i in range(3):
        pil.fromarray(np.full((20, 30), 255 * (i % 2), np.uint8)).save(tmp_path / f"{i}.png")
    data = load_dataset(tmp_path, _model(IMAGE))
    assert len(data) == 3 and data.feeds[1]["x"].shape == (1, 1, 8, 8)
    assert data.feeds[1]["x"].max() == pytest.approx(1.0) and data.feeds[0]["x"].max() == 0


def test_synthetic_is_warned_labelled_and_reproducible() -> None:
    with pytest.warns(SyntheticDataWarning):
        first = synthetic_dataset(_model(IMAGE), count=4)
    with pytest.warns(SyntheticDataWarning):
        again = synthetic_dataset(_model(IMAGE), count=4)
    assert first.synthetic and "synthetic" in first.source
    assert dataset_digest(first) == dataset_digest(again)


def test_split_keeps_the_tail_for_verification() -> None:
    with pytest.warns(SyntheticDataWarning):
        data = synthetic_dataset(_model(IMAGE), count=10)
    calib, held = data.split(0.2)
    assert len(calib) == 8 and len(held) == 2
    assert held.feeds[0] is data.feeds[8]


def test_labels_as_a_column_are_class_ids(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 1, 8, 8)), labels=np.array([[2], [0], [1]]))
    data = load_dataset(tmp_path / "d.npz", _model(IMAGE), want_labels=True)
    assert list(data.labels) == [2, 0, 1]
    np.savez(tmp_path / "o.npz", x=np.zeros((2, 1, 8, 8)), labels=np.eye(3)[[2, 1]])
    assert list(load_dataset(tmp_path / "o.npz", _model(IMAGE), want_labels=True).labels) == [2, 1]
