"""The benchmarked models and their data: a tamed MobileNetV2 on scikit-image crops; digits."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .common import IMAGES, MEAN, MNV2, RESIDUAL_GAMMA, ROOT, SIZE, STD

# ====================================================================== models and data


def sample_images() -> list[Any]:
    """The sample images as float32 torch tensors [3, H, W] in [0, 1]."""
    import torch
    from skimage import data, util

    out = []
    for name in IMAGES:
        img = util.img_as_float32(getattr(data, name)())
        img = np.stack([img] * 3, -1) if img.ndim == 2 else img[..., :3]
        out.append(torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))))
    return out


def crops(images: list[Any], per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random square crops (35-90% of the short side) resized to 224, ImageNet-normalized."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for label, img in enumerate(images):
        for _ in range(per_class):
            xs.append(_crop(img, rng))
            ys.append(label)
    order = rng.permutation(len(xs))
    x = (np.stack(xs) - MEAN) / STD
    return x[order].astype(np.float32), np.array(ys, np.int64)[order]


def _crop(img: Any, rng: np.random.Generator) -> np.ndarray:
    import torch.nn.functional as F

    _, h, w = img.shape
    side = int(min(h, w) * rng.uniform(0.35, 0.9))
    top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
    patch = img[None, :, top:top + side, left:left + side]
    patch = F.interpolate(patch, size=(SIZE, SIZE), mode="bilinear", antialias=True,
                          align_corners=False)[0]
    return (patch.flip(-1) if rng.random() < 0.5 else patch).numpy()


def mobilenet_v2(classes: int = 1000) -> Any:
    """A MobileNetV2 (width 1.0, ~3.5M params): ``features`` then a Linear ``head``."""
    from torch import nn

    def cbr(i: int, o: int, k: int = 3, s: int = 1, g: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False),
                             nn.BatchNorm2d(o), nn.ReLU6(inplace=True))

    class Inverted(nn.Module):
        def __init__(self, i: int, o: int, stride: int, t: int) -> None:
            super().__init__()
            hidden, self.residual = i * t, stride == 1 and i == o
            layers = [cbr(i, hidden, 1)] if t != 1 else []
            layers += [cbr(hidden, hidden, 3, stride, hidden),
                       nn.Conv2d(hidden, o, 1, bias=False), nn.BatchNorm2d(o)]
            self.body = nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    layers, c = [cbr(3, 32, 3, 2)], 32
    for t, o, n, s in MNV2:
        for k in range(n):
            layers.append(Inverted(c, o, s if k == 0 else 1, t))
            c = o
    layers += [cbr(c, 1280, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    net = nn.Sequential()
    net.add_module("features", nn.Sequential(*layers))
    net.add_module("head", nn.Linear(1280, classes))
    return net


def build_cnn(work: Path) -> dict[str, str]:
    """The MobileNetV2 ONNX, calibration .npy and labelled held-out .npz (cached)."""
    files = {"onnx": work / "cnn.onnx", "calib": work / "calib.npy", "eval": work / "eval.npz"}
    if not all(p.is_file() for p in files.values()):
        work.mkdir(parents=True, exist_ok=True)
        _make_cnn(work, files)
    return {k: str(v) for k, v in files.items()}


def _make_cnn(work: Path, files: dict[str, Path]) -> None:
    """Random conv weights, BatchNorm statistics from real crops, a linear-probe head.

    Training MobileNetV2 on this CPU is out of reach (3-13 s per batch of 32), so the conv
    weights stay random. A plain random deep net is chaotic: rounding errors grow layer by
    layer (int8 features cosine 0.97, int8 logits 0.87), far from a trained net. Starting the
    residual branches near identity (last BatchNorm gamma 0.2, the "zero-init residual" trick)
    keeps it tame (int8 features 0.99). BatchNorm is re-estimated on real crops and the head is
    a logistic regression on the features of 12 image classes: confident, input-dependent
    logits for top-1 and accuracy checks. The other 988 head rows are zero.
    """
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    images = sample_images()
    train_x, train_y = crops(images, 16, seed=0)
    net = mobilenet_v2()
    _tame_residuals(net)
    _recalibrate_bn(net, train_x[:24])
    _export(net.features, work / "features.onnx")
    _fit_head(net.head, _ort_features(work / "features.onnx", train_x), train_y)
    _export(net, files["onnx"])
    np.save(files["calib"], crops(images, 6, seed=1)[0])
    eval_x, eval_y = crops(images, 10, seed=2)
    np.savez(files["eval"], input=eval_x, labels=eval_y)


def _tame_residuals(net: Any) -> None:
    from torch import nn

    for module in net.modules():
        if getattr(module, "residual", False):
            nn.init.constant_(module.body[-1].weight, RESIDUAL_GAMMA)


def _recalibrate_bn(net: Any, x: np.ndarray) -> None:
    import torch
    from torch import nn

    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # cumulative average: one batch sets the statistics
    net.train()
    with torch.no_grad():
        net(torch.from_numpy(x))
    net.eval()


def _export(module: Any, path: Path) -> None:
    import torch

    module.eval()
    torch.onnx.export(module, torch.zeros(1, 3, SIZE, SIZE), str(path), input_names=["input"],
                      output_names=["output"], opset_version=17, dynamo=False)


def _ort_features(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def _fit_head(head: Any, feats: np.ndarray, labels: np.ndarray) -> None:
    """Logistic regression into rows 0..K-1 of the 1000-way head; other rows output 0.

    On the raw features (standardizing amplified near-constant features and their rounding
    noise); multinomial logits sum to ~0 per sample, so the top logit is a fitted class.
    """
    import torch
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=3000).fit(feats, labels)
    weight = np.zeros(tuple(head.weight.shape), np.float32)
    bias = np.zeros(head.bias.shape, np.float32)
    weight[: len(clf.classes_)] = clf.coef_
    bias[: len(clf.classes_)] = clf.intercept_
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(weight))
        head.bias.copy_(torch.from_numpy(bias))


def build_digits(work: Path) -> dict[str, str]:
    """The digits CNN from tests/support/digits.py (trained once, cached)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.digits import train_digits

    files = {"onnx": work / "digits.onnx", "calib": work / "digits_calib.npy",
             "eval": work / "digits_eval.npz"}
    if not all(p.is_file() for p in files.values()):
        train_digits(work)
    return {k: str(v) for k, v in files.items()}


