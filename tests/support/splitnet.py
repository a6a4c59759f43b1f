"""Train a CNN whose best edge-cloud cut depends on the link: a big input, a cheap stem that
shrinks it 12x, then a compute-heavy body (real data: scikit-image's lfw_subset faces).

The 25x25 face / non-face crops are upscaled to camera-like 3x96x96 frames. Used by the
partition runtime tests and bench/split_link.py.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.kept import kept_folder, key_of

SIZE = 96


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitNet:
    """Files of a trained split-friendly model and its data."""

    onnx: Path
    samples: Path  # .npy [N, 3, 96, 96] float32, held out from training
    accuracy: float


def _frames(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """lfw_subset as [200, 3, 96, 96] frames (faces first in the package) and 0/1 labels."""
    import torch
    from skimage.data import lfw_subset

    faces = torch.from_numpy(lfw_subset().astype(np.float32))[:, None]
    frames = torch.nn.functional.interpolate(faces, size=(SIZE, SIZE), mode="bilinear")
    x = frames.repeat(1, 3, 1, 1).numpy()
    y = np.array([1] * 100 + [0] * 100, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    return x[order], y[order]


def train_splitnet(out_dir: Path, *, width: int = 128, depth: int = 6, epochs: int = 3,
                   seed: int = 0) -> SplitNet:
    """Train (~15 s on 2 cores), export to ONNX opset 17, keep 40 held-out frames.

    The default body is ~430M MACs (about 8 ms on one x86 core with onnxruntime) behind a
    stem whose output is 12x smaller than the frame.
    """
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(2)
    x, y = _frames(seed)
    body: list[nn.Module] = []
    for i in range(depth):
        body += [nn.Conv2d(16 if i == 0 else width, width, 3, padding=1), nn.ReLU()]
    model = nn.Sequential(
        nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        *body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 2))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    xt, yt = torch.from_numpy(x[:160]), torch.from_numpy(y[:160])
    for _ in range(epochs):
        for idx in torch.randperm(len(xt)).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x[160:])).argmax(1).numpy()
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / "splitnet.onnx"
    torch.onnx.export(model, torch.zeros(1, 3, SIZE, SIZE), str(onnx_path),
                      input_names=["frame"], output_names=["logits"], opset_version=17,
                      dynamo=False)
    samples = out_dir / "splitnet_frames.npy"
    np.save(samples, x[160:])
    return SplitNet(onnx=onnx_path, samples=samples, accuracy=float((pred == y[160:]).mean()))


def kept_splitnet(out_dir: Path) -> SplitNet:
    """The split-friendly CNN trained once and kept in the test data cache (keyed by this file
    and the versions of what trains it), copied into ``out_dir`` for this session."""
    key = key_of(sources=[Path(__file__)],
                 dists=("torch", "scikit-image", "numpy", "onnx"))

    def build(folder: Path) -> None:
        model = train_splitnet(folder)
        (folder / "accuracy.json").write_text(json.dumps(model.accuracy))

    def read(folder: Path) -> SplitNet:
        shutil.copytree(folder, out_dir, dirs_exist_ok=True)
        return SplitNet(onnx=out_dir / "splitnet.onnx", samples=out_dir / "splitnet_frames.npy",
                        accuracy=json.loads((out_dir / "accuracy.json").read_text()))

    return kept_folder("splitnet", key, build, read)
