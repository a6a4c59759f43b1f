#!/usr/bin/env python
"""Benchmark edge's choice against peers' one-command defaults, on one model, in one run.

    python bench/peers.py [--model cnn|digits] [--threads N] [--out FILE]

Rows: edge's choice (``edge optimize --profile x86-64`` run as a subprocess, its manifest's chosen
artifact loaded with edge's own target loader), each peer's documented one-command default
(ORT quantize_static after quant_pre_process, ORT quantize_dynamic, OpenVINO convert_model +
compile_model, NNCF quantize + compile_model, onnx2tf -> float32 .tflite on LiteRT) and the ORT
fp32 baseline. Every row runs with the same thread count, is timed in ONE process in interleaved
rounds (order alternates, ~100 ms idle and a re-warm before every timed block) and is compared
with ORT fp32 on held-out inputs (mean cosine, top-1 agreement, accuracy). A roofline (peak GOPS
measured with a 2048^3 GEMM per precision; MACs from ``edge inspect``) bounds the latency.

Conversions, model building and the roofline run in child processes, so the timing process
holds only the runtimes being timed. Everything cached goes under bench/.cache.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import provenance
from peerbench.builds import inspect, prepare, run_edge
from peerbench.common import CACHE, ROOT
from peerbench.measure import fidelity, interleaved, keeps_fidelity, peak_by_precision, roofline
from peerbench.report import edge_digest, edge_table, machine, summarize, table, verdict
from peerbench.runners import Row, edge_rows, peer_rows


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("cnn", "digits"), default="cnn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds")
    ap.add_argument("--out", type=Path, help="JSON results (default "
                    "bench/results/peers-<model>[-<N>t].json)")
    args = ap.parse_args(argv)
    if args.out is None:
        suffix = "" if args.threads == 1 else f"-{args.threads}t"
        args.out = ROOT / "bench" / "results" / f"peers-{args.model}{suffix}.json"
    return args


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` in a fresh spawned process (keeps torch/TF/NNCF out of the timing process)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def log(text: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start = time.perf_counter()
    host = machine()
    log(f"model {args.model}: building model, data and peer artifacts (child process)")
    files = in_child(prepare, args.model)
    info = inspect(files["onnx"])
    log(f"{info['params']:,} params, {info['macs']:,} MACs; running edge optimize")
    bundle_dir = CACHE / "bundles" / args.model
    edge = run_edge(files, bundle_dir)
    log(f"edge chose {edge['manifest']['chosen']} in {edge['seconds']} s; roofline GEMMs")
    peaks = in_child(roofline, args.threads)
    rows = edge_rows(edge, bundle_dir, args.threads) + peer_rows(files, args.threads)
    ref_accuracy = measure_fidelity(rows, files)
    timed = [r for r in rows if r.run is not None and r.fidelity]
    log(f"timing {len(timed)} rows, {args.rounds} interleaved rounds, {args.threads} thread(s)")
    interleaved(timed, np.load(files["eval"])["input"][:1], args.rounds)
    best = peak_by_precision(peaks)
    results = summarize(rows, info["macs"], best)
    report = {
        "model": args.model, "threads": args.threads, "rounds": args.rounds,
        "command": provenance.record("bench/peers.py", argv)["command"],
        "machine": host, "edge_source_digest": edge_digest(), "params": info["params"],
        "macs": info["macs"],
        "fp32_accuracy": ref_accuracy, "eval_samples": int(len(np.load(files["eval"])["labels"])),
        "peak_gops": peaks, "peak_gops_best": best, "edge": edge, "results": results,
        "verdict": verdict(results), "loadavg_at_end": os.getloadavg(),
        "wall_s": round(time.perf_counter() - start, 1),
        "provenance": provenance.record("bench/peers.py", argv)}
    report["edge"]["manifest"] = _slim(edge["manifest"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print_report(report)
    log(f"wrote {args.out} ({report['wall_s']} s)")
    return 0


def measure_fidelity(rows: list[Row], files: dict[str, Any]) -> float:
    """Fill every row's fidelity vs the baseline on the held-out set; return fp32 accuracy."""
    held = np.load(files["eval"])
    xs, labels = held["input"].astype(np.float32), held["labels"]
    base = next(r for r in rows if r.kind == "baseline")
    ref = [np.asarray(base.run(xs[i:i + 1]), np.float64).ravel() for i in range(len(xs))]
    ref_accuracy = float(np.mean(np.array([int(np.argmax(r)) for r in ref]) == labels))
    for row in rows:
        if row.run is None:
            continue
        try:
            row.fidelity = fidelity(row.run, xs, ref, labels)
        except Exception as exc:  # noqa: BLE001 - a row that cannot run drops out
            row.error, row.run = f"run failed: {type(exc).__name__}: {str(exc)[:200]}", None
            continue
        row.fidelity["keeps"] = keeps_fidelity(row.fidelity, ref_accuracy)
    return ref_accuracy


def _slim(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without the repeated profile spec."""
    return {k: v for k, v in manifest.items() if k != "profile_spec"}


def print_report(report: dict[str, Any]) -> None:
    print(f"\n## {report['model']}: {report['params']:,} params, {report['macs']:,} MACs, "
          f"{report['threads']} thread(s); fp32 accuracy {100 * report['fp32_accuracy']:.1f}% "
          f"on {report['eval_samples']} held-out samples\n")
    print(table(report["results"]))
    print(f"\npeak GOPS ({report['threads']} thread(s)): {json.dumps(report['peak_gops'])}")
    print(f"\nedge optimize ({report['edge']['seconds']} s): chosen "
          f"{report['edge']['manifest']['chosen']}: {report['edge']['manifest']['reason']}\n")
    print(edge_table(report["edge"]["manifest"]))
    print(f"\nverdict: {json.dumps(report['verdict'], indent=1)}")


if __name__ == "__main__":
    sys.exit(main())
