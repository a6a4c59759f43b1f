#!/usr/bin/env python
"""Does edge's per-layer mixed plan beat all-int8 and all-float here (issue 15)?

    python bench/mixed_plan.py [--model cnn] [--threads 1] [--rounds 15] [--out PATH]

Runs ``edge optimize`` on a model of bench/peers.py (its calibration and eval data, a profile
of this host at ``--threads``, as peers.py runs it), then times the bundle's OpenVINO int8,
fp32 and int8-mixed artifacts (``openvino-int8-mixed``: the layers of the kinds int8 does not
speed up kept float) in one interleaved run with edge's own timing (``devices.measure``), each
whatever its fidelity verdict, which is recorded beside it with the plan's note. The plan pays
only if it keeps fidelity and is at least 3% faster than both all-int8 and fp32.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import provenance
from mixed_ort import in_child
from peerbench.builds import prepare, run_edge
from peerbench.common import CACHE
from peerbench.report import machine
from peerbench.zoorun import timed_files

from edge.core.values import Candidate

IDS = ("openvino-int8", "openvino-fp32", "openvino-int8-mixed")
MARGIN = 0.97


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    files = in_child(prepare, args.model)
    out = CACHE / "bundles" / f"{args.model}-mixed"
    edge = run_edge(files, out, [], args.threads)
    found = {Candidate(**c["candidate"]).id: c for c in edge["manifest"]["candidates"]}
    missing = [i for i in IDS if (found.get(i) or {}).get("artifact") is None]
    if missing:
        sys.exit(f"no artifact for {', '.join(missing)}: "
                 + "; ".join(f"{i}: {(found.get(i) or {}).get('reason')}" for i in missing))
    timed = timed_files({i: out / found[i]["artifact"]["file"] for i in IDS},
                        rounds=args.rounds, threads=args.threads)
    rows = [_row(found[i], timed[i]) for i in IDS]
    doc = {"model": args.model, "threads": args.threads, "rounds": args.rounds,
           "machine": machine(), "edge_command": edge["command"], "rows": rows,
           "verdict": _verdict(rows), "provenance": provenance.record("bench/mixed_plan.py", argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"rows": rows, "verdict": doc["verdict"]}, indent=1))
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn", choices=("cnn", "digits", "fer", "hand", "oww"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    args.out = args.out or Path(f"bench/results/mixed-plan-{args.model}.json")
    return args


def _row(found: dict[str, Any], timed: dict[str, float]) -> dict[str, Any]:
    notes = found["artifact"]["notes"]
    return {"candidate": Candidate(**found["candidate"]).id, "status": found["status"],
            "reason": found["reason"], **timed,
            "kept_float": len(found["artifact"].get("kept_float") or ()),
            "plan": next((n for n in notes if n.startswith("per-layer plan:")), None)}


def _verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    int8, fp32, mixed = (r["p50_ms"] for r in rows)
    keeps = rows[2]["status"] in ("passed", "chosen")
    return {"mixed_over_int8": round(mixed / int8, 3), "mixed_over_fp32": round(mixed / fp32, 3),
            "mixed_keeps_fidelity": keeps, "margin": MARGIN,
            "pays": keeps and mixed <= MARGIN * min(int8, fp32)}


if __name__ == "__main__":
    raise SystemExit(main())
