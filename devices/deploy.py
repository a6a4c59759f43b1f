"""Push a bundle's artifact to a device, health-check it there, benchmark it, switch to it.

Device layout under the profile's work dir (default ``~/.edge``)::

    agent/edge_agent-<sha12>.py     the agent, by content
    incoming/                       uploads in flight (never run from here)
    releases/<id16>/model.<ext>     one directory per artifact content, verified by sha256
    models/<sha16>.onnx             models pushed for per-node profiling, by content
    current -> releases/<id16>      switched atomically after the health check and benchmark
    history.json                    every switch (deploy or rollback), written atomically

A deploy: ask the agent which of the release's files it lacks (by sha256) -> upload only
those to ``incoming/`` -> ``install`` (sha256 checked, then renamed into the release) ->
``health`` (load + one run) -> ``bench`` -> ``activate`` -> ``prune``. Any failure before
``activate`` leaves ``current`` where it was: that is the automatic rollback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devices.transport import Transport, check_device_path, expand_home
from edge.core import progress
from edge.core.errors import DeviceError, UsageError
from edge.core.model import sha256_file
from edge.core.select import runnable
from edge.core.values import (
    Artifact,
    BenchResult,
    Bundle,
    CandidateResult,
    DeployReport,
    JsonValue,
    MeasuredCandidate,
)

__all__ = ["AGENT_PATH", "DEFAULT_KEEP", "BenchOptions", "DeployOutcome", "Device",
           "HealthCheck", "ReleaseInfo", "ReleasesReport", "RollbackReport", "Transfer",
           "check_paths", "deploy", "deploy_artifact", "deploy_bundle", "deploy_fastest",
           "list_releases", "measure_on_device", "open_device", "profile_on_device",
           "perf_on_device", "prune_releases", "rollback", "time_models_on_device"]

AGENT_PATH = Path(__file__).with_name("agent.py")
DEFAULT_KEEP = 3  # releases kept on the device after a deploy (active and previous always)
_RELEASE = re.compile(r"[0-9a-f]{4,64}")
log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchOptions:
    """How the agent measures on the device."""

    runs: int = 50
    warmup: int = 5
    threads: int = 0  # 0: all of the device's cores


@dataclass(frozen=True, kw_only=True, slots=True)
class Transfer(JsonValue):
    """What a deploy sent: artifact files (the agent itself is not counted)."""

    files_sent: int = 0
    bytes_sent: int = 0
    files_reused: int = 0  # already on the device with the right sha256: not sent
    bytes_reused: int = 0

    def __add__(self, other: Transfer) -> Transfer:
        return Transfer(files_sent=self.files_sent + other.files_sent,
                        bytes_sent=self.bytes_sent + other.bytes_sent,
                        files_reused=self.files_reused + other.files_reused,
                        bytes_reused=self.bytes_reused + other.bytes_reused)


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthCheck(JsonValue):
    """The agent loaded the release's model and ran it once, on the device."""

    release: str
    runtime: str
    load_ms: float
    run_ms: float


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


