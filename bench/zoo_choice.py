#!/usr/bin/env python
"""Does skipping the candidates that cannot win change what ``edge optimize`` chooses?

    python bench/zoo_choice.py [--profile x86-64] [--only NAME ...] [--force] [--gather]

For each zoo model in the zoo's order, as a user who optimizes them one after another with one
cache: ``edge optimize`` as it is (likely winners first; a candidate whose estimated best case
cannot beat a faithful one's worst case is skipped, from the timings kept by the models
optimized before), then ``edge optimize --exhaustive`` (every candidate converted and, on a host
of the profile's kind, timed). Both arms use the same cache (``EDGE_CACHE_DIR``, fresh at the
first model): the exhaustive arm reuses the artifacts the first arm built, and the kept timings
are put back as the first arm left them, so the next model sees what a user of the default
would have kept. Per model: both choices, the candidates skipped and why, both arms' wall and
CPU seconds, and — where the choices differ — the two choices' medians as the exhaustive arm
timed them (within the tie margin, or not), and the CPU they were timed on. Each model's result
is a file under bench/results/zoo_choice/ (an interrupted run resumes: the cache dir keeps the
timings; ``--redo --only NAME`` runs a model again with the cache as it is, e.g. one timed on a
busy host; a result that ``--redo`` or ``--force`` replaces is kept under earlier/ with its time);
``--gather`` writes bench/results/zoo_choice.json with provenance.

The exhaustive arm's CPU seconds are not those of a cold ``--exhaustive`` (it reuses the first
arm's conversions): bench/speed.py compares cold runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

from edge.core.select import TIE  # noqa: E402
from tests.support import zoo  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "zoo_choice"
EDGE = [sys.executable, "-m", "edge"]
ARMS = (("default", ()), ("exhaustive", ("--exhaustive",)))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def optimize(path: Path, entry: zoo.Entry, profile: str, work: Path, extra: tuple[str, ...],
             env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One ``edge optimize --json``: its report, wall and CPU seconds (or the failure)."""
    calib, held = zoo.write_data(entry, work)
    args = [*EDGE, "optimize", str(path), "--profile", profile, "--calib", str(calib),
            "--eval", str(held), "-o", str(work / f"bundle{'-'.join(('', *extra))}"), "--json",
            *entry.shape_flags, *(a for s in entry.metrics for a in ("--metric", s)), *extra]
    cpu, start = children_cpu(), time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    took = {"wall_s": round(time.monotonic() - start, 1),
            "cpu_s": round(children_cpu() - cpu, 1)}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {"ok": False, "exit": done.returncode, "error": tail[0][:400], **took}
    return {"ok": True, **took, "report": json.loads(done.stdout)}


def ident(candidate: dict[str, Any]) -> str:
    """A candidate's id as edge names it (``original``, else TARGET-PRECISION[-VARIANT])."""
    c = candidate["candidate"]
    if c["target"] == "original":
        return "original"
    return "-".join(p for p in (c["target"], c["precision"], c.get("variant")) if p)


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """What an arm chose, what it timed and what it skipped (and why)."""
    report = run.pop("report", None)
    if report is None:
        return run
    cands = report["candidates"]
    return {**run, "chosen": report["chosen"],
            "timed_ms": {ident(c): c["bench"]["p50_ms"] for c in cands
                         if (c.get("bench") or {}).get("p50_ms") is not None},
            "skipped": {ident(c): c.get("reason") for c in cands
                        if c["status"] == "skipped"},
            "statuses": {ident(c): c["status"] for c in cands}}


