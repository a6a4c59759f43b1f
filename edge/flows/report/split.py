"""A split's report: every cut's predicted latency against bandwidth, with the regimes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
from partition.split import read_split_yaml

#: Bandwidths a plot can show, Mbit/s (1 bit/s to 1 Pbit/s).
MBPS = (1e-6, 1e9)


def render_partition_report(split_dir: Path) -> str:
    """The HTML report of a split written by ``edge partition``."""
    split_dir = Path(split_dir)
    if split_dir.is_file():
        split_dir = split_dir.parent
    plan = read_split_yaml(split_dir)
    predicted = plan.predicted
    plt = pyplot()
    sections = [_partition_plot_section(plt, plan), _cuts_section(plan),
                Section("Prediction at the link", table(
                    ("key", "value"), [(k, _value(v)) for k, v in predicted.items()]),
                   "predicted")]
    subtitle = (f"{split_dir.resolve()}: chosen {predicted.get('kind', '?')} at "
                f"{predicted.get('bandwidth_mbps', '?')} Mbit/s up, RTT "
                f"{predicted.get('rtt_ms', '?')} ms; objective "
                f"{predicted.get('objective', 'latency')}")
    return page(f"edge report: partition {split_dir.resolve().name}", subtitle, sections)


def _link(plan: Any) -> tuple[float, float, float]:
    p = plan.predicted
    up = float(p.get("bandwidth_mbps") or 10.0)
    return up, float(p.get("downlink_mbps") or up), float(p.get("rtt_ms") or 0.0)


def _partition_plot_section(plt: Any, plan: Any) -> Section:
    cuts = list(plan.cuts)
    rows = plan.bandwidth_table
    if not cuts:
        return Section("Latency vs bandwidth", note(
            "split.yaml lists no precomputed cuts (written by an older edge): nothing to plot."),
            "latency")
    up, down, rtt = _link(plan)
    lo = min([float(r["min_mbps"]) for r in rows] + [up]) if rows else up / 100
    hi = max([float(r["max_mbps"]) for r in rows] + [up]) if rows else up * 100
    lo, hi = min(lo, hi / 10), max(hi, lo * 10)
    if not (MBPS[0] <= lo and hi <= MBPS[1] and drawable(down, rtt)):
        return Section("Latency vs bandwidth", note(
            f"split.yaml's bandwidths ({lo:g} to {hi:g} Mbit/s, RTT {rtt:g} ms) are outside "
            f"what can be drawn ({MBPS[0]:g} to {MBPS[1]:g} Mbit/s): nothing to plot; the "
            "tables list them."), "latency")
    xs = np.geomspace(lo, hi, 240)
    curves = {c.id: np.array([c.predicted_ms(b, max(down, b), rtt) for b in xs]) for c in cuts}
    if not drawable(*(float(v) for v in np.concatenate(list(curves.values())))):
        return Section("Latency vs bandwidth", note(
            "split.yaml's predicted times are not finite numbers a plot can show: nothing to "
            "plot; the tables list them."), "latency")
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
                label=f"{c.id} {c.kind} (edge {c.edge_ms:.3g} ms, up {fmt_size(c.up_bytes)})")
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
    body = figure(svg(fig, "plot-partition", "Partition: predicted latency vs bandwidth"),
                   caption)
    return Section("Latency vs bandwidth", body, "latency")


def _value(value: Any) -> str:
    """A predicted figure as a reader reads it: numbers to 4 digits, a mapping as its pairs."""
    if isinstance(value, dict):
        return "; ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


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


def _cuts_section(plan: Any) -> Section:
    up, down, rtt = _link(plan)
    chosen = plan.split.cut_tensors
    cut_rows, classes = [], []
    for c in plan.cuts:
        cut_rows.append((c.id, c.kind, c.model or "-", fmt_ms(c.edge_ms), fmt_ms(c.cloud_ms),
                         fmt_size(c.up_bytes), fmt_size(c.down_bytes),
                         fmt_ms(c.predicted_ms(up, down, rtt)),
                         ", ".join(c.split.cut_tensors) or "-"))
        classes.append("chosen" if c.model == "tail" or (
            c.split.cut_tensors == chosen and c.kind == plan.predicted.get("kind")) else "")
    band_rows = [(f"{r['min_mbps']:g} - {r['max_mbps']:g}", r.get("cut_id", ""), r["kind"],
                  fmt_ms(r.get("predicted_ms")), ", ".join(r.get("cut") or ()) or "-")
                 for r in plan.bandwidth_table]
    tensors = [(t.get("name"), t.get("shape"), t.get("dtype"), fmt_size(t.get("bytes")))
               for t in plan.cut]
    body = [table(("cut", "kind", "server model", "edge ms", "cloud ms", "up", "down",
                    f"ms at {up:g} Mbit/s", "cut tensors"), cut_rows, classes,
                   numeric=(3, 4, 5, 6, 7)),
            "<h3>Best cut per bandwidth</h3>",
            table(("Mbit/s", "cut", "kind", "ms at low end", "cut tensors"), band_rows,
                   numeric=(3,)),
            "<h3>Tensors sent at the chosen cut</h3>",
            table(("tensor", "shape", "dtype", "bytes"), tensors, numeric=(3,)) if tensors
            else note("None: the chosen placement runs entirely on one side."),
            note(f"wire compression: {plan.compression}")]
    return Section("Cuts", "".join(body), "cuts")
