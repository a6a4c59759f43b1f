"""Results, verdict, markdown tables, and what the numbers were measured on."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from .common import NOISE, ROOT
from .measure import bound_ms
from .runners import Row

# ====================================================================== report


def summarize(rows: list[Row], macs: int, peaks: dict[str, float]) -> list[dict[str, Any]]:
    """Per-row results with p50/p90 and ratios vs ORT fp32 and vs edge's choice."""
    base = _p50(next(r for r in rows if r.kind == "baseline"))
    edge = _edge_p50(rows)
    out = []
    for row in rows:
        p50 = _p50(row)
        bound = bound_ms(macs, row.compute, peaks)
        out.append({
            "name": row.name, "kind": row.kind, "runtime": row.runtime, "compute": row.compute,
            "how": row.how, "error": row.error, "build_s": row.build_s,
            "p50_ms": p50, "p90_ms": float(np.percentile(row.times, 90)) if row.times else None,
            "samples": len(row.times),
            "speedup_vs_fp32": base / p50 if p50 and base else None,
            "edge_speedup_over_this": p50 / edge if p50 and edge else None,
            "roofline_bound_ms": bound,
            "roofline_fraction": bound / p50 if bound and p50 else None,
            **row.fidelity})
    return out


def _p50(row: Row) -> float | None:
    return float(np.median(row.times)) if row.times else None


def _edge_p50(rows: list[Row]) -> float | None:
    """edge's row: as edge loads it (the bf16 variant counts only if it keeps fidelity)."""
    timed = [r for r in rows if r.kind == "edge" and r.times and r.fidelity.get("keeps")]
    return min((_p50(r) for r in timed), default=None)  # type: ignore[type-var]


def verdict(results: list[dict[str, Any]], threads: int = 1) -> dict[str, Any]:
    """The issue's done-when: edge >= the best peer default at equal or better fidelity, and
    >= 2x ORT fp32. Fidelity is edge's own judge, per output (``keeps``)."""
    edge = [r for r in results if r["kind"] == "edge" and r["p50_ms"] and r.get("keeps")]
    peers = [r for r in results if r["kind"] == "peer" and r["p50_ms"]]
    faithful = [r for r in peers if r.get("keeps")]
    if not edge or not peers:
        return {"threads": threads, "error": _no_verdict(results, bool(peers))}
    mine = min(edge, key=lambda r: r["p50_ms"])
    fastest = min(peers, key=lambda r: r["p50_ms"])
    best = min(faithful, key=lambda r: r["p50_ms"]) if faithful else None
    ratio = best["p50_ms"] / mine["p50_ms"] if best else None
    as_close = [r for r in peers if r.get("cosine", 0) >= mine["cosine"] - 1e-4]
    close = min(as_close, key=lambda r: r["p50_ms"]) if as_close else None
    return {
        "threads": threads,
        "edge_row": mine["name"], "edge_p50_ms": mine["p50_ms"],
        "edge_speedup_vs_fp32": mine["speedup_vs_fp32"],
        "fastest_peer": fastest["name"], "fastest_peer_ratio": fastest["p50_ms"] / mine["p50_ms"],
        "fastest_peer_keeps_fidelity": bool(fastest.get("keeps")),
        "best_faithful_peer": best["name"] if best else None,
        "best_faithful_peer_p50_ms": best["p50_ms"] if best else None,
        "best_faithful_peer_ratio": ratio,
        "not_slower_than_best_peer": ratio is not None and ratio >= 1.0,
        "within_noise_of_best_peer": ratio is not None and ratio >= 1.0 - NOISE,
        "at_least_2x_fp32": (mine["speedup_vs_fp32"] or 0) >= 2.0,
        "fastest_peer_with_cosine_at_least_edges": close["name"] if close else None,
        "its_ratio": close["p50_ms"] / mine["p50_ms"] if close else None,
    }


def _no_verdict(results: list[dict[str, Any]], peers: bool) -> str:
    """Why there is no verdict: edge's row failed or lost fidelity, or every peer failed."""
    if not peers:
        return "every peer failed"
    edge = [r for r in results if r["kind"] == "edge"]
    why = "; ".join(f"{r['name']}: {r.get('error') or r.get('failure')}" for r in edge)
    return f"edge's choice has no timed row that keeps fidelity ({why or 'no row'})"


def failures(results: list[dict[str, Any]]) -> str:
    """One line per row that does not keep fidelity or did not run: why."""
    lines = [f"- {r['name']}: {r.get('error') or r.get('failure')}" for r in results
             if r.get("error") or not r.get("keeps")]
    return "\n".join(["rows that drop out or do not keep fidelity (edge's judge):", *lines]
                     if lines else ["every row keeps fidelity (edge's judge)"])


def table(results: list[dict[str, Any]]) -> str:
    """A markdown table of every row."""
    head = ("| candidate | compute | p50 ms | p90 ms | fp32 p50 / p50 | p50 / edge p50 | "
            "cosine | top-1 agree | accuracy | roofline bound |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        if r["p50_ms"] is None:
            lines.append(f"| {r['name']} | {r['compute']} | {r['error']} |" + " |" * 7)
            continue
        lines.append(
            f"| {r['name']} | {r['compute']} | {r['p50_ms']:.3f} | {r['p90_ms']:.3f} | "
            f"{_x(r['speedup_vs_fp32'])} | {_x(r['edge_speedup_over_this'])} | "
            f"{_f(r.get('cosine'), 4)}{'' if r.get('keeps') else ' ✗'} | "
            f"{_pct(r.get('top1_agreement'))} | {_pct(r.get('accuracy'))} | "
            f"{_f(r['roofline_bound_ms'], 3)} ms ({_pct(r['roofline_fraction'])}) |")
    return "\n".join(lines)


def edge_table(manifest: dict[str, Any]) -> str:
    """edge's own view: every candidate's status, fidelity and its host timing."""
    lines = ["| edge candidate | status | p50 ms (edge's timing) | threads | cosine | reason |",
             "|---|---|---|---|---|---|"]
    for c in manifest["candidates"]:
        bench, fid = c.get("bench") or {}, c.get("fidelity") or {}
        lines.append(f"| {_candidate_id(c['candidate'])} | "
                     f"{c['status']} | {_f(bench.get('p50_ms'), 3)} | "
                     f"{bench.get('threads', '')} | {_f(fid.get('cosine'), 4)} | "
                     f"{c['reason'][:90]} |")
    return "\n".join(lines)


def _candidate_id(cand: dict[str, Any]) -> str:
    """TARGET-PRECISION[-VARIANT] (e.g. onnxruntime-int8-pruned), as edge names it."""
    return "-".join(p for p in (cand["target"], cand["precision"], cand.get("variant")) if p)


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _f(v: float | None, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


def edge_digest() -> str:
    """A hash of edge's source (edge/, targets/): which edge these numbers belong to."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("edge/**/*.py"), *ROOT.glob("targets/**/*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    from importlib.metadata import version

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text()
                .splitlines() if ln.startswith("model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text()
                  .splitlines() if ln.startswith("flags")), [])
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16",
              "amx_int8")
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": [f for f in wanted if f in flags],
            "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
            "versions": {p: version(p) for p in ("onnxruntime", "openvino", "nncf", "onnx2tf",
                                                  "ai-edge-litert", "tensorflow", "numpy",
                                                  "scikit-image", "torch")}}


