#!/usr/bin/env python
"""Run the terminal sessions shown in docs/ (every ```console block); record their output.

    python bench/examples.py [--out bench/results/examples.json] [--only NAME ...]
                             [--update-docs | --docs-only | --check]

Each session (bench/docruns/: tutorial, data, optimize, inspect, report, deploy, releases,
rollback, bench, probe, split, profiles, fleet, mender, pack, ncnn, executorch, rknn, edgetpu)
runs its commands with bash in a fresh scratch directory (the tutorial's is /tmp/edge-docs-run, as
the page says; the command pages' are /tmp/edge-docs/NAME) with its own ``EDGE_LOCAL_DEVICE``
(``device/`` there) and the tutorial's fresh ``EDGE_CACHE_DIR`` (``/tmp/edge-docs-run/cache``:
later sessions reuse its conversions), this checkout's ``.venv/bin`` first on PATH, stdout and
stderr merged as a terminal shows them, the shell's directory, exported variables and ``$?``
carried from one command to the next. The SSH examples of deploy.md and devices-probe.md run
against the test sshd of tests/support/sshd.py (root only), fleet.md's against 8 emulated devices
(tests/support/fleet_devices.py: network namespaces, one sshd each; root only). Every command's
output, exit status and wall time go into the JSON with the git sha and the machine
("provenance"). ``--update-docs`` then rewrites the pages' console blocks from it (each trimmed as
the page trims it, ``...`` marking cut lines). tests/test_doc_figures.py checks that every command
and output line shown in a console block of docs/ is in the JSON; ``--check`` (run by
tests/test_doc_figures.py, in seconds: nothing runs) that every session is recorded with its
current commands and every console block it shows is exactly what the record gives (exit 1 naming
each stale block). ``--only`` reruns some sessions and keeps the others' records. Takes about 15
minutes (the first onnx2tf conversions dominate). """

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import provenance
from docruns import (
    accelerators,
    devices,
    fleet,
    mender,
    models,
    packs,
    pages,
    profiles,
    split,
    tutorial,
)
from docruns.shell import run_session
from docruns.steps import Session

ROOT = Path(__file__).resolve().parents[1]
#: In run order: the tutorial makes the shared cache afresh, the rest reuse it.
SESSIONS: dict[str, Session] = {s.name: s for s in (
    tutorial.TUTORIAL, tutorial.DATA, models.OPTIMIZE, models.INSPECT, models.REPORT,
    devices.DEPLOY, devices.RELEASES, devices.ROLLBACK, devices.BENCH, devices.PROBE,
    split.SESSION, profiles.SESSION, fleet.SESSION, mender.SESSION, packs.PACK, accelerators.NCNN,
    accelerators.EXECUTORCH, accelerators.RKNN, accelerators.EDGETPU)}


def run(names: list[str], argv: list[str] | None, out: Path) -> dict[str, Any]:
    """Run the sessions ``names``; the JSON document (other sessions kept from ``out``)."""
    doc = json.loads(out.read_text()) if out.is_file() else {"sessions": {}}
    record = provenance.record("bench/examples.py", argv)
    for name in names:
        doc["sessions"][name] = {**run_session(SESSIONS[name], tutorial.CACHE),
                                 "provenance": record}
    doc["sessions"] = {name: doc["sessions"][name] for name in SESSIONS
                       if name in doc["sessions"]}
    doc["provenance"] = record
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def update_docs(doc: dict[str, Any]) -> list[str]:
    """Rewrite the console blocks of every page a recorded session shows."""
    texts = {}
    for name, session in SESSIONS.items():
        if name in doc["sessions"]:
            texts.update(pages.block_texts(doc["sessions"][name], session))
    return pages.rewrite(texts)


def check(doc: dict[str, Any]) -> list[str]:
    """What keeps the pages from being their record: sessions not recorded, commands changed
    since, console blocks that differ from the recorded output."""
    problems: list[str] = []
    texts: dict[tuple[str, int], list[str]] = {}
    for name, session in SESSIONS.items():
        if name not in doc["sessions"]:
            problems.append(f"{name}: not recorded (run bench/examples.py --only {name})")
            continue
        problems += pages.changed_commands(doc["sessions"][name], session)
        try:
            texts.update(pages.block_texts(doc["sessions"][name], session))
        except ValueError as exc:
            problems.append(str(exc))
    return problems + pages.stale(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "examples.json")
    parser.add_argument("--only", nargs="+", choices=list(SESSIONS), metavar="NAME",
                        help=f"run only these sessions ({', '.join(SESSIONS)})")
    parser.add_argument("--update-docs", action="store_true", help="rewrite the console blocks")
    parser.add_argument("--docs-only", action="store_true",
                        help="run nothing: rewrite the console blocks from the --out JSON")
    parser.add_argument("--check", action="store_true",
                        help="run nothing: exit 1 unless every console block is its record")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(json.loads(args.out.read_text()))
        print("\n".join(problems) or "every console block is its recorded output")
        return 1 if problems else 0
    if args.docs_only:
        doc = json.loads(args.out.read_text())
    else:
        doc = run(args.only or list(SESSIONS), argv, args.out)
        print(f"json: {args.out}")
    if args.update_docs or args.docs_only:
        print("rewrote the console blocks of " + ", ".join(update_docs(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
