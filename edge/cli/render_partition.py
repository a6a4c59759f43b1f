"""Plain-text views of ``edge partition`` and ``edge run-split`` for the terminal."""

from __future__ import annotations

from typing import Any

from edge.core.tables import table

__all__ = ["render_partition", "render_run_split"]


def render_partition(report: Any) -> str:
    """The chosen placement, all-edge and all-cloud, the best cut per bandwidth, the check."""
    chosen = report.chosen
    rows = [("chosen", chosen["kind"], f"{chosen['total_ms']:.3f}",
             f"edge {chosen['edge_ms']:.3f} + link {chosen['transfer_ms']:.3f} + cloud "
             f"{chosen['cloud_ms']:.3f}", ", ".join(chosen["cut"]) or "-"),
            ("all-edge", "", f"{report.all_edge_ms:.3f}", "", ""),
            ("all-cloud", "", f"{report.all_cloud_ms:.3f}", "", "")]
    bands = [(f"{r['min_mbps']}-{r['max_mbps']}", r["kind"], f"{r['predicted_ms']:.3f}",
              ", ".join(r["cut"]) or "-") for r in report.bandwidth_table]
    return "\n".join([
        f"link {report.bandwidth_mbps} Mbit/s, RTT {report.rtt_ms} ms; costs: {report.costs}",
        _objective_line(report),
        table(("placement", "kind", "ms", "parts", "cut tensors"), rows), "",
        "best cut per bandwidth (Mbit/s):",
        table(("bandwidth", "kind", "ms at low end", "cut tensors"), bands), "",
        f"head->tail max abs diff vs the whole model: {report.max_abs_diff:.2e}"
        + ("" if report.compressed_cosine is None else
           f"; with {report.compression} on the wire: output cosine "
           f"{report.compressed_cosine:.5f}"),
        f"split: {report.out}"])


def _objective_line(report: Any) -> str:
    chosen = report.chosen
    fps = 1000 / chosen["stage_ms"] if chosen["stage_ms"] else float("inf")
    return (f"objective {report.objective}: chosen {chosen['total_ms']:.3f} ms, "
            f"{chosen['energy_mj']:.2f} mJ/frame on the device"
            + (" (assumed radio cost)" if (report.energy or {}).get("assumed") else "")
            + f", {fps:.1f} frames/s pipelined"
            + ("" if chosen["exact"] else " (not proven optimal: too many placements)"))


def render_run_split(report: dict[str, Any]) -> str:
    """The runs of ``edge run-split`` as a table and a summary line."""
    rows = [(str(i), r["cut_id"], r["kind"], f"{r['total_ms']:.2f}", f"{r['predicted_ms']:.2f}",
             f"{r['edge_ms']:.2f}", f"{r['link_ms']:.2f}", f"{r['cloud_ms']:.2f}",
             f"{r['uplink_mbps']:.2f}" + ("" if r["link_measured"] else " (assumed)"))
            for i, r in enumerate(report["runs"])]
    s = report["summary"]
    lines = [table(("run", "cut", "kind", "ms", "predicted", "edge", "link", "cloud",
                    "uplink Mbit/s"), rows),
             f"median {s['median_ms']:.2f} ms over {s['runs']} runs; cuts used: "
             + ", ".join(f"{k} x{v}" for k, v in s["cuts"].items())]
    if report.get("last_error"):
        lines.append(f"cloud error (ran on the device instead): {report['last_error']}")
    return "\n".join(lines)
