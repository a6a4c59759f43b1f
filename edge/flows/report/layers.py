"""Per-layer time of up to six candidates, each on its own runtime (here, or on the device)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge.core import progress
from edge.core.errors import first_line
from edge.core.plugins import full_suffix
from edge.core.values import ORIGINAL
from edge.flows.report.html import Section, e, note, short, svg, table
from targets import runtime_for_suffix, runtimes
from targets.layers import measure_layers

#: Layers shown per candidate in the per-layer plot.
TOP_LAYERS = 12

#: Candidates broken down per layer (the chosen one first, then passed, then rejected).
MAX_LAYER_PLOTS = 6

_LAYER_ORDER = {"chosen": 0, "passed": 1, "rejected": 2}

#: A runtime that declares none (one no longer registered).
_DEFAULT_COLOUR = "#4c78a8"


def _colour(runtime: str) -> str:
    """The colour the runtime's folder declares for report plots."""
    declared = runtimes().get(runtime)
    return declared.colour if declared is not None else _DEFAULT_COLOUR


def _label(runtime: str) -> str:
    """How the runtime's folder names it in reports."""
    declared = runtimes().get(runtime)
    return declared.label if declared is not None else runtime


def _note(runtime: str) -> str:
    """What the runtime's folder says a measurement of its artifacts here stands for."""
    declared = runtimes().get(runtime)
    return f" ({declared.note})" if declared is not None and declared.note else ""


def layer_candidates(bundle: Any, bundle_dir: Path) -> list[tuple[str, str, Path]]:
    """(candidate id, runtime, file) of every artifact to break down: chosen, passed, then
    rejected; within a status, runtimes not listed yet come first (so six cover them all).
    A file shared by two candidates (the original and its byte-identical onnxruntime-fp32
    copy) is broken down once, at the better status of the two, under the converted one's id.
    """
    pool = _one_per_file(bundle, bundle_dir)
    picked: list[tuple[str, str, Path]] = []
    seen: dict[str, int] = {}
    while pool:
        best = min(pool, key=lambda c: (c[0], seen.get(c[2], 0)))
        pool.remove(best)
        seen[best[2]] = seen.get(best[2], 0) + 1
        picked.append(best[1:])
    return picked


def _one_per_file(bundle: Any, bundle_dir: Path) -> list[tuple[int, str, str, Path]]:
    """(status order, candidate id, runtime, file) per distinct artifact file."""
    by_file: dict[str, tuple[int, str, str, Path]] = {}
    for r in bundle.candidates:
        if r.artifact is None or r.status not in _LAYER_ORDER:
            continue
        entry = (_LAYER_ORDER[r.status], r.candidate.id, r.artifact.runtime,
                 bundle_dir / r.artifact.file)
        other = by_file.get(r.artifact.file)
        if other is not None:
            name = other[1] if r.candidate.target == ORIGINAL else r.candidate.id
            entry = (min(other[0], entry[0]), name, entry[2], entry[3])
        by_file[r.artifact.file] = entry
    return list(by_file.values())


def _measure_layers(path: Path, device: Any) -> Any:
    """On the device when one is given and runs the artifact, else here (a runtime the device
    lacks)."""
    owner = runtime_for_suffix(full_suffix(path.name))
    runs_there = device is not None and owner is not None and owner.name in device.runtimes
    return measure_layers(path, threads=1, runs=20, device=device if runs_there else None)


def layers_section(plt: Any, bundle: Any, bundle_dir: Path, top: int,
                    device: Any = None) -> Section:
    candidates = layer_candidates(bundle, bundle_dir)
    measured: list[tuple[str, str, Any]] = []
    notes: list[str] = []
    shown = candidates[:MAX_LAYER_PLOTS]
    with progress.step("per-layer times", total=len(shown)) as bar:
        for n, (candidate, runtime, path) in enumerate(shown, 1):
            bar.update(f"per-layer times {n}/{len(shown)} {candidate}")
            try:
                measured.append((candidate, runtime, _measure_layers(path, device)))
            except Exception as exc:  # noqa: BLE001 - one unmeasurable artifact must not sink it
                notes.append(f"{candidate}: per-layer times not available for {runtime} - "
                             f"{first_line(exc)}")
            bar.advance()
    if len(candidates) > MAX_LAYER_PLOTS:
        notes.append(f"{len(candidates) - MAX_LAYER_PLOTS} more candidate(s) not broken down: "
                     + ", ".join(c for c, _, _ in candidates[MAX_LAYER_PLOTS:]))
    notes_html = "".join(note(n) for n in notes)
    if not measured:
        return Section("Per-layer time", note(
            "No candidate of this bundle could be broken down per layer on this host.")
            + notes_html, "layers")
    where = _layers_where(measured, device)
    plot = svg(_layers_figure(plt, measured, top, where), "plot-layers",
               f"Per-layer time (measured on {where})")
    how = "".join(f"<li>{e(c)} - {e(p.runtime)}: {e(p.method)}{e(_note(runtime))}</li>"
                  for c, runtime, p in measured)
    where_text = where + (" (not the device)" if where == "this host" else "")
    caption = (f"The {top} slowest layers of each candidate, measured on {where_text}, 1 thread, "
               "with the runtime that runs the artifact; a candidate's layers sum to its "
               "whole-model median. How each was measured:")
    rows = [(c, p.runtime, i + 1, layer.name, layer.op, layer.detail, f"{layer.ms:.4f}",
             f"{100 * layer.ms / p.total_ms:.1f}%" if p.total_ms > 0 else "")
            for c, _, p in measured for i, layer in enumerate(p.layers[:top])]
    listing = table(("candidate", "runtime", "rank", "layer", "op", "kernel / operators",
                     "ms", "share"), rows, numeric=(2, 6, 7))
    return Section("Per-layer time", f"<figure>{plot}<figcaption>{e(caption)}<ul>{how}</ul>"
                    f"</figcaption></figure>{notes_html}<details><summary>the {len(rows)} "
                    f"layers as a table</summary>{listing}</details>", "layers")


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
    legend: dict[str, Any] = {}
    for ax, (candidate, runtime, profile) in zip(flat, measured, strict=False):
        shown = profile.layers[:top][::-1]
        bars = ax.barh(range(len(shown)), [layer.ms for layer in shown], color=_colour(runtime))
        legend.setdefault(_label(runtime), bars)
        ax.set_yticks(range(len(shown)),
                      [f"{short(layer.name.split(';')[0], 30)} ({layer.op[:18]})"
                       for layer in shown], fontsize=7)
        ax.set_xlabel("ms per inference")
        ax.xaxis.get_major_locator().set_params(nbins=4)  # narrow panels: few, readable ticks
        ax.set_title(f"{candidate} \u2014 {profile.runtime}\n(whole model "
                     f"{profile.total_ms:.3f} ms)", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in flat[len(measured):]:
        ax.set_visible(False)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center",
               ncols=len(legend), fontsize=8, frameon=False)
    fig.suptitle(f"Per-layer time on each candidate's runtime, measured on {where}",
                 fontsize=11)
    return fig
