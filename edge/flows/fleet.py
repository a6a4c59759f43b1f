"""``edge deploy --inventory``: one model or bundle to a fleet of devices named in an Ansible
inventory (devices.inventory), deployed in parallel with bounded concurrency; one host failing
never stops the others.

Per host, lowest precedence first: the profile's ``access`` keys, the command-line device flags
(--identity, --device-python), then the inventory's vars -- as in Ansible, inventory connection
vars beat command-line defaults. One bundle is built per distinct profile, in turn; then at
most ``forks`` hosts are deployed at once, each over its own SSH connection. The per-host table
is drawn by edge.cli.render_fleet.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.connect import Reach, open_transport
from devices.inventory import FleetHost, Inventory, load_inventory
from devices.measure import Rounds
from devices.ssh import HostSpec
from edge.core import progress as bars
from edge.core.bundle import is_bundle
from edge.core.errors import EdgeError, UsageError, first_line
from edge.core.extras import require
from edge.core.intake import source_kind
from edge.core.model import load_onnx
from edge.core.results import keep as keep_result
from edge.core.values import Bundle, DeployReport
from edge.flows.deploy import DeployRequest, build_bundle, deploy, resolve_profile
from edge.flows.fleet_values import FleetBundle, FleetReport, FleetRequest, HostResult
from edge.flows.optimize import latency_budget
from targets.provision import provision_runtime, runtime_for_bundle

__all__ = ["FleetBundle", "FleetReport", "FleetRequest", "HostResult", "describe_fleet",
           "run_fleet"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Job:
    """One host, resolved: where and how to deploy."""

    host: FleetHost
    profile: Any  # edge.core.profile.Profile
    user: str
    port: int
    identity: Path | None
    python: str
    work_dir: str
    threads: int

    @property
    def target(self) -> str:
        address = f"[{self.host.address}]" if ":" in self.host.address else self.host.address
        return f"ssh://{self.user}@{address}:{self.port}"


def run_fleet(request: FleetRequest) -> FleetReport:
    """Build one bundle per distinct profile (in turn), then deploy to at most ``forks`` hosts
    at once, each over its own SSH connection; each host's measurement is kept in its device
    history (``edge.core.results``). A host's failure is recorded, never raised; bad input
    (inventory, --limit, profiles, the source) raises UsageError before any work."""
    started = time.monotonic()
    inventory, jobs = _plan(request)
    require("ssh", "paramiko", why="a fleet deploy (SSH to every host)")
    bundles: dict[str, tuple[Bundle, Path] | str] = {}
    built = []
    for profile_id, profile_jobs in _by_profile(jobs).items():
        outcome = _build_bundle(request, profile_jobs[0].profile, len(profile_jobs))
        bundles[profile_id] = outcome
        built.append(FleetBundle(profile=profile_id, hosts=len(profile_jobs),
                                 **(_bundle_fields(outcome))))
    deploying = time.monotonic()
    results = _deploy_all(request, jobs, bundles)
    for host in results:  # each host's measurement joins its history, as a deploy's does
        if host.report is not None:
            keep_result(host.report)
    done = time.monotonic()
    return FleetReport(inventory=str(inventory.path), limit=request.limit, forks=request.forks,
                       bundles=tuple(built), hosts=results, seconds=done - started,
                       deploy_seconds=done - deploying)


def describe_fleet(request: FleetRequest) -> dict[str, Any]:
    """What run_fleet would do (hosts, targets, profiles), touching nothing."""
    inventory, jobs = _plan(request)
    hosts = [{"host": j.host.name, "target": j.target, "profile": j.profile.id,
              "python": j.python, "work_dir": j.work_dir} for j in jobs]
    steps = []
    for profile_id, profile_jobs in _by_profile(jobs).items():
        if _is_bundle(request.source):
            steps.append(f"use bundle {request.source} for {len(profile_jobs)} {profile_id} "
                         "host(s)")
        else:
            steps.append(f"optimize {request.source} for {profile_id} into "
                         f"{_bundle_out(request, profile_id)}")
    if request.device.provision:
        steps.append("install each bundle's runtime into WORK/venv on every host from wheels "
                     "fetched on this host (pip --no-index on the device)")
    what = ("benchmark every faithful candidate on the device, switch to the one chosen from "
            "those timings" if request.measure_on_device is not False
            else "benchmark on the device, switch its current release (--no-on-device)")
    steps += [f"deploy to {len(jobs)} host(s), at most {request.forks} at once: push, {what}; "
              f"keep {request.keep} releases per host", "print a per-host table"]
    return {"inventory": str(inventory.path), "limit": request.limit, "forks": request.forks,
            "hosts": hosts, "steps": steps}


def _plan(request: FleetRequest) -> tuple[Inventory, list[_Job]]:
    if request.device.host is not None:
        raise UsageError("--host and --inventory exclude each other: the inventory names the "
                         "hosts (use --limit to pick some)")
    if request.forks < 1:
        raise UsageError(f"--forks must be >= 1, got {request.forks}")
    known = request.device.known_hosts
    if known is not None and not known.expanduser().is_file() and not request.device.trust_new_host:
        raise UsageError(f"--known-hosts {known}: no such file (pass --trust-new-host to create "
                         "it with the devices' keys)")
    _check_source(request.source)
    inventory = load_inventory(request.inventory)
    hosts = inventory.select(request.limit)
    profiles: dict[str, Any] = {}
    jobs = [_job(request, inventory, host, profiles) for host in hosts]
    return inventory, jobs


def _check_source(source: Path) -> None:
    if not source.exists():
        raise UsageError(f"{source} does not exist: give an .onnx model or a bundle dir")
    if _is_bundle(source):
        return
    if source_kind(source) == "onnx":  # a corrupt model fails before any work
        load_onnx(source)


def _is_bundle(path: Path) -> bool:
    return is_bundle(path)


def _job(request: FleetRequest, inventory: Inventory, host: FleetHost,
         profiles: dict[str, Any]) -> _Job:
    where = f"inventory {inventory.path}: host {host.name}"
    profile = _host_profile(request, inventory, host, profiles, where)
    access = profile.access
    user = host.user or access.user
    if user is None:
        raise UsageError(f"{where}: no ansible_user, and profile {profile.id} has no "
                         "access.user")
    identity = host.identity or request.device.identity
    if identity is not None and not identity.expanduser().is_file():
        raise UsageError(f"{where}: private key {identity}: no such file")
    threads = request.device.threads
    return _Job(host=host, profile=profile, user=user, port=host.port or access.port,
                identity=identity, python=host.python or request.device.python or access.python,
                work_dir=host.work_dir or access.work_dir,
                threads=profile.compute.default_threads if threads is None else threads)


def _host_profile(request: FleetRequest, inventory: Inventory, host: FleetHost,
                  profiles: dict[str, Any], where: str) -> Any:
    ref = host.profile
    if ref is not None:
        beside = inventory.path.parent / ref
        if Path(ref).suffix in (".yaml", ".yml", ".json") and beside.is_file():
            ref = str(beside)  # a profile file named relative to the inventory
    else:
        ref = request.profile
    if ref is None and not _is_bundle(request.source):
        raise UsageError(f"{where}: no edge_profile var and no --profile: deploying a model "
                         "needs a profile for every host")
    key = ref or "<bundle>"
    if key not in profiles:
        try:
            profiles[key] = _load_profile(request.source, ref)
        except UsageError as exc:
            raise UsageError(f"{where}: {first_line(exc)}") from None
    profile = profiles[key]
    same_id = [p for p in profiles.values() if p.id == profile.id]
    if any(p != profile for p in same_id):
        raise UsageError(f"{where}: two different profiles have the id {profile.id!r}; give "
                         "each profile file its own id")
    return profile


def _load_profile(source: Path, ref: str | None) -> Any:
    return resolve_profile(DeployRequest(source=source, profile=ref))


def _by_profile(jobs: Iterable[_Job]) -> dict[str, list[_Job]]:
    grouped: dict[str, list[_Job]] = {}
    for job in jobs:
        grouped.setdefault(job.profile.id, []).append(job)
    return grouped


def _bundle_out(request: FleetRequest, profile_id: str) -> Path:
    return (request.out_dir or Path(".")) / f"{request.source.stem}-{profile_id}.bundle"


def _build_bundle(request: FleetRequest, profile: Any, hosts: int) -> tuple[Bundle, Path] | str:
    """(bundle, dir) for this profile's hosts, or the one-line reason there is none."""
    if not _is_bundle(request.source):
        log.info("optimizing %s for %s (%d host%s)", request.source, profile.id, hosts,
                 "" if hosts == 1 else "s")
    asked = DeployRequest(source=request.source, profile=profile.id, options=request.options,
                          out=_bundle_out(request, profile.id))
    try:
        return build_bundle(asked, profile)
    except EdgeError as exc:
        return f"no bundle for {profile.id}: {first_line(exc)}"


