"""The text ``edge devices compare`` prints: each profile's best estimate, fastest first."""

from __future__ import annotations

from edge.core.tables import table
from edge.flows.compare import Compared, CompareReport

__all__ = ["render_compare"]

_HEADERS = ("profile", "device", "best candidate", "unit", "est. ms", "interval ms", "basis",
            "memory MB", "energy mJ")


def render_compare(report: CompareReport) -> str:
    """The table, and what its figures are."""
    rows = [_row(r) for r in report.rows]
    why = [f"{r.profile}: {r.why}" for r in report.rows if r.why]
    return "\n".join([f"{report.model}: {report.macs:,} MACs", "", table(_HEADERS, rows), "",
                      *why, *([""] if why else []), report.note])


def _row(r: Compared) -> tuple[str, ...]:
    if r.ms is None:
        return (r.profile, r.name, "none", "", "", "", "", "", "")
    high = f"{r.high_ms:.3g}" if r.high_ms is not None else "?"
    return (r.profile, r.name, r.candidate or "", r.unit, f"{r.ms:.3g}",
            f"{r.low_ms:.3g}-{high}", r.calibration, f"{r.memory_mb:.2f}",
            f"{r.energy_mj:.3g}" if r.energy_mj is not None else "")
