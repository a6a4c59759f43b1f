"""The text of a fleet deploy (``edge deploy --inventory``): the bundles used, the per-host
table and a summary line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.core.tables import table

if TYPE_CHECKING:
    from edge.flows.fleet_values import FleetReport

__all__ = ["render_fleet"]

_HEADERS = ("host", "status", "target", "profile", "candidate", "release", "p50 ms", "seconds",
            "error")


def render_fleet(report: FleetReport) -> str:
    """The per-host table of a fleet deploy, with the bundles used and a summary line."""
    rows = [(h.host, h.status, h.target, h.profile, h.candidate, h.release,
             f"{h.p50_ms:.3f}" if h.p50_ms is not None else "", f"{h.seconds:.1f}",
             h.error or "") for h in report.hosts]
    bundles = [f"bundle for {b.profile}: {b.bundle} (chosen {b.chosen})" if b.bundle
               else f"bundle for {b.profile}: none - {b.error}" for b in report.bundles]
    limit = f" --limit {report.limit}" if report.limit else ""
    summary = (f"{len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} from "
               f"{report.inventory}{limit}: {len(report.ok)} ok, {len(report.failed)} failed "
               f"in {report.seconds:.1f} s, {report.deploy_seconds:.1f} s deploying "
               f"(forks {report.forks})")
    return "\n".join([*bundles, "", table(headers=_HEADERS, rows=rows), "", summary])
