"""``edge report``: one self-contained HTML file with inline SVG plots and the tables.

A report needs no network to view: no scripts, no external CSS, fonts or images (its Content
Security Policy forbids loading anything). Plots are drawn with matplotlib's Agg backend and
inlined as SVG (text kept as text). matplotlib is imported only while rendering.

* Bundle (``edge optimize -o DIR``): candidates on a host-latency x fidelity plane with the
  chosen one marked; per-layer time of up to six candidates, each on its own runtime
  (onnxruntime, OpenVINO, LiteRT; see ``targets.layers``), measured on this host;
  the p50 history of every device that measured one of the bundle's artifacts (from
  ``$EDGE_CACHE_DIR/results``); the candidate table with every reason.
* Split (``edge partition -o DIR``): every precomputed cut's predicted latency against the
  uplink bandwidth, the best envelope and the bandwidth regimes of split.yaml; the tables.
* Results (a results folder or one device's folder): the per-device history alone.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from edge.core.bundle import is_bundle
from edge.core.errors import UsageError
from edge.core.files import write_atomic
from edge.flows.report.bundle import render_bundle_report
from edge.flows.report.history import render_results_report
from edge.flows.report.split import render_partition_report

__all__ = ["check_report_target", "render_bundle_report", "render_partition_report",
           "render_report", "render_results_report", "report_kind", "write_report"]


def report_kind(path: Path) -> str:
    """``bundle``, ``split`` or ``results`` for a report source; UsageError otherwise."""
    path = Path(path)
    if is_bundle(path):
        return "bundle"
    if (path.is_dir() and (path / "split.yaml").is_file()) or (
            path.is_file() and path.name == "split.yaml"):
        return "split"
    if path.is_dir() and (any(path.glob("*.jsonl")) or any(path.glob("*/*.jsonl"))):
        return "results"
    raise UsageError(f"{path}: not a bundle (manifest.json), a split (split.yaml) or a results "
                     "folder ($EDGE_CACHE_DIR/results)")


def render_report(path: Path, *, layers: bool = True, device: Any = None) -> str:
    """The HTML report of a bundle, a split or a results folder (see ``report_kind``)."""
    kind = report_kind(path)
    if kind == "bundle":
        return render_bundle_report(path, layers=layers, device=device)
    if kind == "split":
        return render_partition_report(path)
    return render_results_report(path)


def check_report_target(out: Path) -> None:
    """Refuse, before any work, a report path that cannot be written or drawn."""
    out = Path(out)
    if out.is_dir():
        raise UsageError(f"--report {out}: is a directory; give a file name such as report.html")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--report {out}: cannot write in {parent}; choose another place")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--report draws with matplotlib: pip install 'edge[report]'")


def write_report(text: str, out: Path) -> Path:
    """Write the report atomically (a reader sees the old file or the new one)."""
    out = Path(out)
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; give a file name such as report.html")
    return write_atomic(out, text)  # makes the missing folders, removed again if it fails