@dataclass(frozen=True, kw_only=True, slots=True)
class RollbackReport(JsonValue):
    """What ``edge rollback`` switched."""

    target: str
    transport: str
    release: str  # current now
    previous: str | None  # current before
    changed: bool
    artifact: str | None = None
    health: HealthCheck | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseInfo(JsonValue):
    """One release directory on the device."""

    release: str
    complete: bool  # its main model file is installed
    active: bool
    previous: bool  # the rollback target
    size_bytes: int
    files: dict[str, int] = field(default_factory=dict)
    installed: str = ""  # UTC, the directory's mtime
    last_active: str | None = None
    artifact: str | None = None  # candidate id recorded when it was activated


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleasesReport(JsonValue):
    """``edge releases``: what is installed, what is current, the switch history."""

    target: str
    transport: str
    work_dir: str
    active: str | None
    previous: str | None
    releases: tuple[ReleaseInfo, ...]
    history: tuple[dict[str, Any], ...] = ()
    pruned: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Device:
    """A prepared device: where the agent is and which runtimes it found."""

    transport: Transport
    python: str
    work: str
    agent: str
    runtimes: frozenset[str] = frozenset()

    def call(self, *args: str, timeout: float = 600.0) -> dict:
        """Run an agent command; its JSON or a DeviceError with the agent's message."""
        done = self.transport.run([self.python, self.agent, *args], timeout=timeout)
        try:
            reply = json.loads(done.stdout.strip().splitlines()[-1])
            if not isinstance(reply, dict):
                raise ValueError(reply)
        except (IndexError, ValueError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            how = "was killed" if done.status < 0 or done.status > 128 else "failed"
            raise DeviceError(f"{self.transport.label}: agent {args[0]} {how} "
                              f"(exit {done.status}): {tail}") from None
        if done.status != 0 or "error" in reply:
            raise DeviceError(f"{self.transport.label}: {reply.get('error', 'agent failed')}")
        return reply


def deploy(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    bench: BenchOptions, keep: int = DEFAULT_KEEP, fastest: bool = False, tie: float = 0.10,
) -> DeployOutcome:
    """Deploy a bundle: its chosen artifact (or the best one the device runs), or with
    ``fastest`` every faithful candidate measured on the device and the fastest activated.

    Only files the device lacks (by sha256) are sent; the release becomes current only after
    its health check and benchmark passed; afterwards releases beyond ``keep`` are pruned.
    """
    _check_keep(keep)
    device = open_device(transport, python=python, work_dir=work_dir)
    if fastest:
        return _deploy_fastest(device, bundle_dir, bundle, bench=bench, keep=keep, tie=tie)
    result = _pick(bundle, device.runtimes, transport.label)
    assert result.artifact is not None
    outcome = deploy_artifact(device, bundle_dir, result.artifact, profile=bundle.profile,
                              bench=bench, keep=keep)
    if result.candidate.id == bundle.chosen:
        reason = f"the bundle's choice: {bundle.reason}"
    else:
        chosen = bundle.chosen_result()
        need = chosen.artifact.runtime if chosen and chosen.artifact else "?"
        reason = (f"the bundle chose {bundle.chosen}, but the device has no {need} runtime; "
                  f"deployed {result.candidate.id}, the first faithful candidate it can run")
    return replace(outcome, report=replace(outcome.report, reason=reason))


def deploy_bundle(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    bench: BenchOptions, activate: bool = True, keep: int = DEFAULT_KEEP,
) -> DeployReport:
    """Deploy the bundle's chosen artifact (or the best one the device can run) and measure it.

    The release becomes current only after its health check and benchmark passed.
    """
    if not activate:
        device = open_device(transport, python=python, work_dir=work_dir)
        result = _pick(bundle, device.runtimes, transport.label)
        assert result.artifact is not None
        return measure_on_device(device, bundle_dir, result.artifact, profile=bundle.profile,
                                 bench=bench, activate=False)
    return deploy(bundle_dir, bundle, transport, python=python, work_dir=work_dir, bench=bench,
                  keep=keep).report


def deploy_fastest(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    bench: BenchOptions, tie: float = 0.10, keep: int = DEFAULT_KEEP,
) -> DeployReport:
    """Measure every faithful candidate the device can run ON the device; activate the fastest.

    Candidates within ``tie`` of the fastest p50 count as equal; the bundle's order decides.
    """
    return deploy(bundle_dir, bundle, transport, python=python, work_dir=work_dir, bench=bench,
                  keep=keep, fastest=True, tie=tie).report


def _deploy_fastest(device: Device, bundle_dir: Path, bundle: Bundle, *, bench: BenchOptions,
                    keep: int, tie: float) -> DeployOutcome:
    usable = _usable(bundle, device.runtimes, device.transport.label)
    measured: list[tuple[DeployReport, str]] = []
    errors: list[DeviceError] = []
    transfer = Transfer()
    for result in usable:
        assert result.artifact is not None
        try:
            model, sent = _install(device, bundle_dir, result.artifact,
                                   result.artifact.release_id[:16])
            transfer += sent
            report = _bench(device, model, result.artifact, profile=bundle.profile,
                            bench=bench)
            measured.append((report, model))
        except DeviceError as exc:  # this candidate does not run there; the others compete
            errors.append(exc)
    if not measured:
        raise errors[0]
    fastest = min(r.bench.p50_ms for r, _ in measured)
    best, model = next((r, m) for r, m in measured if r.bench.p50_ms <= fastest * (1 + tie))
    health = _health(device, model, best.release)
    previous = _activate(device, best.release, best.candidate)
    pruned = _prune_quietly(device, keep)
    reports = [r for r, _ in measured]
    compared = tuple(MeasuredCandidate(candidate=r.candidate, bench=r.bench) for r in reports)
    slowest = max(reports, key=lambda r: r.bench.p50_ms)
    reason = (f"fastest of {len(reports)} faithful candidates measured on the device "
              f"(p50 {best.bench.p50_ms:.3f} ms; slowest {slowest.candidate} "
              f"{slowest.bench.p50_ms:.3f} ms)")
    report = replace(best, active=True, compared=compared, reason=reason)
    return DeployOutcome(report=report, transfer=transfer, health=health, previous=previous,
                         pruned=pruned)


def deploy_artifact(
    device: Device, root: Path, artifact: Artifact, *, profile: str, bench: BenchOptions,
    keep: int = DEFAULT_KEEP,
) -> DeployOutcome:
    """Install (only missing files), health-check, benchmark, activate, prune one artifact."""
    _check_keep(keep)
    release = artifact.release_id[:16]
    model, transfer = _install(device, root, artifact, release)
    health = _health(device, model, release)
    report = _bench(device, model, artifact, profile=profile, bench=bench)
    previous = _activate(device, release, artifact.candidate.id)
    pruned = _prune_quietly(device, keep)
    return DeployOutcome(report=replace(report, active=True), transfer=transfer, health=health,
                         previous=previous, pruned=pruned)


def measure_on_device(
    device: Device, root: Path, artifact: Artifact, *, profile: str, bench: BenchOptions,
    activate: bool,
) -> DeployReport:
    """Install an artifact's files under ``root`` on the device, benchmark, maybe activate.

    Activating first health-checks the release; nothing is pruned (see ``deploy_artifact``).
    """
    release = artifact.release_id[:16]
    model, _ = _install(device, root, artifact, release)
    if activate:
        _health(device, model, release)
    report = _bench(device, model, artifact, profile=profile, bench=bench)
    if activate:
        _activate(device, release, artifact.candidate.id)
        return replace(report, active=True)
    # measured without a switch: it is active only if it already was the current release
    return replace(report, active=device.call("releases", device.work).get("active") == release)


def rollback(transport: Transport, *, python: str, work_dir: str,
             to: str | None = None) -> RollbackReport:
    """Make the previously active release (or ``to``, an installed id or unique prefix)
    current again, after its health check; record the switch in the device's history.

    A malformed or unknown release is a UsageError; nothing is changed then.
    """
    if to is not None:
        _check_release_text(to)
    device = _prepare(transport, python, work_dir)
    state = device.call("releases", device.work)
    active = state.get("active")
    if to is None:
        target = state.get("previous")
        if target is None:
            raise UsageError(f"{transport.label}: no previous release to roll back to "
                             f"(active: {active or 'none'}); see edge releases, then "
                             "give --to RELEASE")
    else:
        target = _resolve(to, state, transport.label)
    info = next(r for r in state["releases"] if r["release"] == target)
    if target == active:
        return RollbackReport(target=transport.label, transport=_kind(transport),
                              release=target, previous=active, changed=False,
                              artifact=info.get("artifact"))
    health = _health(device, info["model"], target)
    reply = device.call("rollback", device.work, "--to", target)
    return RollbackReport(target=transport.label, transport=_kind(transport),
                          release=reply["active"], previous=reply.get("previous"),
                          changed=bool(reply.get("changed")), artifact=reply.get("artifact"),
                          health=health)


def list_releases(transport: Transport, *, python: str, work_dir: str,
                  prune_keep: int | None = None) -> ReleasesReport:
    """The device's releases (most recently used first), active, previous, history;
    with ``prune_keep`` first remove inactive releases beyond that many."""
    if prune_keep is not None:
        _check_keep(prune_keep)
    device = _prepare(transport, python, work_dir)
    pruned: tuple[str, ...] = ()
    if prune_keep is not None:
        pruned = tuple(device.call("prune", device.work, "--keep", str(prune_keep))["removed"])
    state = device.call("releases", device.work)
    releases = tuple(ReleaseInfo(
        release=r["release"], complete=bool(r["complete"]), active=bool(r["active"]),
        previous=bool(r.get("previous")), size_bytes=int(r["size_bytes"]),
        files=dict(r.get("files", {})), installed=r.get("installed", ""),
        last_active=r.get("last_active"), artifact=r.get("artifact"))
        for r in state["releases"])
    return ReleasesReport(target=transport.label, transport=_kind(transport),
                          work_dir=device.work, active=state.get("active"),
                          previous=state.get("previous"), releases=releases,
                          history=tuple(state.get("history", ())), pruned=pruned)


def prune_releases(transport: Transport, *, python: str, work_dir: str,
                   keep: int = DEFAULT_KEEP) -> tuple[str, ...]:
    """Remove the least recently used releases beyond ``keep`` (never the active one or the
    rollback target); return the removed ids."""
    _check_keep(keep)
    device = _prepare(transport, python, work_dir)
    return tuple(device.call("prune", device.work, "--keep", str(keep))["removed"])


def _kind(transport: Transport) -> str:
    return "local" if transport.is_local else "ssh"


def _check_keep(keep: int) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise UsageError(f"--keep {keep!r}: keep at least 1 release")


def _check_release_text(text: str) -> None:
    if not _RELEASE.fullmatch(text):
        raise UsageError(f"--to {text!r}: a release is 4 to 64 lowercase hex digits "
                         "(see edge releases)")


def _resolve(text: str, state: dict, label: str) -> str:
    """An installed, complete release id from an id or a unique prefix of one."""
    complete = [r["release"] for r in state["releases"] if r["complete"]]
    matches = [r for r in complete if r.startswith(text)]
    if text in complete:
        return text
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"{label}: release {text} is not installed (installed: "
                         f"{', '.join(complete) or 'none'})")
    raise UsageError(f"{label}: release prefix {text} is ambiguous ({', '.join(matches)})")


