#!/usr/bin/env python
"""Does the same question get the same answer? Five consecutive ``edge optimize`` runs of the
bench MobileNetV2 for a one-thread x86-64 profile, a CPU-bound process started during one of
them (issue 29's stability line).

    python bench/stability.py [--model cnn|digits] [--runs 5] [--spike-run 3] [--spike-s 6]
                              [--spike-at 0.8] [--core 0] [--no-warmup]
                              [--out bench/results/stability.json]

The model is peers.py's (bench/peerbench/models.py: the tamed MobileNetV2 on scikit-image
crops, its calibration and labelled held-out data; ``--model digits`` is the small digits CNN,
for a quick smoke run). The profile extends ``x86-64`` with ``compute.threads: 1``. Every run
is ``edge optimize ... --json`` as a user runs it, pinned to CPU ``--core`` (a one-thread
profile on one core), with one shared, warmed conversion cache (an untimed warm-up run first,
unless ``--no-warmup``), so every run reaches its timing phase at about the same moment.

During run ``--spike-run`` (1-based) a busy-loop process, pinned to the same core, starts at
``--spike-at`` of the earlier runs' median wall time (the timing phase comes last) and spins for
``--spike-s`` seconds: it takes half the core from whatever edge is timing then. Recorded per
run: the pick, its reason, every timed candidate's p50 and round medians, the manifest's
``contest`` (rounds, extra rounds of the contenders, spreads), the wall time, and for the
spiked run when the busy loop started and the CPU seconds it burned. Exit status 1 when the
picks differ (0 when all agree). Timings on a busy machine are noise: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
from peerbench.common import CACHE, CNN_RECIPE  # noqa: E402

BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("cnn", "digits"), default="cnn")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spike-run", type=int, default=3, help="1-based run with the spike")
    parser.add_argument("--spike-s", type=float, default=6.0, help="busy-loop seconds")
    parser.add_argument("--spike-at", type=float, default=0.8,
                        help="spike start, as a share of the earlier runs' median wall time")
    parser.add_argument("--core", type=int, default=0, help="the CPU edge and the spike share")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/stability.json")
    args = parser.parse_args(argv)
    if not 1 <= args.spike_run <= args.runs:
        parser.error(f"--spike-run must be 1..{args.runs}")
    return args


def model_files(model: str) -> dict[str, str]:
    """peers.py's model and data, built once and cached under bench/.cache."""
    from peerbench.models import build_cnn, build_digits

    if model == "cnn":
        return build_cnn(CACHE / CNN_RECIPE)
    return build_digits(CACHE / "digits")


def one_thread_profile(folder: Path) -> Path:
    path = folder / "x86-64-1t.yaml"
    path.write_text("extends: x86-64\nid: x86-64-1t\ncompute: {threads: 1}\n")
    return path


def pinned(core: int) -> Any:
    """A preexec_fn pinning the child to ``core`` (this machine's cores permitting)."""
    def pin() -> None:
        os.sched_setaffinity(0, {core})
    return pin


def optimize(files: dict[str, str], profile: Path, out: Path, env: dict[str, str],
             core: int) -> tuple[dict[str, Any], float]:
    """One ``edge optimize --json`` run: its manifest and wall seconds."""
    cmd = [sys.executable, "-m", "edge", "optimize", files["onnx"], "--profile", str(profile),
           "--calib", files["calib"], "--eval", files["eval"], "-o", str(out), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False,
                          preexec_fn=pinned(core))
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not (out / "manifest.json").is_file():
        sys.exit(f"edge optimize failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads((out / "manifest.json").read_text()), seconds


class Spike:
    """A busy loop pinned to ``core``, started ``after`` seconds from now for ``seconds``."""

    def __init__(self, after: float, seconds: float, core: int) -> None:
        self.after, self.seconds, self.core = after, seconds, core
        self.started: float | None = None
        self.cpu_s: float | None = None
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        time.sleep(self.after)
        self.started = time.perf_counter() - self._t0
        child = subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=self.seconds)],
                                 preexec_fn=pinned(self.core))
        _, _, usage = os.wait4(child.pid, 0)
        self.cpu_s = usage.ru_utime + usage.ru_stime

    def record(self) -> dict[str, Any]:
        self._thread.join()
        return {"planned_after_s": round(self.after, 2), "started_after_s":
                None if self.started is None else round(self.started, 2),
                "seconds": self.seconds, "cpu_s": self.cpu_s, "core": self.core}


def summary(manifest: dict[str, Any], seconds: float) -> dict[str, Any]:
    """A run's pick, reason, timings and the contest behind the pick."""
    timed = {c["candidate"]["target"] + "-" + c["candidate"]["precision"]
             + (f"-{c['candidate']['variant']}" if c["candidate"].get("variant") else ""): c
             for c in manifest["candidates"] if c.get("bench")}
    return {"pick": manifest["chosen"], "reason": manifest["reason"], "seconds": round(seconds, 1),
            "p50_ms": {k: c["bench"]["p50_ms"] for k, c in timed.items()},
            "round_ms": {k: c["bench"].get("round_ms", []) for k, c in timed.items()},
            "contest": manifest.get("contest")}


def _hit(spike: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The spike's record, saying whether it started before the run ended (it must)."""
    started = spike["started_after_s"]
    return spike | {"during_run": started is not None and started < seconds}


def spike_delay(walls: list[float], warmup: float | None, share: float) -> float:
    """When the spike starts: ``share`` of the earlier runs' median wall time (none yet: of
    the warm-up's, which converted too, so later than needed; no warm-up either: at once)."""
    return share * (statistics.median(walls) if walls else warmup or 0.0)


def run_all(args: argparse.Namespace, files: dict[str, str], work: Path) -> dict[str, Any]:
    profile = one_thread_profile(work)
    env = dict(os.environ, EDGE_CACHE_DIR=str(work / "edge-cache"))
    walls: list[float] = []
    warmup = None
    if not args.no_warmup:
        warmup = optimize(files, profile, work / "warmup.bundle", env, args.core)[1]
    runs = []
    for index in range(1, args.runs + 1):
        spike = (Spike(spike_delay(walls, warmup, args.spike_at), args.spike_s, args.core)
                 if index == args.spike_run else None)
        manifest, seconds = optimize(files, profile, work / f"run{index}.bundle", env, args.core)
        walls.append(seconds)
        row = {"run": index, **summary(manifest, seconds)}
        runs.append(row | ({"spike": _hit(spike.record(), seconds)} if spike else {}))
        print(f"run {index}: {row['pick']} ({row['seconds']} s)"
              + (" [CPU-bound process during this run]" if spike else ""), flush=True)
    return {"warmup_seconds": None if warmup is None else round(warmup, 1), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    files = model_files(args.model)
    with tempfile.TemporaryDirectory(prefix="edge-stability-") as tmp:
        result = run_all(args, files, Path(tmp))
    picks = [r["pick"] for r in result["runs"]]
    same = len(set(picks)) == 1
    report = {"provenance": provenance.record("bench/stability.py", argv),
              "model": args.model, "profile": "x86-64 with compute.threads 1",
              "core": args.core, "spike_run": args.spike_run, "picks": picks,
              "same_pick": same, **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"picks: {', '.join(map(str, picks))} -> {'the same' if same else 'DIFFERENT'}; "
          f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
