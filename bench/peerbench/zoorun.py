"""What the per-model scripts share (bench/mixed_kinds.py, bench/bf16.py, bench/mixed_plan.py):
their arguments, edge's interleaved timing of artifact files, and the results file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MODELS = ("cnn", "digits", "fer", "hand", "oww")


def model_parser(description: str, *, rounds: int, out: Path) -> argparse.ArgumentParser:
    """``--models`` (default the MobileNetV2 and three trained zoo models), ``--threads``,
    ``--rounds``, ``--out``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--models", nargs="+", default=["cnn", "oww", "fer", "hand"], choices=MODELS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", type=Path, default=out)
    return ap


def timed_files(paths: dict[str, Path], *, rounds: int, threads: int) -> dict[str, Any]:
    """Every file timed as the device agent times it, interleaved: p50 and p90 ms."""
    from devices.measure import Rounds, time_files_here

    benches = time_files_here(paths, Rounds(rounds=rounds, calls=20 * rounds), threads=threads)
    return {k: {"p50_ms": b.p50_ms, "p90_ms": b.p90_ms} for k, b in benches.items()}


def write_results(args: argparse.Namespace, script: str, argv: list[str] | None,
                  models: dict[str, Any], **extra: Any) -> None:
    """The run's settings, machine, ``extra``, ``models`` and provenance as ``args.out``; each
    model's verdict on stdout."""
    import provenance

    from .report import machine

    doc = {"threads": args.threads, "rounds": args.rounds, "machine": machine(), **extra,
           "models": models, "provenance": provenance.record(script, argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({m: r["verdict"] for m, r in models.items()}, indent=1))
