#!/usr/bin/env python
"""Do LiteRT's round medians on this host have two modes, and is it its threads?

    python bench/litert_modes.py [--model mp-face-detection] [--copies 6] [--rounds 10]

The zoo model's .tflite, loaded ``--copies`` times (each its own interpreter, as edge loads
candidates), timed together by the agent's own interleaved bench (``devices.agent.bench``, the
loaders and timing edge uses on a device and on this host), once with each thread count in
``--threads``; per copy and thread count, its round medians. Writes
bench/results/litert_modes.json (this host only). It is the diagnosis of the one x86 zoo model
whose default and ``--exhaustive`` choices differ (bench/zoo_choice.py, mp-face-detection): see
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

from devices.agent import bench as agent_bench  # noqa: E402
from devices.measure import Rounds  # noqa: E402
from tests.support import zoo  # noqa: E402

OUT = ROOT / "bench" / "results" / "litert_modes.json"


def timed(copies: list[str], threads: int, rounds: int, calls: int) -> list[dict[str, Any]]:
    """Each copy's round medians, all copies interleaved in one bench."""
    loaded = agent_bench.load_models(copies, threads)
    reply = agent_bench.bench_loaded(loaded, threads, Rounds(rounds=rounds, calls=calls).plan())
    return [{"copy": Path(r["model"]).name, "round_ms": [round(x, 4) for x in r["round_ms"]],
             "median_ms": round(statistics.median(r["round_ms"]), 4),
             "low_ms": round(min(r["round_ms"]), 4), "high_ms": round(max(r["round_ms"]), 4)}
            for r in reply["results"] if "round_ms" in r]  # a copy that failed: left out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    source = zoo.model(zoo.entry(args.model))
    folder = Path(tempfile.mkdtemp(prefix="litert-modes-"))
    try:
        copies = []
        for i in range(args.copies):
            copies.append(str(folder / f"copy{i}{source.suffix}"))
            shutil.copy(source, copies[-1])
        runs = {str(t): timed(copies, t, args.rounds, args.calls) for t in args.threads}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = {"provenance": provenance.record("bench/litert_modes.py", argv),
           "where": "this host only", "model": args.model, "copies": args.copies,
           "rounds": args.rounds, "calls": args.calls, "by_threads": runs}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    for threads, rows in runs.items():
        print(f"threads {threads}: " + "; ".join(
            f"{r['copy']} {r['low_ms']:.2f}-{r['high_ms']:.2f} (median {r['median_ms']:.2f})"
            for r in rows))
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mp-face-detection", help="a zoo .tflite entry")
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200, help="timed calls over the rounds")
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
