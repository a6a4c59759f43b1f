#!/usr/bin/env python
"""Benchmark edge's choice against peers' one-command defaults, on one model, in one run.

    python bench/peers.py [--model cnn|digits|fer|hand|oww] [--threads N] [--rounds R]
                          [--prune [RATIO]] [--prune-budget S] [--runtimes A,B,...]
                          [--out FILE]

Rows: edge's choice (``edge optimize --profile x86-64`` run as a subprocess on the file a user
would pass, with the model's ``--metric``/``--shape`` flags and any ``--prune`` flags; its
manifest's chosen artifact loaded with edge's own target loader), each peer's documented
one-command default (ORT quantize_static after quant_pre_process, ORT quantize_dynamic, OpenVINO
convert_model + compile_model, NNCF quantize + compile_model, onnx2tf -> float32 .tflite on
LiteRT) and the ORT fp32 baseline. cnn and digits are built here; fer, hand and oww are trained
models of the zoo (tests/support/zoo_entries.py), the peers starting from the ONNX edge's
intake reads them into. Every row runs with the same thread count, is timed in ONE process in
interleaved rounds (order alternates, ~100 ms idle and a re-warm before every timed block) and
is judged per output against ORT fp32 on held-out inputs by edge's own rules
(edge.core.verify's measure and judge, peerbench/judging.py). A roofline (peak GOPS measured
with a 2048^3 GEMM per precision; MACs from ``edge inspect``) bounds the latency.

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

import provenance
from peerbench.builds import edge_flags, inspect, prepare, run_edge
from peerbench.common import CACHE, ROOT
from peerbench.judging import judge_rows, load_eval
from peerbench.measure import interleaved, peak_by_precision, roofline
from peerbench.report import (
    edge_digest,
    edge_table,
    failures,
    machine,
    summarize,
    table,
    verdict,
)
from peerbench.runners import edge_rows, peer_rows
from peerbench.zoomodels import ZOO


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("cnn", "digits", *ZOO), default="cnn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds")
    ap.add_argument("--prune", type=float, nargs="?", const=0.5, metavar="RATIO",
                    help="passed to edge optimize (0.5 when bare)")
    ap.add_argument("--prune-budget", type=float, metavar="S",
                    help="passed to edge optimize (its default when not given)")
    ap.add_argument("--runtimes", type=lambda s: tuple(s.split(",")), default=(),
                    help="edge's candidate runtimes instead of the x86-64 profile's, e.g. "
                    "onnxruntime,openvino,tflite,ncnn,executorch")
    ap.add_argument("--out", type=Path, help="JSON results (default "
                    "bench/results/peers-<model>[-<N>t][-runtimes].json)")
    args = ap.parse_args(argv)
    if args.out is None:
        suffix = ("" if args.threads == 1 else f"-{args.threads}t") + (
            "-runtimes" if args.runtimes else "")
        args.out = ROOT / "bench" / "results" / f"peers-{args.model}{suffix}.json"
    return args


def prune_flags(args: argparse.Namespace) -> list[str]:
    """``--prune`` / ``--prune-budget`` as edge optimize takes them."""
    flags = [] if args.prune is None else ["--prune", str(args.prune)]
    return flags + ([] if args.prune_budget is None else ["--prune-budget",
                                                         str(args.prune_budget)])


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
    extra = prune_flags(args)
    log(f"{info['params']:,} params, {info['macs']:,} MACs; running edge optimize "
        f"{' '.join(edge_flags(files, extra))}")
    bundle_dir = CACHE / "bundles" / (args.model + ("-prune" if extra else "")
                                      + "".join(f"-{r}" for r in args.runtimes))
    edge = run_edge(files, bundle_dir, extra, args.threads, runtimes=args.runtimes)
    log(f"edge chose {edge['manifest']['chosen']} in {edge['seconds']} s; roofline GEMMs")
    peaks = in_child(roofline, args.threads)
    rows = edge_rows(edge, bundle_dir, args.threads) + peer_rows(files, args.threads)
    reference = judge_rows(rows, files["eval"], files["metrics"])
    timed = [r for r in rows if r.run is not None and r.fidelity]
    log(f"timing {len(timed)} rows, {args.rounds} interleaved rounds, {args.threads} thread(s)")
    interleaved(timed, load_eval(files["eval"])[0][:1], args.rounds)
    best = peak_by_precision(peaks)
    results = summarize(rows, info["macs"], best)
    report = {
        "model": args.model, "threads": args.threads, "rounds": args.rounds,
        "edge_runtimes": list(args.runtimes) or "the x86-64 profile's",
        "command": provenance.record("bench/peers.py", argv)["command"],
        "machine": host, "edge_source_digest": edge_digest(), "params": info["params"],
        "macs": info["macs"], "files": _files(files), "edge_flags": edge_flags(files, extra),
        "reference": reference, "fp32_accuracy": reference["fp32_accuracy"],
        "eval_samples": reference["samples"],
        "peak_gops": peaks, "peak_gops_best": best, "edge": edge, "results": results,
        "verdict": verdict(results, args.threads), "loadavg_at_end": os.getloadavg(),
        "wall_s": round(time.perf_counter() - start, 1),
        "provenance": provenance.record("bench/peers.py", argv)}
    report["edge"]["manifest"] = _slim(edge["manifest"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print_report(report)
    log(f"wrote {args.out} ({report['wall_s']} s)")
    return 0


def _files(files: dict[str, Any]) -> dict[str, Any]:
    """What the rows started from (paths relative to the repository when inside it)."""
    keep = ("entry", "package", "member", "task", "source", "onnx", "calib", "eval")
    return {k: str(files[k]).replace(str(ROOT) + "/", "") for k in keep if k in files}


def _slim(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without the repeated profile spec."""
    return {k: v for k, v in manifest.items() if k != "profile_spec"}


def print_report(report: dict[str, Any]) -> None:
    acc = report["fp32_accuracy"]
    print(f"\n## {report['model']}: {report['params']:,} params, {report['macs']:,} MACs, "
          f"{report['threads']} thread(s); {report['eval_samples']} held-out samples"
          + ("" if acc is None else f", fp32 accuracy {100 * acc:.1f}%") + "\n")
    print(f"outputs judged as {json.dumps(report['reference']['kinds'])}\n")
    print(table(report["results"]))
    print("\n" + failures(report["results"]))
    print(f"\npeak GOPS ({report['threads']} thread(s)): {json.dumps(report['peak_gops'])}")
    print(f"\nedge optimize ({report['edge']['seconds']} s): chosen "
          f"{report['edge']['manifest']['chosen']}: {report['edge']['manifest']['reason']}\n")
    print(edge_table(report["edge"]["manifest"]))
    print(f"\nverdict: {json.dumps(report['verdict'], indent=1)}")


if __name__ == "__main__":
    sys.exit(main())
