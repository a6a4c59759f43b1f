#!/usr/bin/env python
"""How long edge takes to a first result: the quick start, and cold and warm optimizes.

    python bench/speed.py [--quickstart] [--all-install] [--model cnn --model rapidocr-cls ...]
                          [--profile rpi4 --profile x86-64] [--before REF] [--warm]
                          [--out bench/results/speed.json]

* ``--quickstart``: the README's first command as written, in a fresh venv with pip's cache
  empty (``PIP_NO_CACHE_DIR``): wall and CPU seconds, the venv's size.
* ``--all-install``: ``pip install -e '.[all]'`` the same way: every extra's time and size.
* Each (model, profile): ``edge optimize`` with an empty cache, before (``--before REF``, a
  commit checked out beside this tree and run from it) and after (this tree), then this tree
  with ``--exhaustive`` (every candidate converted, as before): wall and CPU seconds (of the
  edge process and its children, from ``getrusage``), the chosen candidate and how many were
  converted; with ``--warm`` each arm again on its now-full cache. The arms of one (model,
  profile) run one after another, cold first, so the machine's load is shared alike.

Models: ``cnn`` (the bench MobileNetV2, bench/peerbench/models.py) and the zoo's entries
(tests/support/zoo_entries.py). CPU seconds are the robust figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

CACHE = ROOT / "bench" / ".cache" / "speed"
QUICKSTART = ("python3 -m venv {venv} && {venv}/bin/pip install -e {root} && "
              "{venv}/bin/edge deploy sample:digits --profile rpi4")


def timed(argv: list[str], *, cwd: Path, env: dict[str, str],
          timeout: float) -> dict[str, Any]:
    """Run ``argv``: exit status, wall seconds, CPU seconds (user + system, children included)
    and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        status, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        status, out, err = None, "", f"timed out after {timeout:.0f} s"
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"exit": status, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "stdout": out,
            "error": err.strip().splitlines()[-1][:300] if status and err.strip() else None}


def quickstart(timeout: float) -> dict[str, Any]:
    """The README's first command in a fresh venv, pip's cache off, edge's cache empty."""
    with tempfile.TemporaryDirectory(prefix="edge-quickstart-") as tmp:
        venv = Path(tmp) / "venv"
        env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "EDGE_CACHE_DIR": f"{tmp}/cache",
               "EDGE_LOCAL_DEVICE": f"{tmp}/device"}
        command = QUICKSTART.format(venv=venv, root=ROOT)
        run = timed(["bash", "-c", command], cwd=Path(tmp), env=env, timeout=timeout)
        size = subprocess.run(["du", "-sb", str(venv)], capture_output=True, text=True)
        run.pop("stdout")
        return {"command": QUICKSTART.format(venv=".venv", root="."), **run,
                "venv_mb": round(int(size.stdout.split()[0]) / 1e6) if size.stdout else None}


def install_all(timeout: float) -> dict[str, Any]:
    """``pip install -e '.[all]'`` into a fresh venv, pip's cache off: what every runtime costs."""
    with tempfile.TemporaryDirectory(prefix="edge-all-") as tmp:
        venv = Path(tmp) / "venv"
        command = f"python3 -m venv {venv} && {venv}/bin/pip install -e '{ROOT}[all]'"
        run = timed(["bash", "-c", command], cwd=Path(tmp),
                    env={**os.environ, "PIP_NO_CACHE_DIR": "1"}, timeout=timeout)
        size = subprocess.run(["du", "-sb", str(venv)], capture_output=True, text=True)
        run.pop("stdout")
        return {"command": "python3 -m venv .venv && .venv/bin/pip install -e '.[all]'", **run,
                "venv_mb": round(int(size.stdout.split()[0]) / 1e6) if size.stdout else None}


def model_files(name: str) -> tuple[Path, list[str]]:
    """The model file and its optimize flags (data, shapes, metrics)."""
    work = CACHE / "models" / name
    if name == "cnn":
        from peerbench.models import build_cnn

        files = build_cnn(ROOT / "bench" / ".cache" / "peers")
        return Path(files["onnx"]), ["--calib", files["calib"], "--eval", files["eval"]]
    from tests.support import zoo

    entry = next(e for e in zoo.entries() if e.name == name)
    calib, held = zoo.write_data(entry, work)
    metrics = [a for s in entry.metrics for a in ("--metric", s)]
    return zoo.model(entry), ["--calib", str(calib), "--eval", str(held),
                              *entry.shape_flags, *metrics]