def _bench(device: Device, model: str, artifact: Artifact, *, profile: str,
           bench: BenchOptions) -> DeployReport:
    transport = device.transport
    with progress.step(f"{transport.label}: benchmarking {artifact.candidate.id} "
                       f"({bench.runs} runs)"):
        measured = device.call("bench", model, "--runs", str(bench.runs), "--warmup",
                               str(bench.warmup), "--threads", str(bench.threads))
    return DeployReport(
        target=transport.label, transport=_kind(transport), profile=profile,
        candidate=artifact.candidate.id, artifact_sha256=artifact.sha256,
        release=artifact.release_id[:16], active=False,
        bench=_bench_result(measured, transport.label, profile=profile))


def _health(device: Device, model: str, release: str) -> HealthCheck:
    """The gate before a switch: the agent loads the model and runs it once."""
    try:
        with progress.step(f"{device.transport.label}: health check of release {release}"):
            reply = device.call("health", "--model", model, timeout=300)
    except DeviceError as exc:
        label = device.transport.label
        why = str(exc).removeprefix(f"{label}: ")
        raise DeviceError(f"{label}: release {release} failed its health check and was not "
                          f"activated; the current release is unchanged ({why})") from None
    return HealthCheck(release=release, runtime=reply["runtime"],
                       load_ms=float(reply["load_ms"]), run_ms=float(reply["run_ms"]))