def verdict(default: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """Same choice, or the default's choice within the tie margin of --exhaustive's (both as
    the exhaustive arm timed them), and whether --exhaustive's choice was skipped."""
    if not (default.get("ok") and full.get("ok")):
        return {"compared": False}
    mine, theirs = default["chosen"], full["chosen"]
    found: dict[str, Any] = {"compared": True, "same": mine == theirs,
                             "exhaustive_choice_skipped": theirs in default["skipped"]}
    if mine != theirs:
        times = full["timed_ms"]
        if mine in times and theirs in times:
            found["ratio"] = round(times[mine] / times[theirs], 3)
            found["within_tie"] = times[mine] <= times[theirs] * (1 + TIE)
        else:
            found["within_tie"] = False
    return found


def run_one(entry: zoo.Entry, profile: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both arms for one model; the kept timings put back as the default arm left them."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "EDGE_CACHE_DIR": str(args.cache)}
    kept = Path(args.cache) / "estimates.json"
    work = Path(args.work) / f"{entry.name}-{profile}"
    path = zoo.model(entry)
    arms: dict[str, Any] = {}
    for name, extra in ARMS:
        arms[name] = summary(optimize(path, entry, profile, work, extra, env, args.timeout))
        if name == "default":
            saved = kept.read_bytes() if kept.is_file() else None
    _restore(kept, saved)
    return {"model": entry.name, "profile": profile, "git_sha": provenance.git_sha(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": os.getloadavg()[0], "host": host(), **arms, "cut": cut(arms),
            "verdict": verdict(arms["default"], arms["exhaustive"])}


def cut(arms: dict[str, Any]) -> dict[str, str]:
    """The candidates the default arm skipped and --exhaustive did not (why, as edge said)."""
    mine, full = arms["default"].get("skipped", {}), arms["exhaustive"].get("skipped", {})
    return {name: why for name, why in mine.items() if name not in full}


def _restore(kept: Path, saved: bytes | None) -> None:
    if saved is None:
        kept.unlink(missing_ok=True)
    else:
        kept.write_bytes(saved)


def keep_earlier(target: Path) -> None:
    """``target`` into earlier/, under its own time (its file's, when it has none): every earlier
    run is kept."""
    try:
        when = str(json.loads(target.read_text())["when"])
    except (ValueError, KeyError, TypeError):
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(target.stat().st_mtime))
    when = when.replace(":", "-")
    (RESULTS / "earlier").mkdir(exist_ok=True)
    target.replace(RESULTS / "earlier" / f"{target.stem}@{when}.json")


def host() -> dict[str, Any]:
    """The CPU a result was timed on: its name and vector and matrix extensions."""
    found = provenance.machine()
    return {"cpu": found.get("cpu"), "isa": sorted(f for f in found.get("flags", ())
                                                   if f.startswith(("avx", "amx")))}


def gather(args: argparse.Namespace) -> None:
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    results.sort(key=lambda r: [e.name for e in zoo.entries()].index(r["model"]))
    compared = [r for r in results if r["verdict"]["compared"]]
    totals = {"models": len(results), "compared": len(compared),
              "same": sum(r["verdict"]["same"] for r in compared),
              "within_tie": sum(r["verdict"].get("within_tie", r["verdict"]["same"])
                                for r in compared),
              "exhaustive_choice_skipped": sum(r["verdict"]["exhaustive_choice_skipped"]
                                               for r in compared),
              "cut_candidates": sum(len(r["cut"]) for r in compared),
              "default_cpu_s": round(sum(r["default"].get("cpu_s", 0) for r in compared), 1)}
    earlier = [json.loads(p.read_text()) for p in sorted((RESULTS / "earlier").glob("*.json"))]
    out = {"provenance": provenance.record("bench/zoo_choice.py"), "tie": TIE,
           "totals": totals, "results": results,
           "earlier": [{"model": r["model"], "when": r["when"], "host": r.get("host"),
                        "load_average": round(r["load_average"], 2),
                        "default": r["default"].get("chosen"),
                        "exhaustive": r["exhaustive"].get("chosen"), "verdict": r["verdict"],
                        "cut": r["cut"]} for r in earlier]}
    (ROOT / "bench" / "results" / "zoo_choice.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(totals))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.gather:
        if args.force:
            shutil.rmtree(args.cache, ignore_errors=True)
        picked = [zoo.entry(n) for n in args.only] if args.only else list(zoo.entries())
        RESULTS.mkdir(parents=True, exist_ok=True)
        for entry in picked:
            target = RESULTS / f"{entry.name}-{args.profile}.json"
            if target.is_file() and not (args.force or args.redo):
                continue
            if target.is_file():  # kept, and shown beside the new result
                keep_earlier(target)
            print(f"{entry.name}: running", flush=True)
            result = run_one(entry, args.profile, args)
            target.write_text(json.dumps(result, indent=1) + "\n")
            print(f"{entry.name}: {json.dumps(result['verdict'])}", flush=True)
    gather(args)
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="x86-64")
    parser.add_argument("--only", action="append", help="a zoo entry's name (repeatable)")
    parser.add_argument("--force", action="store_true",
                        help="start again: a fresh cache, every model redone")
    parser.add_argument("--redo", action="store_true",
                        help="redo the --only models with the cache as it is (the kept timings "
                             "of every model run since, not only of those before them)")
    parser.add_argument("--gather", action="store_true", help="only write zoo_choice.json")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per edge optimize, s")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "edge-zoo-choice"))
    parser.add_argument("--work", default=str(Path.home() / ".cache" / "edge-zoo-work"))
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
