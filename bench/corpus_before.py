#!/usr/bin/env python
"""Do the corpus cases of an issue fail on the code before it? (issue 39: "each checked to fail
on today's code")

    python bench/corpus_before.py [--before 1638a1e] [--jobs 4]

Each of issue 39's hostile corpus cases (tests/support/hostile*.py, made by this checkout) is
run with the edge of ``--before`` (a git worktree of that commit, ``python -m edge`` in a child
with a fresh cache and ``$HOME``) and judged by the corpus's own rules
(tests/test_hostile_corpus.py): one ``error:`` line with the case's status and words, no
traceback, nothing written in the case's folder or the working directory, within 30 s. A case
that passes them there did not need issue 39. The result, case by case, goes to
bench/results/corpus_before.json with provenance.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

from tests.support.hostile import Case, cases  # noqa: E402
from tests.support.hostile_code import FILES  # noqa: E402
from tests.test_hostile_corpus import SECONDS, _tree  # noqa: E402

#: The files of the "code" kind that issue 39 added (the others are issue 27's).
BEFORE_39 = ("pickle-", "torch-", "script-from-file.pt", "script-save.pt", "lambda.",
             "nested-lambda.h5", "polyglot.h5", "writefile.", "readfile.", "matchingfiles.",
             "nested-writefile.", "save-op.", "saver-savev2.", "dataset-from-graph.")
#: The kinds issue 39 added whole.
KINDS_39 = ("toolchain", "arg", "loop")
#: Past this, a case is a hang there (the corpus allows SECONDS).
KILL_S = SECONDS + 10


def issue_39(case: Case) -> bool:
    kind, name = case.name.split()[:2]
    if kind in KINDS_39:
        return True
    return kind == "code" and name in FILES and not name.startswith(BEFORE_39)


def judge(case: Case, code: int, err: str, changed: list[str], took: float) -> list[str]:
    """Why the case fails the corpus's rules (none: it passes)."""
    return case.faults(code, err) + changed + ([f"{took:.0f} s"] if took > SECONDS else [])


def run(case: Case, before: Path) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="corpus-before-"))
    folder, cwd = tmp / "case", tmp / "cwd"
    folder.mkdir()
    cwd.mkdir()
    try:
        case.make(folder)
        return _run_made(case, before, tmp, folder, cwd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_made(case: Case, before: Path, tmp: Path, folder: Path, cwd: Path) -> dict[str, Any]:
    state = _tree(folder)
    env = {**os.environ, "PYTHONPATH": str(before), "EDGE_CACHE_DIR": str(tmp / "cache"),
           "HOME": str(tmp / "home"), "EDGE_LOCAL_DEVICE": str(tmp / "device")}
    if case.name.startswith("toolchain"):
        env["EDGE_TOOLCHAIN_DIR"] = str(folder / "toolchains")
    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "edge", *argv], cwd=cwd, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        _, err = child.communicate(timeout=KILL_S)
    except subprocess.TimeoutExpired:
        return {"case": case.name, "fails": True, "why": [f"a hang (killed at {KILL_S} s)"]}
    finally:  # its children too (a converter child, a model that never ends)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    changed = (["its folder changed"] if _tree(folder) != state else []) + (
        ["the working directory written"] if list(cwd.iterdir()) else [])
    why = judge(case, child.returncode, err, changed, time.monotonic() - start)
    return {"case": case.name, "fails": bool(why), "why": why}


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="edge-before-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
                   check=True, capture_output=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="1638a1e", help="the commit before the issue")
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args(argv)
    picked = [c for c in cases() if issue_39(c)]
    tree = worktree(args.before)
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda c: run(c, tree), picked))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False, capture_output=True)
    totals = {"cases": len(results), "fail_before": sum(r["fails"] for r in results),
              "by_kind": dict(Counter(r["case"].split()[0] for r in results))}
    out = {"provenance": provenance.record("bench/corpus_before.py"), "before": args.before,
           "totals": totals, "results": results}
    target = ROOT / "bench" / "results" / "corpus_before.json"
    target.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(totals))
    return 0 if totals["fail_before"] == totals["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
