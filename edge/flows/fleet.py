"""``edge deploy --inventory``: one model or bundle to a fleet of devices named in an Ansible
inventory (devices.inventory), deployed in parallel with bounded concurrency; one host failing
never stops the others -- unless the rollout is staged (--canary/--batch/--max-fail,
edge.flows.fleet_stages): then the stages go one after another, and a stage whose failures
exceed the budget halts the rollout, its switched hosts rolled back to their previous release.

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
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devices.connect import Reach, open_transport
from devices.deploy import DeployOutcome
from devices.device import prepare
from devices.inventory import FleetHost, Inventory, load_inventory
from devices.measure import Rounds
from devices.release import check_name, rollback, slot_of_bundle
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
from edge.flows.fleet_stages import over_budget, stage_names, stages
from edge.flows.fleet_values import (
    FleetBundle,
    FleetReport,
    FleetRequest,
    HostResult,
    StageResult,
)
from edge.flows.optimize import latency_budget
from targets.provision import provision_runtime, runtime_for_bundle

__all__ = ["FleetBundle", "FleetJob", "FleetReport", "FleetRequest", "HostResult", "StageResult",
           "build_fleet_bundle", "bundle_fields", "describe_fleet", "jobs_by_profile",
           "plan_fleet", "run_fleet"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetJob:
    """One host, resolved: where and how to deploy (plan_fleet makes them)."""

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
    inventory, jobs = plan_fleet(request)
    require("ssh", "paramiko", why="a fleet deploy (SSH to every host)")
    bundles: dict[str, tuple[Bundle, Path] | str] = {}
    built = []
    for profile_id, profile_jobs in jobs_by_profile(jobs).items():
        outcome = build_fleet_bundle(request, profile_jobs[0].profile, len(profile_jobs))
        bundles[profile_id] = outcome
        built.append(FleetBundle(profile=profile_id, hosts=len(profile_jobs),
                                 **(bundle_fields(outcome))))
    deploying = time.monotonic()
    results, staged, stopped = _rollout(request, jobs, bundles)
    for host in results:  # each host's measurement joins its history, as a deploy's does
        if host.report is not None:
            keep_result(host.report)
    done = time.monotonic()
    return FleetReport(inventory=str(inventory.path), limit=request.limit, forks=request.forks,
                       bundles=tuple(built), hosts=results, seconds=done - started,
                       deploy_seconds=done - deploying, stages=staged, stopped=stopped)


def describe_fleet(request: FleetRequest) -> dict[str, Any]:
    """What run_fleet would do (hosts, targets, profiles), touching nothing."""
    inventory, jobs = plan_fleet(request)
    hosts = [{"host": j.host.name, "target": j.target, "profile": j.profile.id,
              "python": j.python, "work_dir": j.work_dir} for j in jobs]
    steps = []
    for profile_id, profile_jobs in jobs_by_profile(jobs).items():
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
              f"keep {request.keep} releases per host", *_stage_steps(request, jobs),
              "print a per-host table"]
    return {"inventory": str(inventory.path), "limit": request.limit, "forks": request.forks,
            "hosts": hosts, "stages": _stage_plan(request, jobs), "steps": steps}


def _stage_plan(request: FleetRequest, jobs: list[FleetJob]) -> list[dict[str, Any]]:
    """The stages of a staged rollout, by name, with their hosts (not staged: none)."""
    staging = request.staging
    if not staging.staged:
        return []
    cut = stages(jobs, staging.canary, staging.batch)
    return [{"name": name, "hosts": [j.host.name for j in stage]}
            for name, stage in zip(stage_names(len(cut), staging.canary), cut, strict=True)]


def _stage_steps(request: FleetRequest, jobs: list[FleetJob]) -> list[str]:
    """The dry run's lines for the stages, one per stage, and the failure budget."""
    plan = _stage_plan(request, jobs)
    if not plan:
        return []
    budget = request.staging.budget
    return [f"in {len(plan)} stage(s), one after another; a stage with more than {budget} "
            "failed host(s) halts the rollout and rolls its switched hosts back to their "
            "previous release (later stages are not contacted)",
            *(f"  {s['name']}: {', '.join(s['hosts'])}" for s in plan)]


