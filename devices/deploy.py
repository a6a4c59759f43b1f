"""Deploy mechanisms: push an artifact, health-check it there, benchmark it, switch.

A deploy of one artifact: install the release's files the device lacks (``devices.release``)
-> ``health`` (load + one run) -> ``bench`` (``devices.measure``) -> ``activate`` -> ``prune``.
Any failure before ``activate`` leaves ``current`` where it was: that is the automatic rollback.
``install_all`` and ``device_benches`` install several candidates and time them together in ONE
interleaved agent ``bench`` (one after another when the device cannot hold them together).
Which candidate to deploy is the flow's choice (``edge.flows.deploy``); the profile arrives as
an object, never re-read by id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devices.device import Device, kind
from devices.lock import deploy_lock
from devices.measure import Rounds, time_on_device
from devices.release import (
    DEFAULT_KEEP,
    DEFAULT_SLOT,
    HealthCheck,
    Transfer,
    activate_release,
    check_keep,
    health,
    install_artifact,
    is_active,
    prune_quietly,
)
from edge.core.errors import CheckFailed, DeviceError
from edge.core.profile import Profile
from edge.core.values import Artifact, BenchResult, CandidateResult, DeployReport

__all__ = ["DeployOutcome", "as_planned", "deploy_artifact", "device_benches", "install_all",
           "measure_on_device"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class DeployOutcome:
    """A deploy's DeployReport plus what the release machinery did around it."""

    report: DeployReport
    transfer: Transfer
    health: HealthCheck
    previous: str | None  # what was current before: ``edge rollback`` goes back to it
    pruned: tuple[str, ...] = ()

    @property
    def bytes_sent(self) -> int:
        """Artifact bytes uploaded (0 when the device already held every file)."""
        return self.transfer.bytes_sent

    def to_json(self) -> dict[str, Any]:
        """The DeployReport's JSON plus bytes_sent, transfer, health, previous, pruned."""
        return {**self.report.to_json(), "bytes_sent": self.transfer.bytes_sent,
                "transfer": self.transfer.to_json(), "health": self.health.to_json(),
                "previous": self.previous, "pruned": list(self.pruned)}


def device_benches(device: Device, installed: list[tuple[CandidateResult, str]], rounds: Rounds,
                   threads: int) -> tuple[dict[str, BenchResult], str]:
    """Every installed candidate (its result, its model on the device) timed, its observation
    held to its plan (``BenchResult.planned_for``); and how they were timed."""
    benches, how = _device_benches(device, {r.candidate.id: m for r, m in installed}, rounds,
                                   threads)
    plans = {r.candidate.id: r.artifact for r, _ in installed}
    return {k: b.planned_for(plans[k]) for k, b in benches.items()}, how


def _device_benches(device: Device, models: dict[str, str], rounds: Rounds,
                    threads: int) -> tuple[dict[str, BenchResult], str]:
    """Every candidate timed in ONE interleaved bench; when the device cannot run them together
    (the agent is killed, e.g. out of memory, or one fails mid-rounds), one after another, each
    in its own agent process, those that fail alone dropping out; and how they were timed."""
    try:
        return (time_on_device(device, models, rounds, threads=threads, skip_failed=True),
                "in one interleaved bench")
    except DeviceError as exc:
        if len(models) < 2:
            raise
        log.warning("%s could not time the %d candidates together (%s); timing them one after "
                    "another instead", device.label, len(models), exc)
    benches: dict[str, BenchResult] = {}
    for key, model in models.items():
        try:
            benches |= time_on_device(device, {key: model}, rounds, threads=threads)
        except DeviceError as exc:
            log.warning("%s: %s dropped out: %s", device.label, key, exc)
    if not benches:
        raise DeviceError(f"{device.label}: no candidate could be benchmarked on the device")
    return benches, "one after another (not together: see the warning)"


