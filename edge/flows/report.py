"""``edge report``: one self-contained HTML file with inline SVG plots and the tables.

A report needs no network to view: no scripts, no external CSS, fonts or images (its Content
Security Policy forbids loading anything). Plots are drawn with matplotlib's Agg backend and
inlined as SVG (text kept as text). matplotlib is imported only while rendering.

* Bundle (``edge optimize -o DIR``): candidates on a host-latency x fidelity plane with the
  chosen one marked; per-layer time of up to six candidates, each on its own runtime
  (onnxruntime, OpenVINO, LiteRT; see ``edge.flows.layers``), measured on this host;
  the p50 history of every device that measured one of the bundle's artifacts (from
  ``$EDGE_CACHE_DIR/results``); the candidate table with every reason.
* Split (``edge partition -o DIR``): every precomputed cut's predicted latency against the
  uplink bandwidth, the best envelope and the bandwidth regimes of split.yaml; the tables.
* Results (a results folder or one device's folder): the per-device history alone.
"""

from __future__ import annotations

import html
import io
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge import __version__
from edge.core import progress
from edge.core.errors import UsageError

__all__ = ["check_report_target", "render_bundle_report", "render_partition_report",
           "render_report", "render_results_report", "report_kind", "write_report"]

#: Layers shown per candidate in the per-layer plot.
TOP_LAYERS = 12
#: Candidates broken down per layer (the chosen one first, then passed, then rejected).
MAX_LAYER_PLOTS = 6
#: Devices shown in the history section (the most recently measured first).
MAX_DEVICES = 8

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 auto;
max-width:1100px;padding:1rem 1.5rem;color:#1d1d1f;background:#fff;line-height:1.4}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9rem}figure{margin:1rem 0}figure svg{max-width:100%;height:auto}
figcaption{color:#555;font-size:.85rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.chosen td{background:#fff6d6;font-weight:600}tr.rejected td,tr.failed td{color:#9b1c1c}
tr.skipped td{color:#777}.note{color:#555;font-size:.9rem}code{font-size:.85rem}
"""
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------- entry points
def report_kind(path: Path) -> str:
    """``bundle``, ``split`` or ``results`` for a report source; UsageError otherwise."""
    from edge.core.bundle import is_bundle

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
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--report draws with matplotlib: pip install 'edge[report]'")


def write_report(text: str, out: Path) -> Path:
    """Write the report atomically (a reader sees the old file or the new one)."""
    from edge.core.bundle import current_umask

    out = Path(out)
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; give a file name such as report.html")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


# ---------------------------------------------------------------- HTML pieces
@dataclass(frozen=True, slots=True)
class _Section:
    title: str
    body: str
    anchor: str


def _page(title: str, subtitle: str, sections: Sequence[_Section]) -> str:
    toc = "".join(f'<li><a href="#{_e(s.anchor)}">{_e(s.title)}</a></li>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="edge ' + _e(__version__) + '">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><p class=\"meta\">{_e(subtitle)}<br>"
        f"written by edge {_e(__version__)} on {_e(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}</p>"
        f"<nav><ul>{toc}</ul></nav></header><main>",
    ]
    parts += [f'<section id="{_e(s.anchor)}"><h2>{_e(s.title)}</h2>{s.body}</section>'
              for s in sections]
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
           classes: Iterable[str] | None = None, numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    row_classes = list(classes) if classes is not None else None
    for i, row in enumerate(rows):
        cls = f' class="{_e(row_classes[i])}"' if row_classes and row_classes[i] else ""
        cells = "".join(f'<td class="num">{_e(c)}</td>' if j in numeric else f"<td>{_e(c)}</td>"
                        for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


_PROLOG = re.compile(r"^.*?(?=<svg[\s>])", re.S)


def _svg(fig: Any, plot_id: str, title: str) -> str:
    """The figure as an inline <svg> with an id, a class and a <title>; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    try:
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": plot_id}):
            fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    finally:
        plt.close(fig)
    text = _PROLOG.sub("", buf.getvalue(), count=1)
    head_end = text.index(">") + 1
    attrs = (f' id="{_e(plot_id)}" class="plot" role="img" aria-label="{_e(title)}"'
             f' data-plot="{_e(plot_id)}"')
    head = text[:head_end - 1].rstrip("/") + attrs + ">"
    return head + f"<title>{_e(title)}</title>" + text[head_end:]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("edge report draws with matplotlib: pip install 'edge[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _size(n: int | None) -> str:
    if n is None:
        return ""
    if n >= 2**20:
        return f"{n / 2**20:.2f} MB"
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n} B"


# ---------------------------------------------------------------- bundle
def render_bundle_report(bundle_dir: Path, *, layers: bool = True,
                         results: Path | None = None, top: int = TOP_LAYERS,
                         device: Any = None) -> str:
    """The HTML report of a bundle (``results``: the results folder, default the cache's;
    ``device``: an opened ``devices.deploy.Device`` on which the per-layer times of the
    candidates it can run are measured, the others' on this host)."""
    from edge.core.bundle import read_bundle

    bundle_dir = Path(bundle_dir)
    bundle = read_bundle(bundle_dir)
    plt = _pyplot()
    sections = [_candidates_section(plt, bundle)]
    if layers:
        sections.append(_layers_section(plt, bundle, bundle_dir, top, device))
    sections.append(_history_section(plt, _bundle_history(bundle, results), bundle))
    sections.append(_Section("Model", _model_table(bundle), "model"))
    chosen = bundle.chosen or "none"
    subtitle = (f"{bundle_dir.resolve()}: {bundle.source.path} for {bundle.profile}; "
                f"chosen {chosen}")
    return _page(f"edge report: {Path(bundle.source.path).name} on {bundle.profile}",
                 subtitle, sections)


def _fidelity_axis(results: Sequence[Any]) -> tuple[str, Any]:
    """('accuracy (%)', fn) when every plotted candidate has an accuracy, else cosine."""
    if results and all(r.fidelity.accuracy is not None for r in results):
        return "accuracy on the evaluation set (%)", lambda r: 100 * r.fidelity.accuracy
    return "output cosine similarity to fp32", lambda r: r.fidelity.cosine


_STYLE = {"chosen": ("*", "#d4a000", 320), "passed": ("o", "#1f77b4", 70),
          "rejected": ("X", "#c62828", 80), "failed": ("X", "#c62828", 80)}


def _candidates_section(plt: Any, bundle: Any) -> _Section:
    plotted = [r for r in bundle.candidates if r.fidelity is not None and r.bench is not None]
    body = []
    if plotted:
        label, fidelity = _fidelity_axis(plotted)
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for status in ("rejected", "failed", "passed", "chosen"):
            group = [r for r in plotted if r.status == status]
            if not group:
                continue
            marker, color, size = _STYLE[status]
            ax.scatter([r.bench.p50_ms for r in group], [fidelity(r) for r in group],
                       marker=marker, c=color, s=size, label=status, zorder=3,
                       edgecolors="black" if status == "chosen" else "none", linewidths=0.8)
        ref = next((r.fidelity.reference_accuracy for r in plotted
                    if r.fidelity.reference_accuracy is not None), None)
        if ref is not None and label.startswith("accuracy"):
            ax.axhline(100 * ref, color="#555", ls="--", lw=1, label="fp32 reference")
        xs = [r.bench.p50_ms for r in plotted]
        if min(xs) > 0 and max(xs) / min(xs) > 20:
            ax.set_xscale("log")
        where = plotted[0].bench.where
        ax.set_xlabel(f"p50 latency, ms (measured on {where})")
        ax.set_ylabel(label)
        ax.set_title(f"Candidates for {bundle.profile}: latency x fidelity "
                     f"(chosen: {bundle.chosen or 'none'})")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        ax.margins(x=0.15, y=0.15)
        _label_apart(ax, [(r.bench.p50_ms, fidelity(r), r.candidate.id) for r in plotted])
        body.append(_figure(
            _svg(fig, "plot-candidates", "Candidates: latency x fidelity"),
            "Each candidate that was verified and timed, at its p50 latency on the machine "
            "that optimized it (not the device unless stated) and its fidelity to the fp32 "
            "model; the star is the chosen one. Skipped and failed candidates are in the table."))
    else:
        body.append(_note("No candidate was both verified and timed: nothing to plot."))
    body.append(_note(f"chosen: {bundle.chosen or 'none'} - {bundle.reason}"))
    rows, classes = [], []
    for r in bundle.candidates:
        fid = r.fidelity
        rows.append((r.candidate.id, r.status,
                     _size(r.artifact.total_bytes) if r.artifact else "",
                     f"{fid.cosine:.5f}" if fid else "",
                     f"{100 * fid.accuracy:.1f}%" if fid and fid.accuracy is not None else "",
                     _ms(r.bench.p50_ms) if r.bench else "",
                     _ms(r.bench.p90_ms) if r.bench else "", r.reason))
        classes.append(r.status)
    body.append(_table(("candidate", "status", "size", "cosine", "accuracy", "p50 ms",
                        "p90 ms", "reason"), rows, classes, numeric=(2, 3, 4, 5, 6)))
    return _Section("Candidates", "".join(body), "candidates")


def _label_apart(ax: Any, points: Sequence[tuple[float, float, str]], size: float = 8) -> None:
    """Label each point beside it; a label that would cover another moves up or down a line
    (with a thin leader) instead, so candidates at nearly the same point stay readable."""
    ax.figure.canvas.draw()  # settle limits and scales: label boxes are placed in points
    to_pt = 72 / ax.figure.dpi
    line, placed = size * 1.25, []
    for x, y, text in sorted(points, key=lambda p: (-p[1], p[0])):
        px, py = (v * to_pt for v in ax.transData.transform((x, y)))
        width = 0.62 * size * len(text)
        for dy in (4, *(sign * step * line + 4 for step in range(1, 9) for sign in (-1, 1))):
            box = (px + 6, py + dy, px + 6 + width, py + dy + line)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                       for b in placed):
                break
        placed.append(box)
        ax.annotate(text, (x, y), xytext=(6, dy), textcoords="offset points", fontsize=size,
                    arrowprops=None if dy == 4 else {"arrowstyle": "-", "lw": 0.5,
                                                     "color": "#888", "shrinkA": 0,
                                                     "shrinkB": 3})


_LAYER_ORDER = {"chosen": 0, "passed": 1, "rejected": 2}
_RUNTIME_COLOR = {"onnxruntime": "#4c78a8", "openvino": "#7b3294", "tflite": "#f58518",
                  "nnapi": "#e45756"}


def _layer_candidates(bundle: Any, bundle_dir: Path) -> list[tuple[str, str, Path]]:
    """(candidate id, runtime, file) of every artifact to break down: chosen, passed, then
    rejected; within a status, runtimes not listed yet come first (so six cover them all)."""
    pool = [(_LAYER_ORDER[r.status], r.candidate.id, r.artifact.runtime,
             bundle_dir / r.artifact.file) for r in bundle.candidates
            if r.artifact is not None and r.status in _LAYER_ORDER]
    picked: list[tuple[str, str, Path]] = []
    seen: dict[str, int] = {}
    while pool:
        best = min(pool, key=lambda c: (c[0], seen.get(c[2], 0)))
        pool.remove(best)
        seen[best[2]] = seen.get(best[2], 0) + 1
        picked.append(best[1:])
    return picked


def _measure_layers(path: Path, device: Any) -> Any:
    """On the device when one is given and runs the artifact, else here (a runtime the device
    lacks)."""
    from devices.agent.runtimes import SUFFIX_RUNTIME
    from devices.layers import measure_layers

    runs_there = device is not None and SUFFIX_RUNTIME.get(path.suffix) in device.runtimes
    return measure_layers(path, threads=1, runs=20, device=device if runs_there else None)


def _layers_section(plt: Any, bundle: Any, bundle_dir: Path, top: int,
                    device: Any = None) -> _Section:
    from edge.core.errors import first_line

    candidates = _layer_candidates(bundle, bundle_dir)
    measured: list[tuple[str, str, Any]] = []
    notes: list[str] = []
    shown = candidates[:MAX_LAYER_PLOTS]
    with progress.step("per-layer times", total=len(shown)) as bar:
        for n, (candidate, runtime, path) in enumerate(shown, 1):
            bar.update(f"per-layer times {n}/{len(shown)} {candidate}")
            try:
                measured.append((candidate, runtime, _measure_layers(path, device)))
            except Exception as exc:  # noqa: BLE001 - one unmeasurable artifact must not sink it
                notes.append(f"{candidate} ({runtime}): not measured - {type(exc).__name__}: "
                             f"{first_line(exc)}")
            bar.advance()
    if len(candidates) > MAX_LAYER_PLOTS:
        notes.append(f"{len(candidates) - MAX_LAYER_PLOTS} more candidate(s) not broken down: "
                     + ", ".join(c for c, _, _ in candidates[MAX_LAYER_PLOTS:]))
    notes_html = "".join(_note(n) for n in notes)
    if not measured:
        return _Section("Per-layer time", _note(
            "No candidate of this bundle could be broken down per layer on this host.")
            + notes_html, "layers")
    where = _layers_where(measured, device)
    svg = _svg(_layers_figure(plt, measured, top, where), "plot-layers",
               f"Per-layer time (measured on {where})")
    how = "".join(f"<li>{_e(c)} - {_e(p.runtime)}: {_e(p.method)}"
                  + (" (the NNAPI artifact on LiteRT's CPU kernels: no NNAPI accelerator "
                     "here)" if runtime == "nnapi" else "") + "</li>"
                  for c, runtime, p in measured)
    where_text = where + (" (not the device)" if where == "this host" else "")
    caption = (f"The {top} slowest layers of each candidate, measured on {where_text}, 1 thread, "
               "with the runtime that runs the artifact; a candidate's layers sum to its "
               "whole-model median. How each was measured:")
    rows = [(c, p.runtime, i + 1, layer.name, layer.op, layer.detail, f"{layer.ms:.4f}",
             f"{100 * layer.ms / p.total_ms:.1f}%" if p.total_ms > 0 else "")
            for c, _, p in measured for i, layer in enumerate(p.layers[:top])]
    table = _table(("candidate", "runtime", "rank", "layer", "op", "kernel / operators", "ms",
                    "share"), rows, numeric=(2, 6, 7))
    return _Section("Per-layer time", f"<figure>{svg}<figcaption>{_e(caption)}<ul>{how}</ul>"
                    f"</figcaption></figure>{notes_html}<details><summary>the {len(rows)} "
                    f"layers as a table</summary>{table}</details>", "layers")


def _layers_where(measured: Sequence[tuple[str, str, Any]], device: Any) -> str:
    """'this host', or the device (and this host) when some candidates were measured there."""
    on_device = sum(" on " in p.runtime for _, _, p in measured)
    if device is None or not on_device:
        return "this host"
    label = device.transport.label
    return label if on_device == len(measured) else f"{label} and this host"


def _layers_figure(plt: Any, measured: Sequence[tuple[str, str, Any]], top: int,
                   where: str = "this host") -> Any:
    """One horizontal bar chart per candidate, three to a row."""
    cols = min(3, len(measured))
    rows = math.ceil(len(measured) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, rows * (0.28 * top + 1.9)),
                             squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax, (candidate, runtime, profile) in zip(flat, measured, strict=False):
        shown = profile.layers[:top][::-1]
        ax.barh(range(len(shown)), [layer.ms for layer in shown],
                color=_RUNTIME_COLOR.get(runtime, "#4c78a8"))
        ax.set_yticks(range(len(shown)),
                      [f"{_short(layer.name.split(';')[0], 30)} ({layer.op[:18]})"
                       for layer in shown], fontsize=7)
        ax.set_xlabel("ms per inference")
        ax.xaxis.get_major_locator().set_params(nbins=4)  # narrow panels: few, readable ticks
        ax.set_title(f"{candidate} \u2014 {profile.runtime}\n(whole model "
                     f"{profile.total_ms:.3f} ms)", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in flat[len(measured):]:
        ax.set_visible(False)
    fig.suptitle(f"Per-layer time on each candidate's runtime, measured on {where}",
                 fontsize=11)
    return fig


def _short(name: str, width: int = 36) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _bundle_history(bundle: Any, root: Path | None) -> dict[str, list[Any]]:
    """Kept results of every device that measured one of the bundle's artifacts."""
    from edge.core.results import kept_results

    shas = {r.artifact.sha256 for r in bundle.candidates if r.artifact is not None}
    return {device: kept for device, kept in kept_results(root).items()
            if any(k.report.artifact_sha256 in shas for k in kept)}


def _history_section(plt: Any, history: dict[str, list[Any]], bundle: Any = None) -> _Section:
    if not history:
        return _Section("Device history", _note(
            "No measurements kept on this host for these artifacts yet: `edge deploy` and "
            "`edge bench` keep every result in $EDGE_CACHE_DIR/results."), "history")
    ids = {r.artifact.sha256: r.candidate.id for r in bundle.candidates
           if r.artifact is not None} if bundle is not None else {}
    latest = sorted(history, key=lambda d: max(
        (k.kept_at.timestamp() for k in history[d] if k.kept_at), default=0), reverse=True)
    body = []
    for n, device in enumerate(latest[:MAX_DEVICES]):
        body.append(_device_history(plt, n, device, history[device], ids))
    if len(latest) > MAX_DEVICES:
        body.append(_note(f"{len(latest) - MAX_DEVICES} more device(s) not shown."))
    return _Section("Device history", "".join(body), "history")


def _device_history(plt: Any, n: int, device: str, kept: list[Any], ids: dict[str, str]) -> str:
    target = kept[-1].report.target or device
    dated = all(k.kept_at is not None for k in kept)
    series: dict[str, list[tuple[Any, Any]]] = {}
    for i, k in enumerate(kept):
        when = k.kept_at.astimezone().replace(tzinfo=None) if dated else i + 1
        series.setdefault(k.report.artifact_sha256, []).append((when, k))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    flagged = False
    for sha, points in series.items():
        ours = sha in ids
        label = (f"{ids[sha]} ({sha[:8]})" if ours
                 else f"release {sha[:8]} ({points[-1][1].report.candidate})")
        ax.plot([x for x, _ in points], [k.report.bench.p50_ms for _, k in points], marker="o",
                ls="-" if ours else "--", label=label)
        bad = [(x, k.report.bench.p50_ms) for x, k in points if k.regressed]
        if bad:
            ax.scatter([x for x, _ in bad], [y for _, y in bad], marker="X", s=90, c="#c62828",
                       zorder=4, label=None if flagged else "failed baseline check")
            flagged = True
    ax.set_ylabel("p50 ms on the device")
    _time_axis(ax, dated, len(kept))
    ax.set_title(f"History on {target}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_ylim(0, 1.15 * max(k.report.bench.p50_ms for k in kept))
    svg = _svg(fig, f"plot-history-{n}", f"History on {target}")
    rows = [_history_row(k) for k in kept]
    caption = (f"p50 latency measured on {target} by edge deploy / edge bench, per artifact; "
               "dashed lines are artifacts of other bundles or releases. Load time, peak "
               "memory and power are the agent's, on the device (power: a sensor, or "
               "'est.' when estimated from the profile).")
    return _figure(svg, caption) + _table(
        ("kept at", "candidate", "release", "p50 ms", "p90 ms", "p99 ms", "runs", "load ms",
         "peak RSS MB", "power W", "check"),
        rows, ["rejected" if k.regressed else "" for k in kept], numeric=(3, 4, 5, 6, 7, 8, 9))


def _history_row(k: Any) -> tuple[Any, ...]:
    b = k.report.bench
    power = (b.metrics or {}).get("power_w")
    estimated = "estimate" in str((b.metrics or {}).get("power_source", ""))
    return (k.kept_at.strftime("%Y-%m-%d %H:%M:%S") if k.kept_at else "", k.report.candidate,
            k.report.release, _ms(b.p50_ms), _ms(b.p90_ms), _ms(b.p99_ms), b.runs,
            "" if b.load_ms is None else f"{b.load_ms:.1f}",
            "" if b.peak_rss_mb is None else f"{b.peak_rss_mb:.1f}",
            "" if power is None else f"{power:.2f}" + (" est." if estimated else ""),
            "REGRESSION" if k.regressed else "")


def _time_axis(ax: Any, dated: bool, n: int) -> None:
    """When each result was kept (concise dates), or their order when a time is missing."""
    if dated:
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("when measured (this host's local time)")
        ax.margins(x=0.05)
        return
    ax.set_xlabel("measurement, oldest first")
    ax.set_xlim(0.5, n + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)


def _model_table(bundle: Any) -> str:
    src = bundle.source
    rows = [("model", src.path), ("sha256", src.sha256), ("size", _size(src.size_bytes)),
            ("opset", src.opset), ("params", src.params), ("MACs", src.macs),
            ("inputs", ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in src.inputs)),
            ("outputs", ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in src.outputs)),
            ("ops", ", ".join(f"{k} x{v}" for k, v in src.ops.items())),
            ("profile", bundle.profile), ("calibration", bundle.calibration),
            ("evaluation", bundle.evaluation)]
    return _table(("key", "value"), rows)


# ---------------------------------------------------------------- results folder
def render_results_report(results: Path) -> str:
    """The HTML report of a results folder: the history of every device in it."""
    from edge.core.results import kept_results

    history = kept_results(Path(results))
    plt = _pyplot()
    return _page("edge report: device history", str(Path(results).resolve()),
                 [_history_section(plt, history)])


# ---------------------------------------------------------------- split
def render_partition_report(split_dir: Path) -> str:
    """The HTML report of a split written by ``edge partition``."""
    from partition.split import read_split_yaml

    split_dir = Path(split_dir)
    if split_dir.is_file():
        split_dir = split_dir.parent
    plan = read_split_yaml(split_dir)
    predicted = plan.predicted
    plt = _pyplot()
    sections = [_partition_plot_section(plt, plan), _cuts_section(plan),
                _Section("Prediction at the link", _table(
                    ("key", "value"), [(k, v) for k, v in predicted.items()]), "predicted")]
    subtitle = (f"{split_dir.resolve()}: chosen {predicted.get('kind', '?')} at "
                f"{predicted.get('bandwidth_mbps', '?')} Mbit/s up, RTT "
                f"{predicted.get('rtt_ms', '?')} ms; objective "
                f"{predicted.get('objective', 'latency')}")
    return _page(f"edge report: partition {split_dir.resolve().name}", subtitle, sections)


def _link(plan: Any) -> tuple[float, float, float]:
    p = plan.predicted
    up = float(p.get("bandwidth_mbps") or 10.0)
    return up, float(p.get("downlink_mbps") or up), float(p.get("rtt_ms") or 0.0)


def _partition_plot_section(plt: Any, plan: Any) -> _Section:
    import numpy as np

    cuts = list(plan.cuts)
    rows = plan.bandwidth_table
    if not cuts:
        return _Section("Latency vs bandwidth", _note(
            "split.yaml lists no precomputed cuts (written by an older edge): nothing to plot."),
            "latency")
    up, down, rtt = _link(plan)
    lo = min([float(r["min_mbps"]) for r in rows] + [up]) if rows else up / 100
    hi = max([float(r["max_mbps"]) for r in rows] + [up]) if rows else up * 100
    lo, hi = min(lo, hi / 10), max(hi, lo * 10)
    xs = np.geomspace(lo, hi, 240)
    curves = {c.id: np.array([c.predicted_ms(b, max(down, b), rtt) for b in xs]) for c in cuts}
    best = np.min(np.vstack(list(curves.values())), axis=0)
    fig, ax = plt.subplots(figsize=(9, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {c.id: colors[i % len(colors)] for i, c in enumerate(cuts)}
    for i, (start, stop, row) in enumerate(_regimes(rows, lo, hi)):
        cid = str(row.get("cut_id", "?"))
        ax.axvspan(start, stop, color=color.get(cid, "#999"), alpha=0.10, lw=0)
        ax.text(math.sqrt(start * stop), 0.98, f"{cid}\n{row.get('kind', '')}",
                transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
        if i:
            ax.axvline(start, color="#777", lw=0.8, ls=":")
    for c in cuts:
        ax.plot(xs, curves[c.id], color=color[c.id], lw=1.6,
                label=f"{c.id} {c.kind} (edge {c.edge_ms:.3g} ms, up {_size(c.up_bytes)})")
    ax.plot(xs, best, color="black", lw=2.6, ls="--", alpha=0.7, label="best cut (envelope)")
    ax.axvline(up, color="#c62828", lw=1.2, label=f"link {up:g} Mbit/s, RTT {rtt:g} ms")
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    values = np.concatenate(list(curves.values()))
    positive = values[values > 0]
    if positive.size and positive.max() / positive.min() > 50:
        ax.set_yscale("log")
    ax.set_xlabel("uplink bandwidth, Mbit/s (downlink: max(split's downlink, uplink))")
    ax.set_ylabel("predicted latency, ms")
    ax.set_title("Partition: predicted latency vs bandwidth")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper right", bbox_to_anchor=(1.0, 0.86), fontsize=8)
    objective = plan.predicted.get("objective", "latency")
    caption = ("Predicted end-to-end latency of every precomputed cut (edge + RTT + transfer + "
               "cloud; costs: " + str(plan.predicted.get("costs", "?")) + "). Shaded: the "
               f"cut split.yaml picks per bandwidth range for the {objective} objective"
               + ("" if objective == "latency" else " (so it need not be the latency "
                  "envelope)") + "; the red line is the link it was partitioned for.")
    body = _figure(_svg(fig, "plot-partition", "Partition: predicted latency vs bandwidth"),
                   caption)
    return _Section("Latency vs bandwidth", body, "latency")


def _regimes(rows: Sequence[dict[str, Any]], lo: float, hi: float
             ) -> list[tuple[float, float, dict[str, Any]]]:
    """(start, stop, row) per bandwidth-table row; boundaries between the sweep points."""
    spans = []
    for i, row in enumerate(rows):
        start = lo if i == 0 else math.sqrt(float(rows[i - 1]["max_mbps"]) *
                                            float(row["min_mbps"]))
        stop = hi if i == len(rows) - 1 else math.sqrt(float(row["max_mbps"]) *
                                                       float(rows[i + 1]["min_mbps"]))
        spans.append((start, stop, row))
    return spans


def _cuts_section(plan: Any) -> _Section:
    up, down, rtt = _link(plan)
    chosen = plan.split.cut_tensors
    cut_rows, classes = [], []
    for c in plan.cuts:
        cut_rows.append((c.id, c.kind, c.model or "-", _ms(c.edge_ms), _ms(c.cloud_ms),
                         _size(c.up_bytes), _size(c.down_bytes), _ms(c.predicted_ms(up, down, rtt)),
                         ", ".join(c.split.cut_tensors) or "-"))
        classes.append("chosen" if c.model == "tail" or (
            c.split.cut_tensors == chosen and c.kind == plan.predicted.get("kind")) else "")
    band_rows = [(f"{r['min_mbps']:g} - {r['max_mbps']:g}", r.get("cut_id", ""), r["kind"],
                  _ms(r.get("predicted_ms")), ", ".join(r.get("cut") or ()) or "-")
                 for r in plan.bandwidth_table]
    tensors = [(t.get("name"), t.get("shape"), t.get("dtype"), _size(t.get("bytes")))
               for t in plan.cut]
    body = [_table(("cut", "kind", "server model", "edge ms", "cloud ms", "up", "down",
                    f"ms at {up:g} Mbit/s", "cut tensors"), cut_rows, classes,
                   numeric=(3, 4, 5, 6, 7)),
            "<h3>Best cut per bandwidth</h3>",
            _table(("Mbit/s", "cut", "kind", "ms at low end", "cut tensors"), band_rows,
                   numeric=(3,)),
            "<h3>Tensors sent at the chosen cut</h3>",
            _table(("tensor", "shape", "dtype", "bytes"), tensors, numeric=(3,)) if tensors
            else _note("None: the chosen placement runs entirely on one side."),
            _note(f"wire compression: {plan.compression}")]
    return _Section("Cuts", "".join(body), "cuts")
