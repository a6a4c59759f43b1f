#!/usr/bin/env python
"""Claims that reproduce: each speed-up edge claimed for the zoo on this host, against the same
pair re-timed outside edge.

    python bench/zoo.py --profile x86-64 --into zoo_claims --force --only MODEL ...
    python bench/claims.py [--profile x86-64] [--update-docs]

Reads bench/results/zoo_claims/*-PROFILE.json, written by ``bench/zoo.py --into zoo_claims``
(the zoo's run of the models whose choice claims a speed-up, kept apart from the zoo's own
results, which other tables cite): edge's
claim is what optimize said of its chosen artifact against the original (the ratio of the paired
figures the choice compared, ``bench.paired_ms``; a result written before edge recorded them:
the "N.NNx the speed of the original" of its reason); reproduced is the zoo's own timing of the
same two files outside edge (bench/zoo_measure.py: each on its runtime's own API, interleaved
rounds; the original as edge's original row is: the file as the user has it, or, for an ONNX
with dynamic dims, the copy with them pinned that edge verified and timed — the pinned copy's
own speed-up over the file as it is is shown beside, a speed-up edge makes but does not claim).
A claim holds when the two agree within ``MARGIN``. Writes bench/results/claims.json (with
provenance) and, with ``--update-docs``, the table in docs/benchmarks.md between its markers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
#: A claimed speed-up reproduces when the re-timed one is within this share of it.
MARGIN = 0.15
_SAID = re.compile(r"([0-9.]+)x the speed of the original")


def claimed(result: dict[str, Any]) -> tuple[float | None, str]:
    """edge's claimed speed-up of its choice over the original, and where it was read."""
    opt = result.get("optimize") or {}
    chosen = opt.get("chosen")
    if chosen == "original":
        return 1.0, "the original kept (no speed-up claimed)"
    found = {c["id"]: c for c in opt.get("candidates") or ()}
    mine, orig = found.get(chosen or "", {}), found.get("original", {})
    if mine.get("paired_ms") and orig.get("paired_ms"):
        return orig["paired_ms"] / mine["paired_ms"], "paired figures of the choice"
    said = _SAID.search(opt.get("reason") or "")
    if said:
        return float(said.group(1)), "optimize's reason"
    return None, "no original candidate to claim against"


def row(result: dict[str, Any]) -> dict[str, Any]:
    """One model: the claim, the re-timed speed-up, and whether the claim holds."""
    claim, source = claimed(result)
    speed = (result.get("own") or {}).get("speed") or {}
    again = speed.get("speedup")
    holds = None if claim is None or again is None else abs(again / claim - 1) <= MARGIN
    return {"model": result["model"], "chosen": (result.get("optimize") or {}).get("chosen"),
            "claimed": claim, "claim_from": source, "reproduced": again,
            "reproduced_how": speed.get("note") or (
                f"{speed.get('rounds')} interleaved rounds of {speed.get('runs')} runs, "
                f"{speed.get('threads')} threads, outside edge" if again else None),
            "holds": holds, "pinning": ((result.get("own") or {}).get("pinning") or {}).get(
                "speedup"), "git_sha": result.get("git_sha")}


def gather(profile: str) -> list[dict[str, Any]]:
    return [row(json.loads(p.read_text()))
            for p in sorted((RESULTS / "zoo_claims").glob(f"*-{profile}.json"))]


def table(rows: list[dict[str, Any]], profile: str) -> list[str]:
    claims = [r for r in rows if r["claimed"] not in (None, 1.0)]
    held = [r for r in claims if r["holds"]]
    lines = [f"Speed-ups edge claimed for the zoo on {profile} (this host) against the same "
             f"pair re-timed outside edge: {len(held)} of {len(claims)} within "
             f"{MARGIN:.0%} (bench/claims.py, bench/results/claims.json).", "",
             "| model | chosen | claimed | re-timed | holds | pinned dims vs the file as is |",
             "|---|---|---|---|---|---|"]
    for r in claims:
        again = f"{r['reproduced']:.2f}x" if r["reproduced"] is not None else "not timed"
        pinned = f"{r['pinning']:.2f}x" if r.get("pinning") else "—"
        lines.append(f"| {r['model']} | {r['chosen']} | {r['claimed']:.2f}x | {again} | "
                     f"{'yes' if r['holds'] else 'no' if r['holds'] is False else '—'} | "
                     f"{pinned} |")
    return lines


def update_docs(lines: list[str]) -> None:
    text = DOC.read_text()
    if BEGIN not in text:
        text += f"\n## Claims that reproduce\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="x86-64")
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    rows = gather(args.profile)
    out = {"provenance": provenance.record("bench/claims.py", argv), "profile": args.profile,
           "margin": MARGIN, "models": rows}
    (RESULTS / "claims.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = table(rows, args.profile)
    print("\n".join(lines))
    if args.update_docs:
        update_docs(lines)
    broken = [r["model"] for r in rows if r["holds"] is False]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