def as_planned(installed: list[tuple[CandidateResult, str]], benches: dict[str, BenchResult],
               *, allowed: bool) -> list[CandidateResult]:
    """The installed candidates timed (in ``benches``) that ran on the unit they were made for
    (all of them when ``allowed``, or when none did: the deploy then says which fell back);
    the others dropped, with a warning."""
    measured = [r for r, _ in installed if r.candidate.id in benches]
    planned = [r for r in measured if not benches[r.candidate.id].fell_back]
    if allowed or not planned:
        return measured
    for result in measured:
        if result not in planned:
            log.warning("%s fell back: %s; not chosen", result.candidate.id,
                        benches[result.candidate.id].fell_back)
    return planned


def install_all(device: Device, bundle_dir: Path, usable: list[CandidateResult]
                ) -> tuple[list[tuple[CandidateResult, str]], Transfer]:
    """Every candidate's release installed (not activated); one that fails to install drops
    out (all fail: the first error)."""
    installed, errors, transfer = [], [], Transfer()
    for result in usable:
        assert result.artifact is not None
        try:
            model, sent = install_artifact(device, bundle_dir, result.artifact)
        except DeviceError as exc:  # this candidate does not reach the device; others compete
            errors.append(exc)
            continue
        installed.append((result, model))
        transfer += sent
    if not installed:
        raise errors[0]
    return installed, transfer


def deploy_artifact(
    device: Device, root: Path, artifact: Artifact, *, profile: Profile, rounds: Rounds,
    threads: int, keep: int = DEFAULT_KEEP, name: str = DEFAULT_SLOT, allow_fallback: bool = False,
) -> DeployOutcome:
    """Install (only missing files), health-check, benchmark, activate in the model's slot
    ``name``, prune one artifact. An artifact made for an accelerator that ran elsewhere is
    refused before the switch (exit 1), unless ``allow_fallback``."""
    check_keep(keep)
    release = artifact.release_id[:16]
    model, transfer = install_artifact(device, root, artifact)
    checked = health(device, model, release)
    report = _bench(device, model, artifact, profile=profile, rounds=rounds, threads=threads)
    _check_fallback(report, device, allow_fallback, keep)
    previous = activate_release(device, release, artifact.candidate.id, name)
    pruned = prune_quietly(device, keep)
    return DeployOutcome(report=replace(report, active=True, name=name), transfer=transfer,
                         health=checked, previous=previous, pruned=pruned)


def measure_on_device(
    device: Device, root: Path, artifact: Artifact, *, profile: Profile, rounds: Rounds,
    threads: int, activate: bool, name: str | None = None,
) -> DeployReport:
    """Install an artifact's files under ``root`` on the device, benchmark, maybe activate it
    in the slot ``name`` [default]. ``active``: current in that slot (no name, no activation:
    in any slot).

    Activating first health-checks the release; nothing is pruned (see ``deploy_artifact``).
    """
    with deploy_lock(device, "deploy" if activate else "measurement"):
        release = artifact.release_id[:16]
        model, _ = install_artifact(device, root, artifact)
        if activate:
            health(device, model, release)
        report = _bench(device, model, artifact, profile=profile, rounds=rounds,
                        threads=threads)
        if activate:
            slot = name or DEFAULT_SLOT
            activate_release(device, release, artifact.candidate.id, slot)
            return replace(report, active=True, name=slot)
        # measured without a switch: it is active only if it already was the slot's release
        return replace(report, active=is_active(device, release, name), name=name)


def _check_fallback(report: DeployReport, device: Device, allowed: bool, keep: int) -> None:
    """CheckFailed when the artifact ran away from the unit it was made for (not allowed); its
    release, never activated, is pruned first."""
    fell_back = report.bench.fell_back
    if fell_back and not allowed:
        prune_quietly(device, keep)
        raise CheckFailed(f"{report.candidate} fell back on {device.label}: {fell_back}; the "
                          "device keeps its current release (--allow-fallback deploys it)")


def _bench(device: Device, model: str, artifact: Artifact, *, profile: Profile, rounds: Rounds,
           threads: int) -> DeployReport:
    candidate = artifact.candidate.id
    bench = time_on_device(device, {candidate: model}, rounds, threads=threads,
                           profile=profile)[candidate].planned_for(artifact)
    return DeployReport(
        target=device.label, transport=kind(device.transport), profile=profile.id,
        candidate=candidate, artifact_sha256=artifact.sha256, release=artifact.release_id[:16],
        active=False, bench=bench)
