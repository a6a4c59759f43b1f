"""Deploy a bundle to a device: push its artifact, health-check it there, benchmark it, switch.

A deploy: install the release's files the device lacks (``devices.release``) -> ``health``
(load + one run) -> ``bench`` (``devices.measure``) -> ``activate`` -> ``prune``. Any failure
before ``activate`` leaves ``current`` where it was: that is the automatic rollback. With
``fastest`` every faithful candidate the device can run is installed and all are timed together
in ONE interleaved agent ``bench`` (one after another when the device cannot hold them
together); ``edge.core.select`` chooses among them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devices.device import Device, kind, open_device
from devices.lock import deploy_lock
from devices.measure import Rounds, time_on_device
from devices.release import (
    DEFAULT_KEEP,
    HealthCheck,
    Transfer,
    activate_release,
    check_keep,
    health,
    install_artifact,
    is_active,
    prune_quietly,
)
from devices.transport import Transport
from edge.core.errors import CheckFailed, DeviceError
from edge.core.select import Budget, choose_candidate, runnable, within_budget
from edge.core.values import (
    Artifact,
    BenchResult,
    Bundle,
    CandidateResult,
    DeployReport,
    MeasuredCandidate,
)

__all__ = ["DeployOutcome", "deploy", "deploy_artifact", "deploy_bundle", "deploy_fastest",
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


def deploy(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    rounds: Rounds, threads: int, keep: int = DEFAULT_KEEP, fastest: bool = False,
    budget: Budget | None = None,
) -> DeployOutcome:
    """Deploy a bundle: its chosen artifact (or the best one the device runs), or with
    ``fastest`` every faithful candidate measured on the device and the fastest activated
    (with a latency ``budget``: among those within it on the device, the one that loses the
    least fidelity).

    Only files the device lacks (by sha256) are sent; the release becomes current only after
    its health check and benchmark passed; afterwards releases beyond ``keep`` are pruned.
    """
    check_keep(keep)
    device = open_device(transport, python=python, work_dir=work_dir)
    with deploy_lock(device):
        return _deploy_locked(device, bundle_dir, bundle, rounds=rounds, threads=threads,
                              keep=keep, fastest=fastest, budget=budget)


def _deploy_locked(device: Device, bundle_dir: Path, bundle: Bundle, *, rounds: Rounds,
                   threads: int, keep: int, fastest: bool,
                   budget: Budget | None) -> DeployOutcome:
    """``deploy`` with the device's deploy lock held: install -> health -> activate -> prune."""
    transport = device.transport
    if fastest:
        return _deploy_fastest(device, bundle_dir, bundle, rounds=rounds, threads=threads,
                               keep=keep, budget=budget)
    result = _usable(bundle, device.runtimes, transport.label)[0]
    assert result.artifact is not None
    outcome = deploy_artifact(device, bundle_dir, result.artifact, profile=bundle.profile,
                              rounds=rounds, threads=threads, keep=keep)
    return replace(outcome, report=replace(outcome.report, reason=_why(bundle, result)))


def _why(bundle: Bundle, result: CandidateResult) -> str:
    """Why plain deploy sent this candidate: the bundle's choice, or the device lacked its
    runtime."""
    if result.candidate.id == bundle.chosen:
        return f"the bundle's choice: {bundle.reason}"
    chosen = bundle.chosen_result()
    need = chosen.artifact.runtime if chosen and chosen.artifact else "?"
    return (f"the bundle chose {bundle.chosen}, but the device has no {need} runtime; "
            f"deployed {result.candidate.id}, the first faithful candidate it can run")


def deploy_bundle(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    rounds: Rounds, threads: int, activate: bool = True, keep: int = DEFAULT_KEEP,
) -> DeployReport:
    """Deploy the bundle's chosen artifact (or the best one the device can run) and measure it.

    The release becomes current only after its health check and benchmark passed.
    """
    if not activate:
        device = open_device(transport, python=python, work_dir=work_dir)
        result = _usable(bundle, device.runtimes, transport.label)[0]
        assert result.artifact is not None
        return measure_on_device(device, bundle_dir, result.artifact, profile=bundle.profile,
                                 rounds=rounds, threads=threads, activate=False)
    return deploy(bundle_dir, bundle, transport, python=python, work_dir=work_dir,
                  rounds=rounds, threads=threads, keep=keep).report


def deploy_fastest(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    rounds: Rounds, threads: int, keep: int = DEFAULT_KEEP,
) -> DeployReport:
    """Measure every faithful candidate the device can run ON the device, all in one
    interleaved bench; activate the one ``edge.core.select`` chooses."""
    return deploy(bundle_dir, bundle, transport, python=python, work_dir=work_dir,
                  rounds=rounds, threads=threads, keep=keep, fastest=True).report