def before_tree(ref: str) -> Path:
    """``ref`` checked out beside this tree (a git worktree under bench/.cache)."""
    sha = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    where = CACHE / f"before-{sha[:12]}"
    if not where.is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(where), sha], cwd=ROOT,
                       check=True, capture_output=True)
    return where


def optimize(tree: Path, model: Path, flags: list[str], profile: str, cache: Path,
             extra: list[str], timeout: float) -> dict[str, Any]:
    """``edge optimize`` from ``tree`` with ``cache`` as its cache: timings and outcome."""
    env = {**os.environ, "PYTHONPATH": str(tree), "EDGE_CACHE_DIR": str(cache),
           "PYTHONWARNINGS": "ignore"}
    out = cache.parent / f"bundle-{cache.name}"
    shutil.rmtree(out, ignore_errors=True)
    run = timed([sys.executable, "-m", "edge", "optimize", str(model), "--profile", profile,
                 *flags, *extra, "-o", str(out), "--json"], cwd=tree, env=env, timeout=timeout)
    text = run.pop("stdout")
    if run["exit"] != 0 or not text.strip():
        return run
    bundle = json.loads(text)
    statuses = [c["status"] for c in bundle["candidates"]]
    return {**run, "chosen": bundle.get("chosen"),
            "converted": sum(s in ("chosen", "passed", "rejected", "failed") for s in statuses),
            "skipped": statuses.count("skipped")}


def arms(before: Path | None) -> list[tuple[str, Path, list[str]]]:
    found = [("after", ROOT, []), ("after --exhaustive", ROOT, ["--exhaustive"])]
    return ([("before", before, [])] if before else []) + found


def one(name: str, profile: str, before: Path | None, warm: bool,
        timeout: float) -> dict[str, Any]:
    """Every arm on one (model, profile): cold, then (``warm``) again on its cache."""
    model, flags = model_files(name)
    result: dict[str, Any] = {"model": name, "profile": profile, "arms": {}}
    with tempfile.TemporaryDirectory(prefix="edge-speed-") as tmp:
        for label, tree, extra in arms(before):
            cache = Path(tmp) / label.replace(" ", "").replace("-", "")
            cold = optimize(tree, model, flags, profile, cache, extra, timeout)
            result["arms"][label] = {"cold": cold}
            if warm:
                result["arms"][label]["warm"] = optimize(tree, model, flags, profile, cache,
                                                         extra, timeout)
            print(f"{name} {profile} {label}: {result['arms'][label]}", file=sys.stderr)
    return result


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    """After over before (CPU and wall, cold), and whether the choice is --exhaustive's."""
    got = result["arms"]
    after, full = got["after"]["cold"], got["after --exhaustive"]["cold"]
    found: dict[str, Any] = {"same_choice_as_exhaustive": after.get("chosen") == full.get(
        "chosen")}
    if "before" in got and got["before"]["cold"].get("cpu_s"):
        base = got["before"]["cold"]
        found["cpu_after_over_before"] = round(after["cpu_s"] / base["cpu_s"], 3)
        found["wall_after_over_before"] = round(after["wall_s"] / base["wall_s"], 3)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quickstart", action="store_true")
    parser.add_argument("--all-install", action="store_true",
                        help="also time pip install -e '.[all]' in a fresh venv")
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--profile", action="append", default=[])
    parser.add_argument("--before", help="the commit to compare with (e.g. origin's main)")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "speed.json")
    args = parser.parse_args()
    record: dict[str, Any] = {"provenance": provenance.record("bench/speed.py"),
                              "note": "CPU seconds: user + system of edge and its children; "
                                      "pip installs from this machine's package index"}
    if args.quickstart:
        record["quickstart"] = quickstart(args.timeout)
        print(f"quickstart: {record['quickstart']}", file=sys.stderr)
    if args.all_install:
        record["all_install"] = install_all(args.timeout)
        print(f"[all]: {record['all_install']}", file=sys.stderr)
    before = before_tree(args.before) if args.before else None
    record["before"] = args.before
    runs = [one(m, p, before, args.warm, args.timeout) for m in args.model
            for p in args.profile or ["rpi4", "x86-64"]]
    record["optimize"] = [{**r, "summary": ratios(r)} for r in runs]
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"quickstart": record.get("quickstart"),
                      "summary": [(r["model"], r["profile"], r["summary"])
                                  for r in record["optimize"]]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