def plan_fleet(request: FleetRequest) -> tuple[Inventory, list[FleetJob]]:
    """The inventory and its selected hosts, resolved (UsageError on bad input, before any
    work). Shared with the Ansible engine (edge.flows.fleet_ansible), as the next three."""
    if request.device.host is not None:
        raise UsageError("--host and --inventory exclude each other: the inventory names the "
                         "hosts (use --limit to pick some)")
    if request.forks < 1:
        raise UsageError(f"--forks must be >= 1, got {request.forks}")
    if request.name is not None:
        check_name(request.name)
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
         profiles: dict[str, Any]) -> FleetJob:
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
    return FleetJob(host=host, profile=profile, user=user, port=host.port or access.port,
                    identity=identity,
                    python=host.python or request.device.python or access.python,
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


def jobs_by_profile(jobs: Iterable[FleetJob]) -> dict[str, list[FleetJob]]:
    """The jobs grouped by their profile's id, in inventory order."""
    grouped: dict[str, list[FleetJob]] = {}
    for job in jobs:
        grouped.setdefault(job.profile.id, []).append(job)
    return grouped


def _bundle_out(request: FleetRequest, profile_id: str) -> Path:
    return (request.out_dir or Path(".")) / f"{request.source.stem}-{profile_id}.bundle"


def build_fleet_bundle(request: FleetRequest, profile: Any,
                       hosts: int) -> tuple[Bundle, Path] | str:
    """(bundle, dir) for this profile's hosts, or the one-line reason there is none."""
    if not _is_bundle(request.source):
        log.info("optimizing %s for %s (%d host%s)", request.source, profile.id, hosts,
                 "" if hosts == 1 else "s")
    # the devices' timings choose (unless --no-on-device): optimize keeps what could win there
    options = replace(request.options, device_measures=request.measure_on_device is not False)
    asked = DeployRequest(source=request.source, profile=profile.id, options=options,
                          out=_bundle_out(request, profile.id))
    try:
        return build_bundle(asked, profile)
    except EdgeError as exc:
        return f"no bundle for {profile.id}: {first_line(exc)}"


def bundle_fields(outcome: tuple[Bundle, Path] | str) -> dict[str, Any]:
    """A FleetBundle's bundle/chosen (or error) fields from build_fleet_bundle's outcome."""
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
    def host(self, job: FleetJob) -> Iterator[None]:
        """A status line for this host while it deploys."""
        with bars.step(f"{job.host.name}: starting") as line:
            with self.lock:
                self.lines[job.host.name] = line
            try:
                yield
            finally:
                with self.lock:
                    self.lines.pop(job.host.name, None)

    def say(self, job: FleetJob, text: str) -> None:
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


def _rollout(request: FleetRequest, jobs: list[FleetJob],
             bundles: dict[str, tuple[Bundle, Path] | str]
             ) -> tuple[tuple[HostResult, ...], tuple[StageResult, ...], str | None]:
    """Every host's result in inventory order, the stages and where the rollout halted. Not
    staged: every host at once, each failure its own."""
    staging = request.staging
    if not staging.staged:
        return _deploy_all(request, jobs, bundles), (), None
    cut = stages(jobs, staging.canary, staging.batch)
    budget = str(staging.budget)
    results: dict[str, HostResult] = {}
    done: list[StageResult] = []
    stopped: str | None = None
    for name, stage in zip(stage_names(len(cut), staging.canary), cut, strict=True):
        names = tuple(j.host.name for j in stage)
        if stopped is not None:
            results |= {j.host.name: _not_reached(j, name) for j in stage}
            done.append(StageResult(name=name, hosts=names, budget=budget))
            continue
        got, failed, halted = _run_stage(request, stage, bundles, name)
        results |= {h.host: h for h in got}
        stopped = name if halted else None
        done.append(StageResult(name=name, hosts=names, failed=failed, budget=budget,
                                result="halted" if halted else "done"))
    return tuple(results[j.host.name] for j in jobs), tuple(done), stopped


def _run_stage(request: FleetRequest, stage: tuple[FleetJob, ...],
               bundles: dict[str, tuple[Bundle, Path] | str],
               name: str) -> tuple[tuple[HostResult, ...], int, bool]:
    """One stage deployed (at most --forks at once); over its budget, its switched hosts rolled
    back. Its results, how many failed, and whether it halts the rollout."""
    log.info("stage %s: %s", name, ", ".join(j.host.name for j in stage))
    pythons: dict[str, str] = {}
    got = tuple(replace(h, stage=name) for h in _deploy_all(request, list(stage), bundles,
                                                               pythons))
    failed = sum(not h.ok for h in got)
    if not over_budget(failed, len(stage), request.staging.budget):
        return got, failed, False
    log.warning("stage %s: %d of %d host(s) failed, more than --max-fail %s: halting the "
                "rollout; rolling back the hosts it switched", name, failed, len(stage),
                request.staging.budget)
    return _roll_back(request, stage, got, pythons), failed, True


def _not_reached(job: FleetJob, stage: str) -> HostResult:
    return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                      status="not reached", stage=stage,
                      error=f"not reached: the rollout halted before stage {stage}")


