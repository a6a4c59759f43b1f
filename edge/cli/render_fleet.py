"""The text of a fleet deploy (``edge deploy --inventory``): the bundles used, the per-host
table and a summary line (a staged rollout: each host's stage, outcome and the release it runs
now, and where the rollout halted)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from edge.core.tables import table

if TYPE_CHECKING:
    from edge.flows.fleet_values import FleetReport, HostResult

__all__ = ["render_fleet"]

_HEADERS = ("host", "status", "target", "profile", "candidate", "release", "p50 ms", "seconds",
            "error")
_STAGED = ("host", "stage", "outcome", "now on", "target", "profile", "candidate", "release",
           "p50 ms", "seconds", "error")
_OUTCOMES = ("deployed", "unchanged", "failed", "rolled back", "not reached")


def render_fleet(report: FleetReport) -> str:
    """The per-host table of a fleet deploy, with the bundles used and a summary line."""
    staged = bool(report.stages)
    rows = [_staged_row(h) if staged else _row(h) for h in report.hosts]
    bundles = [f"bundle for {b.profile}: {b.bundle} (chosen {b.chosen})" if b.bundle
               else f"bundle for {b.profile}: none - {b.error}" for b in report.bundles]
    limit = f" --limit {report.limit}" if report.limit else ""
    summary = (f"{len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} from "
               f"{report.inventory}{limit}: {_counts(report)} "
               f"in {report.seconds:.1f} s, {report.deploy_seconds:.1f} s deploying "
               f"(forks {report.forks})")
    lines = [*bundles, "", table(headers=_STAGED if staged else _HEADERS, rows=rows), ""]
    return "\n".join([*lines, *_stage_lines(report), summary])


def _row(h: HostResult) -> tuple:
    return (h.host, h.status, h.target, h.profile, h.candidate, h.release, _ms(h),
            f"{h.seconds:.1f}", h.error or "")


def _staged_row(h: HostResult) -> tuple:
    now = h.current or ("(untouched)" if h.status == "not reached" else "?")
    return (h.host, h.stage or "", h.outcome, now, h.target, h.profile,
            h.candidate, h.release, _ms(h), f"{h.seconds:.1f}", h.error or "")


def _ms(h: HostResult) -> str:
    return f"{h.p50_ms:.3f}" if h.p50_ms is not None else ""


def _counts(report: FleetReport) -> str:
    """ok/failed counts; a staged rollout: per outcome."""
    if not report.stages:
        return f"{len(report.ok)} ok, {len(report.failed)} failed"
    seen = Counter(h.outcome for h in report.hosts)
    return ", ".join(f"{seen[o]} {o}" for o in _OUTCOMES if seen[o])


def _stage_lines(report: FleetReport) -> list[str]:
    """One line per stage, then where the rollout halted."""
    if not report.stages:
        return []
    lines = [f"stage {s.name}: {', '.join(s.hosts)} - {s.result}"
             + (f" ({s.failed} failed, --max-fail {s.budget})" if s.result != "not reached"
                else "") for s in report.stages]
    if report.stopped:
        lines.append(f"HALTED at stage {report.stopped}: it went over --max-fail; its switched "
                     "hosts were rolled back, later stages were not contacted; fix the cause "
                     "and run the same command again to continue")
    return [*lines, ""]