def _activate(device: Device, release: str, artifact: str) -> str | None:
    """Switch ``current`` to the release; return the release that was current before."""
    return device.call("activate", device.work, release, "--artifact", artifact).get("previous")


def _prune_quietly(device: Device, keep: int) -> tuple[str, ...]:
    """Prune after a successful switch; a failure here is a warning, not a failed deploy."""
    try:
        return tuple(device.call("prune", device.work, "--keep", str(keep))["removed"])
    except DeviceError as exc:
        log.warning("could not prune old releases: %s", exc)
        return ()


def profile_on_device(device: Device, model: Path, *, threads: int = 1, runs: int = 10) -> dict:
    """Per-node kernel ms and the optimized whole-model ms of an ONNX model, measured ON the device.

    The model goes to ``models/<sha16>.onnx`` under the work dir (sha256-verified by the agent)
    unless that file is already there. The agent's JSON comes back with ``uploaded`` (whether
    this call pushed the model), ``model`` (its path on the device) and ``where``.
    """
    model = Path(model)
    if not model.is_file():
        raise UsageError(f"{model}: no such model file")
    if model.suffix != ".onnx":
        raise UsageError(f"{model}: per-node profiling needs an .onnx model")
    remote, uploaded = _stored(device, model)
    with progress.step(f"{device.transport.label}: profiling every node ({runs} runs)"):
        reply = device.call("profile", "--model", remote, "--threads", str(threads),
                            "--runs", str(runs))
    return {**reply, "uploaded": uploaded, "model": remote, "where": device.transport.label}