def _roll_back(request: FleetRequest, stage: tuple[FleetJob, ...], got: tuple[HostResult, ...],
               pythons: dict[str, str]) -> tuple[HostResult, ...]:
    """The stage's hosts switched by this run back on their previous release, in parallel."""
    jobs = {j.host.name: j for j in stage}
    switched = [h for h in got if h.outcome == "deployed" and h.previous is not None]
    back: dict[str, HostResult] = {}
    if switched:
        with ThreadPoolExecutor(max_workers=min(request.forks, len(switched)),
                                thread_name_prefix="edge-fleet-rollback") as pool:
            back = dict(zip((h.host for h in switched), pool.map(
                lambda h: _roll_back_one(request, jobs[h.host], h, pythons.get(h.host)),
                switched), strict=True))
    return tuple(back.get(h.host, _first_release(h)) for h in got)


def _first_release(host: HostResult) -> HostResult:
    """A host of a halted stage kept as it is; switched with no release before: it stays on
    the new one (a whole release), saying so."""
    if host.outcome != "deployed":
        return host
    return replace(host, error="its stage halted, but it had no previous release to roll "
                               "back to: it stays on this one")


def _slot_of(host: HostResult) -> str:
    """The slot a host's deploy switched (its report says)."""
    assert host.report is not None and host.report.name is not None
    return host.report.name


def _roll_back_one(request: FleetRequest, job: FleetJob, host: HostResult,
                   python: str | None) -> HostResult:
    """One host back on ``host.previous`` (a failure: it stays on the new release)."""
    assert host.previous is not None
    log.info("%s: rolling back to release %s", job.host.name, host.previous)
    try:
        with open_transport(_reach(request, job)) as transport:
            done = rollback(transport, python=python or job.python, work_dir=job.work_dir,
                            to=host.previous, name=_slot_of(host))
    except Exception as exc:  # noqa: BLE001 - one host's failure must not stop the others'
        why = first_line(exc) if isinstance(exc, EdgeError) else (
            f"internal error: {type(exc).__name__}: {first_line(exc)}")
        log.warning("%s: rollback FAILED: %s", job.host.name, why)
        return replace(host, error=f"its stage halted; rollback to {host.previous} failed, "
                                   f"so it stays on this release: {why}")
    return replace(host, status="rolled back", current=done.release,
                   error=f"rolled back to {done.release}: its stage went over --max-fail")


def _deploy_all(request: FleetRequest, jobs: list[FleetJob],
                bundles: dict[str, tuple[Bundle, Path] | str],
                pythons: dict[str, str] | None = None) -> tuple[HostResult, ...]:
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
                                   progress, pythons): job for job in jobs}
            for future in as_completed(futures):
                result = future.result()  # _deploy_one never raises an Exception
                results[result.host] = result
                progress.finished(result)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return tuple(results[job.host.name] for job in jobs)