def _bundle_fields(outcome: tuple[Bundle, Path] | str) -> dict[str, Any]:
    if isinstance(outcome, str):
        return {"error": outcome}
    bundle, where = outcome
    return {"bundle": str(where), "chosen": bundle.chosen}


class _Progress:
    """Per-host progress lines through the ``edge`` logger, with running counts; while bars
    are shown, a hosts bar with the counts and a live status line per host being deployed."""

    def __init__(self, total: int, bar: bars.Step | None = None) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.lock = threading.Lock()
        self.bar = bar or bars.Step()
        self.lines: dict[str, bars.Step] = {}

    @contextlib.contextmanager
    def host(self, job: _Job) -> Iterator[None]:
        """A status line for this host while it deploys."""
        with bars.step(f"{job.host.name}: starting") as line:
            with self.lock:
                self.lines[job.host.name] = line
            try:
                yield
            finally:
                with self.lock:
                    self.lines.pop(job.host.name, None)

    def say(self, job: _Job, text: str) -> None:
        log.info("%s: %s", job.host.name, text)
        with self.lock:
            line = self.lines.get(job.host.name)
        if line is not None:
            line.update(f"{job.host.name}: {text}")

    def finished(self, result: HostResult) -> None:
        with self.lock:
            self.done += 1
            self.failed += not result.ok
            counts = f"[{self.done}/{self.total} done, {self.failed} failed]"
            self.bar.update(f"hosts {self.done}/{self.total} done, {self.failed} failed",
                            completed=self.done)
        if result.ok:
            log.info("%s: ok in %.1f s: %s, p50 %.3f ms %s", result.host, result.seconds,
                     result.candidate, result.p50_ms or 0.0, counts)
        else:
            log.info("%s: FAILED in %.1f s: %s %s", result.host, result.seconds, result.error,
                     counts)


