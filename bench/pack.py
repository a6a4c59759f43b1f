#!/usr/bin/env python
"""edge's pack plan against the naive one, run together on this host (real contention).

    python bench/pack.py [PACK.yaml] [--profile x86-64] [--seconds 3] [--repeats 3]
                         [--out bench/results/pack.json]

PACK.yaml defaults to bench/packs/trio.yaml, whose models (the zoo's, from their pip wheels)
are copied with it into a scratch folder first.

``edge pack plan PACK.yaml`` plans the pack on the embedded local device (this host: its own
cores are the device's) and proves its plan by a co-run. Then both plans — edge's and the
naive one (each model's fastest candidate alone at the device's default threads, every model
over every core, unpinned) — are co-run on the device at the pack's rates times a factor,
side by side: at each factor, the two in turn (order swapped every repeat), ``--repeats``
times. A plan holds at a factor when every model's median p99 over the repeats is within its
objective and its median drops within 1 %. Its throughput at the objectives: the largest
factor it holds up to (there and at every smaller factor of the grid) times the sum of the
rates; also computed, from the same runs, at twice the p99 objectives. Written to
bench/results/pack.json with provenance (git sha, machine, CPU flags).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import record  # noqa: E402

FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 5.0, 6.0,
           8.0)
DROPS = 0.01


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.pack = args.pack or _trio()
    device = Path(args.device or tempfile.mkdtemp(prefix="edge-pack-bench-"))
    env = dict(os.environ, EDGE_LOCAL_DEVICE=str(device))
    report = _plan(args, env)
    agent = _agent()
    arms = {"edge": report["plan"]["models"], "naive": report["naive"]["models"]}
    runs = _sweep(arms, agent, args)
    result = _summary(report, runs, arms)
    out = {"provenance": record("bench/pack.py", argv), "pack": str(args.pack),
           "pack_yaml": args.pack.read_text(), "profile": args.profile,
           "seconds": args.seconds, "repeats": args.repeats, "factors": list(FACTORS),
           "plan": report["plan"], "naive": report["naive"], "co_run": report["tried"],
           "runs": runs, **result}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _trio() -> Path:
    """bench/packs/trio.yaml and its zoo models, in a scratch folder."""
    from tests.support.zoo import entry, model

    folder = Path(tempfile.mkdtemp(prefix="edge-pack-trio-"))
    for name in ("rapidocr-det", "rapidocr-cls", "oww-embedding"):
        shutil.copy(model(entry(name)), folder)
    shutil.copy(ROOT / "bench" / "packs" / "trio.yaml", folder)
    return folder / "trio.yaml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pack", type=Path, nargs="?", default=None)
    parser.add_argument("--profile", default="x86-64")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", help="the local device's folder [a new temp dir]")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "pack.json"))
    return parser


def _plan(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "edge", "pack", "plan", str(args.pack),
                           "--profile", args.profile, "--seconds", str(args.seconds),
                           "-o", str(args.pack.parent / "bundles"), "--json"], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"edge pack plan failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _agent() -> str:
    from devices.agentfile import agent_file

    return str(agent_file())


def _sweep(arms: dict[str, list[dict[str, Any]]], agent: str,
           args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every factor, every repeat, both arms in turn (the order swapped each repeat); stops
    after the first factor neither arm holds at."""
    runs = []
    for factor in FACTORS:
        at = []
        for repeat in range(args.repeats):
            order = list(arms) if repeat % 2 == 0 else list(arms)[::-1]
            for arm in order:
                at.append({"factor": factor, "repeat": repeat, "arm": arm,
                           "jobs": _corun(agent, arms[arm], factor, args.seconds)})
        runs += at
        held = {arm: _holds(at, arm, arms[arm]) for arm in arms}
        print(f"factor {factor}: {held}", file=sys.stderr, flush=True)
        if not any(held.values()):
            break
    return runs


def _corun(agent: str, models: list[dict[str, Any]], factor: float,
           seconds: float) -> list[dict[str, Any]]:
    jobs = [{"name": m["name"], "model": m["file"], "rate": m["rate"] * factor,
             "threads": m["threads"], "cores": m["cores"] if m["pinned"] else None,
             "unit": m["unit"]} for m in models]
    done = subprocess.run([sys.executable, agent, "corun", "--jobs", json.dumps(jobs),
                           "--seconds", str(seconds), "--no-alone"], capture_output=True,
                          text=True, check=True)
    return [{"name": j["name"], **j["together"]} for j in json.loads(done.stdout)["jobs"]]


def _holds(at: list[dict[str, Any]], arm: str, models: list[dict[str, Any]],
           looser: float = 1.0) -> bool:
    """Whether every model's median p99 over the repeats is within its objective (times
    ``looser``) and its median drops within DROPS."""
    runs = [r for r in at if r["arm"] == arm]
    if not runs:
        return False  # a factor past the sweep's end: not held
    for model in models:
        mine = [next(j for j in r["jobs"] if j["name"] == model["name"]) for r in runs]
        p99 = statistics.median(j["p99_ms"] if j["p99_ms"] is not None else float("inf")
                                for j in mine)
        drops = statistics.median(j["dropped"] / max(j["frames"], 1) for j in mine)
        objective = model["p99_objective_ms"]
        if drops > DROPS or (objective is not None and p99 > objective * looser):
            return False
    return True


def _summary(report: dict[str, Any], runs: list[dict[str, Any]],
             arms: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """At the pack's objectives (and, from the same runs, at twice its p99 objectives): the
    factor each plan holds up to (it holds there and at every smaller factor), its throughput
    at the objectives and the ratio."""
    return {"at_the_objectives": _held(report, runs, arms, 1.0),
            "at_twice_the_p99_objectives": _held(report, runs, arms, 2.0)}


def _held(report: dict[str, Any], runs: list[dict[str, Any]],
          arms: dict[str, list[dict[str, Any]]], looser: float) -> dict[str, Any]:
    rates = sum(m["rate"] for m in report["plan"]["models"])
    best = {}
    for arm in arms:
        best[arm] = 0.0
        for factor in FACTORS:
            if not _holds([r for r in runs if r["factor"] == factor], arm, arms[arm], looser):
                break
            best[arm] = factor
    ratio = best["edge"] / best["naive"] if best["naive"] else None
    at_one = [r for r in runs if r["factor"] == 1.0]
    return {"holds_up_to_factor": best,
            "throughput_at_objectives_per_s": {a: round(best[a] * rates, 3) for a in arms},
            "ratio_edge_over_naive": None if ratio is None else round(ratio, 3),
            "meets_at_1x": {a: _holds(at_one, a, arms[a], looser) for a in arms}}


if __name__ == "__main__":
    raise SystemExit(main())