class _Say:
    """One host's progress callback, and what its deploy learned on the way: the release it
    ran before (``previous``; after a failure, ``current``) and the python it used."""

    def __init__(self, progress: _Progress, job: FleetJob) -> None:
        self.progress, self.job = progress, job
        self.previous: str | None = None
        self.current: str | None = None
        self.python = job.python

    def __call__(self, text: str) -> None:
        self.progress.say(self.job, text)


def _deploy_one(request: FleetRequest, job: FleetJob, bundle: tuple[Bundle, Path] | str,
                progress: _Progress, pythons: dict[str, str] | None = None) -> HostResult:
    started = time.monotonic()
    say = _Say(progress, job)

    def failed(error: str) -> HostResult:
        return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                          status="failed", error=" ".join(error.split()), current=say.current,
                          seconds=time.monotonic() - started)

    if isinstance(bundle, str):
        return failed(bundle)
    try:
        with progress.host(job):
            report = _deploy_to(request, job, bundle, say)
    except EdgeError as exc:
        return failed(first_line(exc))
    except Exception as exc:  # noqa: BLE001 - one host's bug must not stop the others
        return failed(f"internal error: {type(exc).__name__}: {first_line(exc)}")
    if pythons is not None:
        pythons[job.host.name] = say.python
    return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                      status="ok", candidate=report.candidate, release=report.release,
                      p50_ms=report.bench.p50_ms, seconds=time.monotonic() - started,
                      report=report, previous=say.previous, current=report.release)


def _reach(request: FleetRequest, job: FleetJob) -> Reach:
    device = request.device
    return Reach(kind="ssh", host=HostSpec(user=job.user, host=job.host.address, port=job.port),
                 identity=job.identity, known_hosts=device.known_hosts,
                 trust_new_host=device.trust_new_host)


def _deploy_to(request: FleetRequest, job: FleetJob, bundle: tuple[Bundle, Path],
               say: _Say) -> DeployReport:
    device = request.device
    say(f"connecting to {job.target}")
    with open_transport(_reach(request, job)) as transport:
        if device.trust_new_host:
            with _KNOWN_HOSTS_LOCK:
                transport.home()
        else:
            transport.home()  # connect and authenticate before any work
        manifest, bundle_dir = bundle
        if device.provision:
            say("provisioning the runtime from wheels fetched on this host")
            say.python = _provision(transport, job, manifest)
        say("pushing the artifact and benchmarking it on the device")
        try:
            outcome = _deploy_bundle(request, job, bundle_dir, manifest, transport, say.python)
        except EdgeError:
            say.current = _active_release(transport, job, say.python,
                                          request.name or slot_of_bundle(manifest))
            raise
    say.previous = outcome.previous
    return outcome.report


def _deploy_bundle(request: FleetRequest, job: FleetJob, bundle_dir: Path, manifest: Bundle,
                   transport: Any, python: str) -> DeployOutcome:
    device = request.device
    return deploy(bundle_dir, manifest, transport, profile=job.profile, python=python,
                  work_dir=job.work_dir, rounds=Rounds(calls=device.runs, warmup=device.warmup),
                  threads=job.threads, keep=request.keep,
                  fastest=request.measure_on_device is not False,
                  budget=latency_budget(request.options, job.profile)
                  if request.measure_on_device is not False else None,
                  opted_out=request.measure_on_device is False,
                  name=request.name)


def _active_release(transport: Any, job: FleetJob, python: str, slot: str) -> str | None:
    """After a failed deploy: the release the host's slot runs (None when it cannot be
    asked)."""
    try:
        device = prepare(transport, python, job.work_dir)
        return device.call("releases", device.work, "--slot", slot).get("active")
    except Exception:  # noqa: BLE001 - only a better table: the deploy's error is the news
        return None


def _provision(transport: Any, job: FleetJob, manifest: Bundle) -> str:
    """--provision on one host: the bundle's runtime into WORK/venv; its python from then on."""
    return provision_runtime(transport, device_python=job.python, work_dir=job.work_dir,
                             runtime=runtime_for_bundle(manifest)).python