def time_models_on_device(device: Device, models: list[Path], *, threads: int = 1,
                          rounds: int = 20, budget_s: float = 60.0) -> dict:
    """Median ms of each model (one runtime) ON the device, timed in interleaved rounds by the
    agent. Each file goes to ``models/<sha16><suffix>`` under the work dir (sha256-checked)
    unless already there; the agent's JSON comes back with ``where``."""
    remote = [_stored(device, Path(model))[0] for model in models]
    with progress.step(f"{device.transport.label}: timing {len(remote)} models "
                       f"(up to {rounds} interleaved rounds)"):
        reply = device.call("rounds", *remote, "--rounds", str(rounds), "--threads",
                            str(threads), "--budget-s", str(budget_s),
                            timeout=max(600.0, 4 * budget_s))
    return {**reply, "where": device.transport.label}


def perf_on_device(device: Device, ir: Path, *, threads: int = 1, runs: int = 20) -> dict:
    """Per-node times of an OpenVINO IR from the CPU plugin's counters ON the device. The .xml
    and its .bin go to ``models/<sha16 of both>.xml|.bin`` (sha256-checked) unless there."""
    ir = Path(ir)
    weights = ir.with_suffix(".bin")
    if ir.suffix != ".xml" or not ir.is_file() or not weights.is_file():
        raise UsageError(f"{ir}: an OpenVINO IR needs its .xml and .bin side by side")
    # one name for the pair: the same .xml with other weights must not reuse a stale .bin
    stem = hashlib.sha256((sha256_file(ir) + sha256_file(weights)).encode()).hexdigest()[:16]
    _stored(device, weights, stem)
    remote, _ = _stored(device, ir, stem)
    with progress.step(f"{device.transport.label}: reading OpenVINO counters ({runs} runs)"):
        reply = device.call("perf", "--model", remote, "--threads", str(threads),
                            "--runs", str(runs))
    return {**reply, "where": device.transport.label}


def _stored(device: Device, local: Path, stem: str | None = None) -> tuple[str, bool]:
    """``local``'s path under the device's models/ (named ``stem`` or by its sha256), pushed
    sha256-checked unless already there; and whether this call pushed it."""
    sha256 = sha256_file(local)
    remote = f"{device.work}/models/{stem or sha256[:16]}{local.suffix}"
    uploaded = not device.transport.exists(remote)
    if uploaded:
        _install_file(device, local, sha256, remote)
    return remote, uploaded


def open_device(transport: Transport, *, python: str, work_dir: str) -> Device:
    """Prepare the work dir, push the agent if missing, check python, probe runtimes."""
    with progress.step(f"{transport.label}: preparing the device"):
        device = _prepare(transport, python, work_dir)
        probe = device.call("probe", timeout=120)
    return replace(device, runtimes=frozenset(probe.get("runtimes", {})))


def check_paths(*, python: str, work_dir: str) -> None:
    """Refuse a work dir or device python that is empty, has control characters (newline,
    tab, ...) or starts with ``~user``. Anything else is used literally: every remote command
    is quoted, so ``;``, ``$(...)``, backticks, quotes and spaces are just characters."""
    check_device_path("work_dir", work_dir)
    check_device_path("device python", python)


def _prepare(transport: Transport, python: str, work_dir: str) -> Device:
    check_paths(python=python, work_dir=work_dir)
    home = transport.home()
    work = expand_home(work_dir, home, relative=True)
    python = expand_home(python, home)
    for sub in ("agent", "incoming", "releases"):
        transport.mkdir(f"{work}/{sub}")
    agent = f"{work}/agent/edge_agent-{sha256_file(AGENT_PATH)[:12]}.py"
    if not transport.exists(agent):
        _upload_atomic(transport, AGENT_PATH, agent, work)
    _check_python(transport, python)
    return Device(transport=transport, python=python, work=work, agent=agent)