# Recording a new host key rewrites the shared known_hosts file: one connect at a time then.
_KNOWN_HOSTS_LOCK = threading.Lock()


def _deploy_all(request: FleetRequest, jobs: list[_Job],
                bundles: dict[str, tuple[Bundle, Path] | str]) -> tuple[HostResult, ...]:
    if not jobs:
        return ()
    results: dict[str, HostResult] = {}
    workers = min(request.forks, len(jobs))
    log.info("deploying to %d host%s, %d at a time", len(jobs), "" if len(jobs) == 1 else "s",
             workers)
    with bars.step(f"hosts 0/{len(jobs)} done", total=len(jobs)) as bar:
        progress = _Progress(len(jobs), bar)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edge-fleet")
        try:
            futures = {pool.submit(_deploy_one, request, job, bundles[job.profile.id],
                                   progress): job for job in jobs}
            for future in as_completed(futures):
                result = future.result()  # _deploy_one never raises an Exception
                results[result.host] = result
                progress.finished(result)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return tuple(results[job.host.name] for job in jobs)


def _deploy_one(request: FleetRequest, job: _Job, bundle: tuple[Bundle, Path] | str,
                progress: _Progress) -> HostResult:
    started = time.monotonic()

    def failed(error: str) -> HostResult:
        return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                          status="failed", error=" ".join(error.split()),
                          seconds=time.monotonic() - started)

    if isinstance(bundle, str):
        return failed(bundle)
    try:
        with progress.host(job):
            report = _deploy_to(request, job, bundle, lambda text: progress.say(job, text))
    except EdgeError as exc:
        return failed(first_line(exc))
    except Exception as exc:  # noqa: BLE001 - one host's bug must not stop the others
        return failed(f"internal error: {type(exc).__name__}: {first_line(exc)}")
    return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                      status="ok", candidate=report.candidate, release=report.release,
                      p50_ms=report.bench.p50_ms, seconds=time.monotonic() - started,
                      report=report)


def _deploy_to(request: FleetRequest, job: _Job, bundle: tuple[Bundle, Path],
               say: Callable[[str], None]) -> DeployReport:
    device = request.device
    reach = Reach(kind="ssh", host=HostSpec(user=job.user, host=job.host.address, port=job.port),
                  identity=job.identity, known_hosts=device.known_hosts,
                  trust_new_host=device.trust_new_host)
    say(f"connecting to {job.target}")
    with open_transport(reach) as transport:
        if device.trust_new_host:
            with _KNOWN_HOSTS_LOCK:
                transport.home()
        else:
            transport.home()  # connect and authenticate before any work
        manifest, bundle_dir = bundle
        python = job.python
        if device.provision:
            say("provisioning the runtime from wheels fetched on this host")
            python = _provision(transport, job, manifest)
        say("pushing the artifact and benchmarking it on the device")
        return deploy(bundle_dir, manifest, transport, profile=job.profile, python=python,
                      work_dir=job.work_dir,
                      rounds=Rounds(calls=device.runs, warmup=device.warmup),
                      threads=job.threads, keep=request.keep,
                      fastest=request.measure_on_device is not False,
                      budget=latency_budget(request.options, job.profile)
                      if request.measure_on_device is not False else None,
                      opted_out=request.measure_on_device is False).report


def _provision(transport: Any, job: _Job, manifest: Bundle) -> str:
    """--provision on one host: the bundle's runtime into WORK/venv; its python from then on."""
    return provision_runtime(transport, device_python=job.python, work_dir=job.work_dir,
                             runtime=runtime_for_bundle(manifest)).python
