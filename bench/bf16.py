#!/usr/bin/env python
"""edge's verified bf16 candidate (``openvino-bf16``) on a CPU that computes bf16 (issue 15).

    python bench/bf16.py [--models cnn oww fer hand] [--threads 1] [--rounds 25]
                         [--out bench/results/bf16.json]

Needs a host whose OpenVINO CPU plugin computes bf16 (AVX512-BF16 or AMX). For each model of
bench/peers.py: ``edge optimize`` on the original file with a profile of this host that names
its real instruction sets (``devices.cpus.cpu_isa`` of /proc/cpuinfo, so the plan keeps
``openvino-bf16``); then OpenVINO's fp32, bf16 and int8 artifacts of that bundle, and edge's
choice, timed again in one interleaved run (edge's timing, ``devices.measure``), each with
edge's own per-output verdict from the manifest. OpenVINO's own default on such a CPU is bf16,
unverified: this records where that default keeps each model's fidelity thresholds and where
it does not, and what bf16 buys over fp32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mixed_ort import in_child
from peerbench.builds import prepare, run_edge
from peerbench.common import CACHE
from peerbench.zoorun import model_parser, timed_files, write_results

from edge.core.values import Candidate

IDS = ("openvino-fp32", "openvino-bf16", "openvino-int8")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    profile = _host_profile(CACHE / "bundles", args.threads)
    found = {model: _model(model, profile, args) for model in args.models}
    write_results(args, "bench/bf16.py", argv, found, profile=profile.read_text())
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    return model_parser(__doc__.splitlines()[0], rounds=25,
                        out=Path("bench/results/bf16.json")).parse_args(argv)


def _host_profile(folder: Path, threads: int) -> Path:
    """x86-64 with this host's instruction sets (``host_isa``, as the plan reads them) and
    ``threads``; exits if it lacks bf16."""
    from edge.flows.budgets import host_isa
    from targets.openvino.target import BF16_ISA

    isa = sorted(host_isa())
    if not BF16_ISA & set(isa):
        sys.exit(f"this host computes no bf16 (its instruction sets: {', '.join(isa)})")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"x86-64-host-{threads}t.yaml"
    path.write_text(f"extends: x86-64\nid: x86-64-host-{threads}t\n"
                    f"compute: {{threads: {threads}, isa: [{', '.join(isa)}]}}\n")
    return path


def _model(model: str, profile: Path, args: argparse.Namespace) -> dict[str, Any]:
    files = in_child(prepare, model)
    out = CACHE / "bundles" / f"{model}-bf16"
    edge = run_edge(files, out, [], args.threads, profile=profile)
    manifest = edge["manifest"]
    found = {Candidate(**c["candidate"]).id: c for c in manifest["candidates"]}
    chosen = manifest.get("chosen")
    ids = [i for i in IDS if (found.get(i) or {}).get("artifact")]
    paths = {i: out / found[i]["artifact"]["file"] for i in ids}
    if chosen and chosen not in paths:
        paths["chosen: " + chosen] = out / found[chosen]["artifact"]["file"]
    timed = timed_files(paths, rounds=args.rounds, threads=args.threads)
    rows = [_row(key, found[key.removeprefix("chosen: ")], timed[key]) for key in paths]
    return {"entry": files.get("entry", model), "metrics": files.get("metrics", []),
            "edge_command": edge["command"], "chosen": chosen, "rows": rows,
            "unmade": {i: (found.get(i) or {}).get("reason") for i in IDS if i not in paths},
            "verdict": _verdict(rows, chosen)}


def _row(key: str, found: dict[str, Any], timed: dict[str, float]) -> dict[str, Any]:
    fidelity = found.get("fidelity") or {}
    return {"artifact": key, "status": found["status"], "reason": found["reason"], **timed,
            "outputs": {o["name"]: o["reason"] for o in fidelity.get("outputs", [])}}


def _verdict(rows: list[dict[str, Any]], chosen: str | None) -> dict[str, Any]:
    """bf16 over fp32 and int8 (p50 ratios), whether edge's verify kept them, edge's choice."""
    by = {r["artifact"]: r for r in rows}
    found: dict[str, Any] = {"chosen": chosen, "bf16_made": "openvino-bf16" in by}
    for i in IDS:
        if i in by:
            found[f"{i.removeprefix('openvino-')}_keeps_fidelity"] = by[i]["status"] in (
                "passed", "chosen")
    if "openvino-bf16" not in by:
        return found
    for other in ("openvino-fp32", "openvino-int8"):
        if other in by:
            ratio = by["openvino-bf16"]["p50_ms"] / by[other]["p50_ms"]
            found[f"bf16_over_{other.removeprefix('openvino-')}"] = round(ratio, 3)
    return found


if __name__ == "__main__":
    sys.exit(main())