def _deploy_fastest(device: Device, bundle_dir: Path, bundle: Bundle, *, rounds: Rounds,
                    threads: int, keep: int, budget: Budget | None) -> DeployOutcome:
    installed, transfer = _install_all(device, bundle_dir,
                                       _usable(bundle, device.runtimes, device.label))
    benches, how = _device_benches(device, {r.candidate.id: m for r, m in installed}, rounds,
                                   threads)
    measured = [r for r, _ in installed if r.candidate.id in benches]
    try:
        pool, note = within_budget(measured, {k: b.p50_ms for k, b in benches.items()}, budget,
                                   device.label)
    except CheckFailed:
        prune_quietly(device, keep)  # the installed candidates, never activated
        raise
    choice = choose_candidate(pool, _runtimes(bundle),
                              ms={k: b.p50_ms for k, b in benches.items()},
                              where=f"{device.label} {how}")
    chosen = next(r for r in measured if r.candidate.id == choice.id)
    assert chosen.artifact is not None
    outcome = deploy_artifact(device, bundle_dir, chosen.artifact, profile=bundle.profile,
                              rounds=rounds, threads=threads, keep=keep)
    compared = tuple(MeasuredCandidate(candidate=r.candidate.id, bench=benches[r.candidate.id])
                     for r in measured)
    report = replace(outcome.report, compared=compared, reason=note + choice.reason)
    return replace(outcome, report=report, transfer=transfer)


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


def _install_all(device: Device, bundle_dir: Path, usable: list[CandidateResult]
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


def _runtimes(bundle: Bundle) -> tuple[str, ...]:
    """The bundle's profile's runtime order (select's tie-break): the profile kept in its
    manifest (validated as a profile document), else the catalog's."""
    if bundle.profile_spec:
        from edge.core.documents import parse

        return tuple(parse("profile", bundle.profile_spec, "the manifest's profile_spec")
                     .runtimes)
    from edge.core.profile import load_profile

    return tuple(load_profile(bundle.profile).runtimes)


def deploy_artifact(
    device: Device, root: Path, artifact: Artifact, *, profile: str, rounds: Rounds,
    threads: int, keep: int = DEFAULT_KEEP,
) -> DeployOutcome:
    """Install (only missing files), health-check, benchmark, activate, prune one artifact."""
    check_keep(keep)
    release = artifact.release_id[:16]
    model, transfer = install_artifact(device, root, artifact)
    checked = health(device, model, release)
    report = _bench(device, model, artifact, profile=profile, rounds=rounds, threads=threads)
    previous = activate_release(device, release, artifact.candidate.id)
    pruned = prune_quietly(device, keep)
    return DeployOutcome(report=replace(report, active=True), transfer=transfer, health=checked,
                         previous=previous, pruned=pruned)


def measure_on_device(
    device: Device, root: Path, artifact: Artifact, *, profile: str, rounds: Rounds,
    threads: int, activate: bool,
) -> DeployReport:
    """Install an artifact's files under ``root`` on the device, benchmark, maybe activate.

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
            activate_release(device, release, artifact.candidate.id)
            return replace(report, active=True)
        # measured without a switch: it is active only if it already was the current release
        return replace(report, active=is_active(device, release))


def _bench(device: Device, model: str, artifact: Artifact, *, profile: str, rounds: Rounds,
           threads: int) -> DeployReport:
    candidate = artifact.candidate.id
    bench = time_on_device(device, {candidate: model}, rounds, threads=threads,
                           profile=profile)[candidate]
    return DeployReport(
        target=device.label, transport=kind(device.transport), profile=profile,
        candidate=candidate, artifact_sha256=artifact.sha256, release=artifact.release_id[:16],
        active=False, bench=bench)


def _usable(bundle: Bundle, runtimes: frozenset[str], label: str) -> list[CandidateResult]:
    """Faithful candidates the device can run, the bundle's chosen one first."""
    chosen = bundle.chosen_result()
    if chosen is None:
        raise DeviceError("the bundle has no chosen candidate (none kept fidelity); "
                          "fix the model or relax --max-drop, then re-run edge optimize")
    found = runnable(bundle.candidates, bundle.chosen, runtimes)
    if found:
        return found
    faithful = [c for c in bundle.candidates if c.status in ("chosen", "passed")]
    need = ", ".join(sorted({c.artifact.runtime for c in faithful if c.artifact}))
    have = ", ".join(sorted(runtimes)) or "none"
    raise DeviceError(f"{label} has no runtime for this bundle (needs one of {need}; has "
                      f"{have}): install one into the device's python, e.g. pip install "
                      "ai-edge-litert, onnxruntime or openvino")
