"""Train a small CNN on scikit-learn's digits (real, labelled data shipped in the package).

Used by the tests and by ``tools/make_sample.py`` to build the sample model edge ships.
The split is fixed: calibration samples, and held-out samples never seen in training.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.kept import kept_folder, key_of


@dataclass(frozen=True, kw_only=True, slots=True)
class DigitsModel:
    """Files of a trained digits model and its data splits."""

    onnx: Path
    calib: Path  # .npy, [N, 1, 8, 8] float32
    eval: Path  # .npz with keys "input" [M, 1, 8, 8] and "labels" [M]
    float_accuracy: float


def _splits(seed: int = 0) -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    # 1,297 train / 100 calibration (from train's distribution, unseen by the optimizer's eval)
    # / 400 held-out evaluation
    return x[:1297], y[:1297], x[1297:1397], x[1397:], y[1397:]


def train_digits(out_dir: Path, *, epochs: int = 12, seed: int = 0) -> DigitsModel:
    """Train, export to ONNX (opset 17) and write the calibration and evaluation files."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(2)
    x_train, y_train, x_calib, x_eval, y_eval = _splits(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt)).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x_eval)).argmax(1).numpy()
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / "digits.onnx"
    torch.onnx.export(model, torch.zeros(1, 1, 8, 8), str(onnx_path), input_names=["input"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    calib = out_dir / "digits_calib.npy"
    np.save(calib, x_calib)
    evaluation = out_dir / "digits_eval.npz"
    np.savez(evaluation, input=x_eval, labels=y_eval)
    return DigitsModel(onnx=onnx_path, calib=calib, eval=evaluation,
                       float_accuracy=float((pred == y_eval).mean()))


def kept_digits(out_dir: Path, *, seed: int = 0) -> DigitsModel:
    """The digits model trained once and kept in the test data cache (keyed by this file and
    the versions of what trains it), copied into ``out_dir`` for this session."""
    key = key_of(seed, sources=[Path(__file__)], dists=("torch", "scikit-learn", "numpy", "onnx"))

    def build(folder: Path) -> None:
        model = train_digits(folder, seed=seed)
        (folder / "accuracy.json").write_text(json.dumps(model.float_accuracy))

    def read(folder: Path) -> DigitsModel:
        shutil.copytree(folder, out_dir, dirs_exist_ok=True)
        return DigitsModel(onnx=out_dir / "digits.onnx", calib=out_dir / "digits_calib.npy",
                           eval=out_dir / "digits_eval.npz",
                           float_accuracy=json.loads((out_dir / "accuracy.json").read_text()))

    return kept_folder("digits", key, build, read)