def _check_python(transport: Transport, python: str) -> None:
    done = transport.run([python, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                         timeout=60)
    if done.status != 0 or done.stdout.strip() != "True":
        raise DeviceError(f"{transport.label}: no usable python at '{python}' (need >= 3.8); "
                          "set access.python in the profile or pass --device-python")


def _upload_atomic(transport: Transport, local: Path, remote: str, work: str) -> None:
    tmp = f"{work}/incoming/{Path(remote).name}.{secrets.token_hex(4)}.partial"
    transport.put(local, tmp)
    done = transport.run(["mv", "-f", "--", tmp, remote], timeout=60)
    if done.status != 0:
        raise DeviceError(f"{transport.label}: cannot move the agent into place: "
                          f"{(done.stderr.strip().splitlines() or ['mv failed'])[-1]}")


def _pick(bundle: Bundle, runtimes: frozenset[str], label: str) -> CandidateResult:
    return _usable(bundle, runtimes, label)[0]


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


def _install(device: Device, bundle_dir: Path, artifact: Artifact,
             release: str) -> tuple[str, Transfer]:
    """Send and install only the files the device lacks (by sha256); the main file goes last,
    so its presence means the release is complete."""
    folder = f"{device.work}/releases/{release}"
    files = [(bundle_dir / c.file, c.sha256, f"model{Path(c.file).suffix}")
             for c in artifact.companions]
    main = f"model{Path(artifact.file).suffix}"
    files.append((bundle_dir / artifact.file, artifact.sha256, main))
    reply = device.call("verify", device.work, release,
                        *[arg for _, sha, name in files for arg in ("--file", f"{name}={sha}")])
    missing = set(reply.get("missing", ()))
    transfer = Transfer()
    for local, sha256, name in files:
        size = local.stat().st_size
        if name in missing:
            _install_file(device, local, sha256, f"{folder}/{name}")
            transfer += Transfer(files_sent=1, bytes_sent=size)
        else:
            transfer += Transfer(files_reused=1, bytes_reused=size)
    return f"{folder}/{main}", transfer


def _install_file(device: Device, local: Path, sha256: str, final: str) -> None:
    """Upload to incoming/ under a fresh name, then the agent checks the sha256 and renames."""
    tmp = f"{device.work}/incoming/{sha256[:16]}.{secrets.token_hex(4)}.partial"
    device.transport.put(local, tmp)
    device.call("install", tmp, final, "--sha256", sha256)


def _bench_result(reply: dict, where: str, profile: str | None = None) -> BenchResult:
    keys = ("runtime", "runs", "warmup", "threads", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
            "load_ms", "peak_rss_mb")
    device = dict(reply.get("device", {}))
    device["runtime_version"] = reply.get("runtime_version")
    metrics = dict(reply.get("metrics") or {})
    if metrics or profile is not None:
        metrics.update(_power(metrics, reply["threads"], profile))
    return BenchResult(where=where, device=device, throughput_fps=reply.get("throughput_fps"),
                       metrics=metrics, **{k: reply[k] for k in keys})


def _power(metrics: dict, threads: int, profile: str | None) -> dict[str, Any]:
    """Measured watts (under load first) with their sysfs paths, else the profile's estimate."""
    for phase in ("during", "after", "before"):
        reading = (metrics.get(phase) or {}).get("power_w") or {}
        if reading.get("value") is not None:
            source = reading.get("source")
            paths = source if isinstance(source, list) else [source]
            return {"power_w": reading["value"], "power_source": ", ".join(map(str, paths)),
                    "power_phase": phase}
    if profile is None:
        return {"power_w": None, "power_source": "not measured: no sensor and no profile"}
    try:
        from edge.core.profile import load_profile

        spec = load_profile(profile)
    except (UsageError, OSError, ValueError) as exc:
        return {"power_w": None,
                "power_source": f"not measured: no sensor; profile {profile} unavailable ({exc})"}
    idle, top, cores = spec.power.idle_w, spec.power.max_w, spec.compute.cores
    return {"power_w": idle + (top - idle) * min(1.0, threads / cores),
            "power_source": f"estimated from the profile ({idle:g}..{top:g} W), not measured"}
