"""The values of a fleet deploy (``edge deploy --inventory``): what was asked (FleetRequest) and
what happened, host by host (HostResult), stage by stage (StageResult, with --canary/--batch/
--max-fail), per profile's bundle (FleetBundle) and overall (FleetReport, with its exit
status)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.connect import DeviceTarget
from edge.core.errors import ExitStatus
from edge.core.values import DeployReport
from edge.flows.fleet_stages import Staging
from edge.flows.optimize import OptimizeOptions

__all__ = ["FleetBundle", "FleetReport", "FleetRequest", "HostResult", "StageResult"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetRequest:
    """What ``edge deploy --inventory`` was asked.

    ``device`` holds the defaults every host starts from (identity, known_hosts,
    trust_new_host, python, runs, warmup, threads); its ``host`` must be None. ``profile`` is the
    profile of hosts whose inventory vars name none (for a bundle: the bundle's). Bundles built
    from a MODEL go to ``out_dir/<model stem>-<profile>.bundle`` (default: the current dir).
    Progress lines go to the ``edge`` logger (the CLI shows them on a TTY, never under --json).
    """

    source: Path
    inventory: Path
    limit: str | None = None
    forks: int = 5
    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    options: OptimizeOptions = OptimizeOptions()
    out_dir: Path | None = None
    #: every host times every faithful candidate and activates the one chosen from those
    #: timings; None: the default, yes (every inventory host is a device at hand, over SSH)
    measure_on_device: bool | None = None
    keep: int = 3  # releases kept on each host (devices.deploy.DEFAULT_KEEP)
    #: --canary/--batch/--max-fail (none: every host at once, each failure its own)
    staging: Staging = Staging()
    #: the model's slot on every host (``edge deploy --name``); None: the model file's stem
    name: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HostResult:
    """One host's outcome.

    ``status``: ok (it runs ``release`` now), failed (it was not switched to it), rolled back
    (switched, then back to ``previous`` as its stage went over the failure budget) or not
    reached (a staged rollout halted before its stage: never contacted). ``current``: the
    release it runs now, when known; ``previous``: what it ran before this deploy.
    """

    host: str
    target: str  # ssh://user@address:port
    profile: str
    status: str  # ok | failed | rolled back | not reached
    candidate: str | None = None
    release: str | None = None
    p50_ms: float | None = None
    error: str | None = None  # one line, when failed
    seconds: float = 0.0
    report: DeployReport | None = None
    stage: str | None = None  # canary, batch 1, ... (a staged rollout)
    previous: str | None = None
    current: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the host runs the release now."""
        return self.status == "ok"

    @property
    def outcome(self) -> str:
        """deployed, unchanged (it ran the release already), or the status."""
        if not self.ok:
            return self.status
        same = self.release is not None and self.previous == self.release
        return "unchanged" if same else "deployed"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"host": self.host, "target": self.target, "profile": self.profile,
                "status": self.status, "outcome": self.outcome, "stage": self.stage,
                "candidate": self.candidate, "release": self.release,
                "previous": self.previous, "current": self.current,
                "p50_ms": self.p50_ms, "error": self.error, "seconds": round(self.seconds, 3),
                "report": self.report.to_json() if self.report else None}


@dataclass(frozen=True, kw_only=True, slots=True)
class StageResult:
    """One stage of a staged rollout: its hosts, failures, budget and how it ended."""

    name: str  # canary, batch 1, ...
    hosts: tuple[str, ...]
    failed: int = 0
    budget: str = "0"  # --max-fail: N hosts or P%
    result: str = "not reached"  # done | halted | not reached

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "hosts": list(self.hosts), "failed": self.failed,
                "max_fail": self.budget, "result": self.result}


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetBundle:
    """The bundle deployed to one profile's hosts (or why there is none)."""

    profile: str
    hosts: int
    bundle: str | None = None
    chosen: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"profile": self.profile, "hosts": self.hosts, "bundle": self.bundle,
                "chosen": self.chosen, "error": self.error}


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetReport:
    """What a fleet deploy did, host by host (in inventory order)."""

    inventory: str
    limit: str | None
    forks: int
    bundles: tuple[FleetBundle, ...]
    hosts: tuple[HostResult, ...]
    seconds: float  # the whole run, bundles included
    deploy_seconds: float = 0.0  # wall time of the parallel deploy phase alone
    stages: tuple[StageResult, ...] = ()  # a staged rollout's stages, in order
    stopped: str | None = None  # the stage that went over its failure budget (halted there)

    @property
    def ok(self) -> tuple[HostResult, ...]:
        """Hosts that run the release now."""
        return tuple(h for h in self.hosts if h.ok)

    @property
    def failed(self) -> tuple[HostResult, ...]:
        """Hosts that failed."""
        return tuple(h for h in self.hosts if not h.ok)

    @property
    def exit_status(self) -> int:
        """0 when every host is ok, 3 (ExitStatus.DEVICE) when any is not: a host's failures
        are the device's or its connection's (a failed health check included), and a halted
        rollout's rolled-back and unreached hosts do not run the release."""
        return int(ExitStatus.DEVICE) if self.failed else int(ExitStatus.OK)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"inventory": self.inventory, "limit": self.limit, "forks": self.forks,
                "ok": len(self.ok), "failed": len(self.failed),
                "seconds": round(self.seconds, 3),
                "deploy_seconds": round(self.deploy_seconds, 3),
                "bundles": [b.to_json() for b in self.bundles],
                "stages": [s.to_json() for s in self.stages], "stopped": self.stopped,
                "hosts": [h.to_json() for h in self.hosts]}
