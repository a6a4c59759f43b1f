"""A bundle's report: candidates on a latency x fidelity plane, layers, history, the model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge.core.bundle import chosen_load_line, read_bundle
from edge.core.select import TIE, dominated_by
from edge.core.select import label as candidate_label
from edge.core.settle import PAIRED_NOTE
from edge.core.verify.rows import HEADERS, kind_lines, output_rows
from edge.flows.report.history import bundle_history, history_section, observed_tables
from edge.flows.report.html import (
    Section,
    drawable,
    figure,
    fmt_ms,
    fmt_size,
    note,
    page,
    pyplot,
    svg,
    table,
)
from edge.flows.report.layers import TOP_LAYERS, layers_section


def render_bundle_report(bundle_dir: Path, *, layers: bool = True,
                         results: Path | None = None, top: int = TOP_LAYERS,
                         device: Any = None) -> str:
    """The HTML report of a bundle (``results``: the results folder, default the cache's;
    ``device``: an opened ``devices.device.Device`` on which the per-layer times of the
    candidates it can run are measured, the others' on this host)."""
    bundle_dir = Path(bundle_dir)
    bundle = read_bundle(bundle_dir)
    plt = pyplot()
    sections = [_candidates_section(plt, bundle)]
    if layers:
        sections.append(layers_section(plt, bundle, bundle_dir, top, device))
    sections.append(history_section(plt, bundle_history(bundle, results), bundle))
    sections.append(Section("Model", _model_table(bundle), "model"))
    chosen = bundle.chosen or "none"
    model = bundle.origin.path if bundle.origin is not None else bundle.source.path
    subtitle = f"{bundle_dir.resolve()}: {model} for {bundle.profile}; chosen {chosen}"
    return page(f"edge report: {Path(model).name} on {bundle.profile}", subtitle, sections)


def _fidelity_axis(results: Sequence[Any]) -> tuple[str, Any]:
    """('accuracy (%)', fn) when every plotted candidate has an accuracy, else cosine."""
    if results and all(r.fidelity.accuracy is not None for r in results):
        return "accuracy on the evaluation set (%)", lambda r: 100 * r.fidelity.accuracy
    return "output cosine similarity to fp32", lambda r: r.fidelity.cosine


_STYLE = {"chosen": ("*", "#d4a000", 320), "passed": ("o", "#1f77b4", 70),
          "rejected": ("X", "#c62828", 80), "failed": ("X", "#c62828", 80)}


def _candidates_plot(plt: Any, bundle: Any, plotted: list[Any]) -> list[str]:
    """The latency x fidelity plot; a candidate whose numbers cannot be drawn (NaN, Inf,
    beyond +/-1e12) is left out with a note."""
    label, fidelity = _fidelity_axis(plotted)
    drawn = [r for r in plotted if drawable(r.bench.compared_ms, fidelity(r))]
    left_out = [note(f"{len(plotted) - len(drawn)} candidate(s) left out of the plot: their "
                     "p50 or fidelity is not a finite number (see the table).")
                ] if len(drawn) < len(plotted) else []
    if not drawn:
        return left_out
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for status in ("rejected", "failed", "passed", "chosen"):
        group = [r for r in drawn if r.status == status]
        if not group:
            continue
        marker, color, size = _STYLE[status]
        ax.scatter([r.bench.compared_ms for r in group], [fidelity(r) for r in group],
                   marker=marker, c=color, s=size, label=status, zorder=3,
                   edgecolors="black" if status == "chosen" else "none", linewidths=0.8)
    ref = next((r.fidelity.reference_accuracy for r in drawn
                if r.fidelity.reference_accuracy is not None), None)
    if ref is not None and label.startswith("accuracy") and drawable(ref):
        ax.axhline(100 * ref, color="#555", ls="--", lw=1, label="fp32 reference")
    xs = [r.bench.compared_ms for r in drawn]
    if min(xs) > 0 and max(xs) / min(xs) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(f"p50 latency, ms (measured on {drawn[0].bench.where})")
    ax.set_ylabel(label)
    ax.set_title(f"Candidates for {bundle.profile}: latency x fidelity "
                 f"(chosen: {bundle.chosen or 'none'})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.margins(x=0.15, y=0.15)
    _label_apart(ax, [(r.bench.compared_ms, fidelity(r), r.candidate.id) for r in drawn])
    return [figure(
        svg(fig, "plot-candidates", "Candidates: latency x fidelity"),
        "Each candidate that was verified and timed, at its p50 latency on the machine "
        "that optimized it (not the device unless stated) and its fidelity to the fp32 "
        "model; the star is the chosen one. Skipped and failed candidates are in the table."),
        *left_out]


def _fidelity_plot(plt: Any, verified: list[Any]) -> list[str]:
    """Every verified candidate's fidelity, the rejected ones marked beside those that kept it
    (they were not timed, so the latency plot cannot show what int8 cost); none rejected: no
    plot (the latency plot shows them all)."""
    label, fidelity = _fidelity_axis(verified)
    drawn = [r for r in verified if drawable(fidelity(r))]
    if not any(r.status in ("rejected", "failed") for r in drawn):
        return []
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(drawn)))
    names = [candidate_label(r) for r in drawn]
    for status in ("rejected", "failed", "passed", "chosen"):
        rows = [(i, fidelity(r)) for i, r in enumerate(drawn) if r.status == status]
        if rows:
            marker, color, size = _STYLE[status]
            ax.scatter([x for _, x in rows], [i for i, _ in rows], marker=marker, c=color,
                       s=size, label=status, zorder=3)
    ax.set_yticks(range(len(drawn)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    ax.set_title("Fidelity of every verified candidate")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return [figure(svg(fig, "plot-fidelity", "Fidelity of every verified candidate"),
                   "Each candidate edge verified, at its fidelity to the fp32 model: those "
                   "rejected (X) beside those that kept it, the trade-off the latency plot "
                   "cannot show (a rejected candidate is not timed).")]


def _ms_head(bundle: Any) -> str:
    """The latency column's name: the paired figure where a measured choice compared them."""
    paired = any(r.bench is not None and r.bench.paired_ms is not None
                 for r in bundle.candidates)
    return "ms, paired" if paired else "p50 ms"


def _candidates_section(plt: Any, bundle: Any) -> Section:
    plotted = [r for r in bundle.candidates
               if r.fidelity is not None and r.bench is not None and r.bench.measured]
    body = _candidates_plot(plt, bundle, plotted) if plotted else [
        note("No candidate was both verified and timed: nothing to plot.")]
    body += _fidelity_plot(plt, [r for r in bundle.candidates if r.fidelity is not None])
    body.append(note(f"chosen: {bundle.chosen or 'none'} - {bundle.reason}"))
    load = chosen_load_line(bundle)
    body += [note(load)] if load else []
    rows, classes = [], []
    for r in bundle.candidates:
        fid = r.fidelity
        rows.append((candidate_label(r), r.status,
                     fmt_size(r.artifact.total_bytes) if r.artifact else "",
                     f"{fid.cosine:.5f}" if fid else "",
                     f"{100 * fid.accuracy:.1f}%" if fid and fid.accuracy is not None else "",
                     _sourced(r.bench, r.bench.compared_ms) if r.bench else "",
                     _sourced(r.bench, r.bench.p90_ms) if r.bench else "", r.reason))
        classes.append(r.status)
    body.append(table(("candidate", "status", "size", "cosine", "accuracy", _ms_head(bundle),
                        "p90 ms", "reason"), rows, classes, numeric=(2, 3, 4, 5, 6)))
    body += [note(PAIRED_NOTE)] if _ms_head(bundle) != "p50 ms" else []
    body.append(_per_output(bundle))
    body.append(observed_tables([(candidate_label(r), r.bench) for r in bundle.candidates]))
    body.append(_pareto(bundle))
    body.append(_pruning(bundle))
    return Section("Candidates", "".join(body), "candidates")


def _sourced(bench: Any, ms: float) -> str:
    """A figure, with where it comes from unless it was timed on this host."""
    return fmt_ms(ms) if bench.source in (None, "host") else \
        f"{fmt_ms(ms)} ({bench.source_label})"


def _pareto(bundle: Any) -> str:
    """Latency x fidelity loss x size of each timed, verified candidate, and whether another
    is at least as good on all three and better on one; '' when fewer than two."""
    timed = [r for r in bundle.candidates if r.bench is not None and r.artifact is not None
             and r.fidelity is not None and r.fidelity.allowance_used is not None]
    if len(timed) < 2:
        return ""
    points = {candidate_label(r): (r.bench.compared_ms, r.fidelity.allowance_used,
                                   r.artifact.total_bytes) for r in timed}
    rows = [(name, fmt_ms(ms), f"{100 * used:.0f}%", fmt_size(size), r.status,
             dominated_by(name, points) or "Pareto-optimal")
            for r, (name, (ms, used, size)) in zip(timed, points.items(), strict=True)]
    rows.sort(key=lambda row: points[row[0]][0])
    return (note("Latency x fidelity x size: the share of the allowed fidelity loss each "
                 "candidate used on the measure it is judged by (0%: no loss on it, 100%: at "
                 "the thresholds; a budget chooses the least within it), and whether another "
                 f"candidate beats it on all three (latencies within {100 * TIE:.0f}% are "
                 "a tie).")
            + table(("candidate", _ms_head(bundle), "fidelity loss used", "size", "status",
                     "Pareto"),
                    rows, [row[4] for row in rows], numeric=(1, 2)))


def _pruning(bundle: Any) -> str:
    """Pruned candidates: sparsity, parameters, MACs and distillation; '' when none."""
    pruned = [r for r in bundle.candidates if r.pruning is not None]
    if not pruned:
        return ""
    rows = [(r.candidate.id, r.status, f"{100 * p.sparsity:.0f}%",
             f"{p.params_before:,} -> {p.params_after:,}", f"{p.macs_before:,} -> {p.macs_after:,}",
             f"{p.channels_before - p.channels_after} of {p.channels_before}",
             f"{p.distill_seconds:.0f} s, {p.distill_steps} steps, {p.distill_samples} samples")
            for r in pruned if (p := r.pruning) is not None]
    return (note("Pruned candidates: whole channels removed from the reference, then distilled "
                 "from it on the calibration data; judged against the original's outputs.")
            + table(("candidate", "status", "sparsity", "params", "MACs", "channels removed",
                     "distillation"), rows, [r.status for r in pruned]))


def _per_output(bundle: Any) -> str:
    """Fidelity per output: each output's kind (and why), its cosine, error over its spread
    and task metric for every candidate; '' for a bundle without per-output results."""
    rows = output_rows(bundle.candidates)
    if not rows:
        return ""
    kinds = "; ".join(kind_lines(bundle.candidates))
    verdicts = ["passed" if row[-1] == "passes" else "rejected" for row in rows]
    return (note(f"Fidelity per output, each judged on its own. Outputs judged as: {kinds}.")
            + table(HEADERS, rows, verdicts, numeric=(3, 4)))


def _label_apart(ax: Any, points: Sequence[tuple[float, float, str]], size: float = 8) -> None:
    """Label each point beside it; a label that would cover another moves up or down a line
    (with a thin leader) instead, so candidates at nearly the same point stay readable."""
    ax.figure.canvas.draw()  # settle limits and scales: label boxes are placed in points
    to_pt = 72 / ax.figure.dpi
    line, placed = size * 1.25, list[tuple[float, float, float, float]]()
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


def _model_table(bundle: Any) -> str:
    src, origin = bundle.source, bundle.origin
    apart = origin is not None and (origin.path, origin.sha256) != (src.path, src.sha256)
    given = ([("model", f"{origin.path} ({origin.format})"), ("sha256", origin.sha256)]
             if origin is not None and apart else [])
    reference = ("reference ONNX" if apart else "model",
                 src.path if apart or origin is None else f"{src.path} ({origin.format})")
    rows = [*given, reference, ("sha256", src.sha256),
            ("size", fmt_size(src.size_bytes)), ("precision", src.precision),
            ("opset", src.opset), ("params", src.params), ("MACs", src.macs),
            ("inputs", ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in src.inputs)),
            ("outputs", ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in src.outputs)),
            ("ops", ", ".join(f"{k} x{v}" for k, v in src.ops.items())),
            ("profile", bundle.profile), ("calibration", bundle.calibration),
            ("evaluation", bundle.evaluation)]
    return table(("key", "value"), rows)
