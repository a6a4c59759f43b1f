"""``edge deploy --inventory --engine ansible``: the same fleet deploy, driven by Ansible.

The hosts and bundles are planned and built as the built-in engine does (edge.flows.fleet);
then a playbook using the edge.fleet collection's ``rollout`` role (devices/ansible/) and an
inventory of the resolved hosts (address, user, port, key, python, work dir) are written into a
private temp dir and run with ansible-runner (``edge[fleet]``, imported lazily). Each host's
outcome of the release task streams into the same HostResult values and per-host table, and
each measurement joins the device's history (edge.core.results), as the built-in engine's do.

One play over every host, in inventory order; each host installs the bundle's chosen candidate
(as ``--no-on-device``) or, with ``--on-device``, the one edge chooses from every faithful
candidate timed there (the action plugin chooses with edge.core.select, as the built-in engine
does); with ``--provision`` the bundle's runtime is first installed into WORK/venv from wheels
fetched here (edge's provisioning over Ansible's connection) and that venv's python runs the
agent, the rollback included. Not staged: every host on its own (the role's batch rollback off,
no serial), as the built-in engine's default. Staged (--canary/--batch/--max-fail,
edge.flows.fleet_stages): the play's ``serial`` cuts the same stages, its
``max_fail_percentage`` and the role's ``rollout_max_fail_percentage`` are the budget, and the
role rolls a stage over it back to its previous release; then Ansible stops the play. A budget
that is a count (``--max-fail N``, N > 0) has no exact Ansible form (a percentage of each batch,
and the batches differ in size): refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

import devices
from devices.measure import bench_result
from edge.core.errors import DeviceError, UsageError
from edge.core.extras import require
from edge.core.results import keep as keep_result
from edge.core.values import Artifact, Bundle, Contest, DeployReport, MeasuredCandidate
from edge.flows.fleet import (
    FleetJob,
    build_fleet_bundle,
    bundle_fields,
    describe_fleet,
    jobs_by_profile,
    plan_fleet,
)
from edge.flows.fleet_stages import Staging, ansible_serial, over_budget, stage_names, stages
from edge.flows.fleet_values import (
    FleetBundle,
    FleetReport,
    FleetRequest,
    HostResult,
    StageResult,
)
from edge.flows.optimize import latency_budget

__all__ = ["COLLECTION", "describe_fleet_ansible", "run_fleet_ansible", "unsafe"]

log = logging.getLogger("edge")

#: The edge.fleet collection's source, shipped in edge's wheel.
COLLECTION = Path(devices.__file__).parent / "ansible"
#: The role's first task: the one whose outcome is the host's.
RELEASE_TASK = "Install, health-check, benchmark and activate the release"
#: The role's task that rolls a host back when its batch went over the failure budget.
ROLLBACK_TASK = "Roll this host back to its previous release (its batch failed)"


def run_fleet_ansible(request: FleetRequest) -> FleetReport:
    """The fleet deploy of ``request`` run by ansible-playbook through ansible-runner."""
    started = time.monotonic()
    _check(request)
    inventory, jobs = plan_fleet(request)
    require("fleet", "ansible_runner", "ansible", why="--engine ansible")
    bundles: dict[str, tuple[Bundle, Path] | str] = {}
    built = []
    for profile_id, profile_jobs in jobs_by_profile(jobs).items():
        bundles[profile_id] = build_fleet_bundle(request, profile_jobs[0].profile,
                                                 len(profile_jobs))
        built.append(FleetBundle(profile=profile_id, hosts=len(profile_jobs),
                                 **bundle_fields(bundles[profile_id])))
    deploying = time.monotonic()
    outcomes = _run(request, [j for j in jobs if not isinstance(bundles[j.profile.id], str)],
                    bundles)
    results = tuple(_result(job, bundles[job.profile.id], outcomes.get(job.host.name))
                    for job in jobs)
    for host in results:
        if host.report is not None:
            keep_result(host.report)
    results, staged, stopped = _staged(request.staging, jobs, results)
    done = time.monotonic()
    return FleetReport(inventory=str(inventory.path), limit=request.limit, forks=request.forks,
                       bundles=tuple(built), hosts=results, seconds=done - started,
                       deploy_seconds=done - deploying, stages=staged, stopped=stopped)


def describe_fleet_ansible(request: FleetRequest) -> dict[str, Any]:
    """What run_fleet_ansible would do (describe_fleet's plan, then the play), touching
    nothing."""
    _check(request)
    plan = describe_fleet(replace(request, measure_on_device=_on_device(request)))
    play = _play(request.staging)
    text = (f"run it as one ansible-playbook play of role edge.fleet.rollout (ansible-runner, "
            f"forks {request.forks}): serial {play.get('serial', 'none (every host at once)')}"
            f", max_fail_percentage {play.get('max_fail_percentage', 'none')}, "
            f"rollout_rollback_batch {str(request.staging.staged).lower()}, "
            f"rollout_provision {str(request.device.provision).lower()}, "
            f"rollout_on_device {str(_on_device(request)).lower()}{_how(request)}")
    return plan | {"engine": "ansible", "play": play, "steps": [*plan["steps"][:-1], text,
                                                               plan["steps"][-1]]}


def _on_device(request: FleetRequest) -> bool:
    """Whether each host times every faithful candidate: only when asked (--on-device); by
    default the ansible engine installs the bundle's choice."""
    return bool(request.measure_on_device)


def _how(request: FleetRequest) -> str:
    """What the release task does beyond the chosen candidate, in the dry run's words."""
    said = []
    if request.device.provision:
        said.append("its action plugin provisions the runtime over Ansible's connection and "
                    "the venv's python runs the agent (the rollback too)")
    if _on_device(request):
        said.append("its module installs and times every faithful candidate on the device, "
                    "edge chooses on this host and the module activates that one")
    return "".join(f"; {s}" for s in said)


def _staged(staging: Staging, jobs: list[FleetJob], results: tuple[HostResult, ...]
            ) -> tuple[tuple[HostResult, ...], tuple[StageResult, ...], str | None]:
    """The hosts with their stage, the stages, where the rollout halted (not staged: as is)."""
    if not staging.staged:
        return results, (), None
    cut = stages(list(range(len(jobs))), staging.canary, staging.batch)
    hosts, done, stopped = list(results), [], None
    for name, stage in zip(stage_names(len(cut), staging.canary), cut, strict=True):
        names = tuple(jobs[i].host.name for i in stage)
        if stopped is not None:
            hosts = [_unreached(h, name) if i in stage else h for i, h in enumerate(hosts)]
            done.append(StageResult(name=name, hosts=names, budget=str(staging.budget)))
            continue
        failed = sum(hosts[i].status == "failed" for i in stage)
        halted = over_budget(failed, len(stage), staging.budget)
        hosts = [replace(h, stage=name) if i in stage else h for i, h in enumerate(hosts)]
        stopped = name if halted else None
        done.append(StageResult(name=name, hosts=names, failed=failed, budget=str(staging.budget),
                                result="halted" if halted else "done"))
    return tuple(hosts), tuple(done), stopped


def _unreached(host: HostResult, stage: str) -> HostResult:
    """A host of a stage after the halt: never contacted (as the built-in engine says)."""
    return replace(host, status="not reached", stage=stage, error="not reached: the rollout "
                   f"halted before stage {stage}", report=None)


def _check(request: FleetRequest) -> None:
    budget = request.staging.max_fail
    if budget is not None and budget.percent is None and budget.count:
        raise UsageError(f"--max-fail {budget} is a count, which --engine ansible cannot "
                         "express (max_fail_percentage is a share of each batch): give a "
                         "percentage (--max-fail 34%) or 0")


def _run(request: FleetRequest, jobs: list[FleetJob],
         bundles: dict[str, tuple[Bundle, Path] | str]) -> dict[str, dict[str, Any]]:
    """Each host's release-task event (host -> event data), streamed as they come."""
    if not jobs:
        return {}
    import ansible_runner

    folder = Path(tempfile.mkdtemp(prefix="edge-ansible-"))
    control = _control_dir(folder)
    outcomes: dict[str, dict[str, Any]] = {}
    try:
        playbook, hosts = _write(folder, request, jobs, bundles)
        (folder / "runner").mkdir()
        log.info("deploying to %d host%s with ansible-playbook, %d at a time", len(jobs),
                 "" if len(jobs) == 1 else "s", request.forks)
        with _own_signal_handlers():  # ansible-runner takes SIGINT/SIGTERM for itself
            runner = ansible_runner.run(
                private_data_dir=str(folder / "runner"), playbook=str(playbook),
                inventory=str(hosts), envvars=_env(folder, request, control),
                forks=request.forks,
                quiet=True, event_handler=lambda event: _event(event, outcomes))
        if not outcomes:  # ansible-playbook itself failed (the collection, edge, a setting)
            tail = runner.stdout.read().strip().splitlines()[-3:] if runner.stdout else []
            raise DeviceError(f"ansible-playbook failed (exit {runner.rc}, {runner.status}): "
                              + (" / ".join(line.strip() for line in tail) or "no output"))
    finally:
        _close_masters(control)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(control, ignore_errors=True)
    return outcomes


def _close_masters(control: Path) -> None:
    """Each ssh master ansible left behind (ControlPersist) exits now: nothing of edge's keeps
    running once it is done, and the next run starts its own."""
    sockets = [p for p in control.iterdir() if p.is_socket()] if control.is_dir() else []
    for socket in sockets:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "edge-master"],
                           capture_output=True, timeout=10, check=False)


#: The longest path of a Unix socket (sun_path, with its NUL) less what ssh adds to ansible's
#: control path while it binds: the 10-character hash, a dot and 16 random characters.
_SOCKET_ROOM = 107 - 1 - 10 - 17


def _control_dir(folder: Path) -> Path:
    """Where ssh's control sockets go: in the private folder, or, when its path is too long
    for a socket (a deep ``$TMPDIR``: ssh could not connect), a short private folder in /tmp,
    removed afterwards as the other is."""
    inside = folder / "cp"
    if len(str(inside)) <= _SOCKET_ROOM:
        return inside
    return Path(tempfile.mkdtemp(prefix="edge-cp-", dir="/tmp"))


@contextlib.contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """SIGINT and SIGTERM back to this process's handlers afterwards: ansible-runner's run()
    replaces them with its own (a flag that cancels the playbook) and never restores them, so a
    later Ctrl-C would only set that flag."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in saved.items():
                signal.signal(sig, handler)


def _write(folder: Path, request: FleetRequest, jobs: list[FleetJob],
           bundles: dict[str, tuple[Bundle, Path] | str]) -> tuple[Path, Path]:
    """The playbook (one play, every host in inventory order) and the inventory of resolved
    hosts, each with its profile's bundle."""
    link = folder / "collections" / "ansible_collections" / "edge" / "fleet"
    link.parent.mkdir(parents=True)
    link.symlink_to(COLLECTION, target_is_directory=True)
    hosts = {}
    for job in jobs:
        bundle = bundles[job.profile.id]
        assert not isinstance(bundle, str)
        hosts[job.host.name] = (_host_vars(job) | _choice_vars(request, job)
                                | {"rollout_bundle": str(bundle[1].resolve())})
    group = {"hosts": hosts, "vars": {"rollout_runs": request.device.runs,
                                      "rollout_warmup": request.device.warmup,
                                      "rollout_keep": request.keep,
                                      "rollout_name": request.name or "",
                                      "rollout_provision": request.device.provision,
                                      "rollout_on_device": _on_device(request),
                                      **_staging_vars(request.staging)}}
    playbook, inventory = folder / "deploy.yml", folder / "hosts.yml"
    playbook.write_text(yaml.safe_dump([_play(request.staging)], sort_keys=False))
    inventory.write_text(yaml.dump({"all": {"children": {"edge": unsafe(group)}}},
                                   Dumper=_UnsafeDumper, sort_keys=False))
    return playbook, inventory


class _Unsafe(str):
    """A string Ansible never templates: YAML's ``!unsafe``."""

    __slots__ = ()


class _UnsafeDumper(yaml.SafeDumper):
    """yaml.safe_dump's dumper that writes an ``_Unsafe`` string as ``!unsafe '...'``."""


_UnsafeDumper.add_representer(
    _Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value)))


def unsafe(value: Any) -> Any:
    """``value`` with every string in it (not the keys: host and var names) marked
    ``!unsafe``: the inventory's vars, the user's paths and the device's python are data, so
    ``{{ lookup('pipe', ...) }}`` in one stays text and never runs on this host."""
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, dict):
        return {key: unsafe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [unsafe(item) for item in value]
    return value


def _play(staging: Staging) -> dict[str, Any]:
    """The play: staged, with the stages as ``serial`` and the budget as
    ``max_fail_percentage``."""
    play: dict[str, Any] = {"name": "edge deploy", "hosts": "edge", "gather_facts": False}
    if staging.staged:
        play |= {"serial": ansible_serial(staging),
                 "max_fail_percentage": _staging_vars(staging)["rollout_max_fail_percentage"]}
    return play | {"roles": [{"role": "edge.fleet.rollout"}]}


def _staging_vars(staging: Staging) -> dict[str, Any]:
    """The role's budget vars: staged, a stage over budget is rolled back together."""
    budget = staging.budget
    percent = 0 if budget is None else (budget.percent or 0)  # a count here is 0 (_check)
    return {"rollout_rollback_batch": staging.staged, "rollout_max_fail_percentage": percent}


def _host_vars(job: FleetJob) -> dict[str, Any]:
    """How to reach the host, as the built-in engine resolved it."""
    found = {"ansible_host": job.host.address, "ansible_user": job.user,
             "ansible_port": job.port, "ansible_python_interpreter": job.python,
             "rollout_work_dir": job.work_dir, "rollout_threads": job.threads}
    if job.identity is not None:
        found["ansible_ssh_private_key_file"] = str(job.identity.expanduser())
    return found


def _choice_vars(request: FleetRequest, job: FleetJob) -> dict[str, Any]:
    """With --on-device, what the host's choice follows: its profile's runtime order and the
    latency budget (--latency-budget, else the profile's) as the built-in engine applies them."""
    if not _on_device(request):
        return {}
    budget = latency_budget(request.options, job.profile)
    found: dict[str, Any] = {"rollout_runtimes": list(job.profile.runtimes)}
    if budget is not None:
        found |= {"rollout_latency_budget_ms": budget.limit,
                  "rollout_latency_budget_name": budget.name}
    return found


def _env(folder: Path, request: FleetRequest, control: Path | None = None) -> dict[str, str]:
    """ansible's settings: the collection, pipelining, ssh with ControlPersist (its sockets
    in ``control``, else the private folder), host keys; ansible's own files in the private
    folder (removed afterwards)."""
    ssh = ["-o ControlMaster=auto", "-o ControlPersist=60s"]
    known = request.device.known_hosts
    if known is not None:
        ssh.append(f"-o UserKnownHostsFile={known.expanduser().resolve()}")
    if request.device.trust_new_host:
        ssh.append("-o StrictHostKeyChecking=accept-new")
    path = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    return {"ANSIBLE_COLLECTIONS_PATH": str(folder / "collections"),
            "ANSIBLE_PIPELINING": "True", "ANSIBLE_SSH_ARGS": " ".join(ssh),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control or folder / "cp"),
            "ANSIBLE_LOCAL_TEMP": str(folder / "tmp"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOME": str(folder / "home"),  # not the user's ~/.ansible
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            # ansible-playbook beside this python first (a venv that is not on PATH)
            "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                     os.environ.get("PATH", "")])}


def _event(event: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> bool:
    """Keep each host's release-task outcome; say it as it comes."""
    data = event.get("event_data") or {}
    kind = event.get("event", "")
    if data.get("task") not in (RELEASE_TASK, ROLLBACK_TASK) or kind not in (
            "runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
        return True
    host = data.get("host", "")
    res = data.get("res") or {}
    if data.get("task") == ROLLBACK_TASK:
        outcomes.setdefault(host, {})["rollback"] = {"ok": kind == "runner_on_ok", "res": res}
        log.info("%s: %s", host, f"rolled back to {res.get('release')}" if kind == "runner_on_ok"
                 else f"rollback FAILED: {_line(res.get('msg'))}")
        return True
    failed = kind != "runner_on_ok" or bool(res.get("unreachable"))
    outcomes[host] = {"failed": failed, "res": res, "seconds": float(data.get("duration") or 0),
                      **outcomes.get(host, {})}
    log.info("%s: %s", host, f"FAILED: {_line(res.get('msg'))}" if failed
             else f"ok: release {res.get('release')}")
    return True


def _line(message: object) -> str:
    """A module's message, its first line (ansible's are sometimes several)."""
    return (str(message or "failed").strip().splitlines() or ["failed"])[0]


def _result(job: FleetJob, bundle: tuple[Bundle, Path] | str,
            outcome: dict[str, Any] | None) -> HostResult:
    """One host's HostResult from its release task's (and rollback's) outcome."""
    base = {"host": job.host.name, "target": job.target, "profile": job.profile.id}
    if isinstance(bundle, str):
        return HostResult(status="failed", error=bundle, **base)
    if outcome is None or "res" not in outcome:
        return HostResult(status="failed", error="not reached: the playbook stopped first",
                          **base)
    res, seconds = outcome["res"], outcome["seconds"]
    if outcome["failed"]:
        error = " ".join(_line(res.get("msg")).split())
        prefixed = error if error.startswith("ssh://") else f"{job.target}: {error}"
        return HostResult(status="failed", error=prefixed, seconds=seconds,
                          current=res.get("current"), **base)
    report = _report(job, bundle[0], res)
    done = HostResult(status="ok", candidate=res.get("candidate"), release=res.get("release"),
                      p50_ms=report.bench.p50_ms if report else None, seconds=seconds,
                      report=report, previous=res.get("previous"), current=res.get("release"),
                      **base)
    return _rolled_back(done, outcome.get("rollback"))


def _rolled_back(host: HostResult, rollback: dict[str, Any] | None) -> HostResult:
    """The host after its batch's rollback (none: as it is), as the built-in engine says it."""
    if rollback is None:
        return host
    res = rollback["res"]
    if not rollback["ok"]:
        return replace(host, error=f"its stage halted; rollback to {host.previous} failed, so "
                                   f"it stays on this release: {_line(res.get('msg'))}")
    return replace(host, status="rolled back", current=res.get("release"),
                   error=f"rolled back to {res.get('release')}: its stage went over --max-fail")


def _report(job: FleetJob, bundle: Bundle, res: dict[str, Any]) -> DeployReport | None:
    """The device's measurement as a DeployReport (None: already current, nothing measured),
    with the candidates it compared (--on-device) as the built-in engine reports them."""
    reply = res.get("bench")
    artifact = _artifact(bundle, res.get("candidate"))
    if not reply or artifact is None:
        return None
    bench = bench_result(reply, reply["results"][0], job.target, profile=job.profile)
    contest = res.get("contest")
    return DeployReport(target=job.target, transport="ssh", profile=job.profile.id,
                        candidate=str(res.get("candidate")),
                        artifact_sha256=artifact.sha256, release=str(res.get("release")),
                        bench=bench, active=True,
                        compared=tuple(MeasuredCandidate.from_json(c)
                                       for c in res.get("compared") or ()),
                        reason=str(res.get("reason") or ""),
                        contest=Contest.from_json(contest) if contest else None,
                        name=str(res["name"]) if res.get("name") else None)


def _artifact(bundle: Bundle, candidate: object) -> Artifact | None:
    """The artifact of the candidate the host activated (the bundle's choice, or the device's)."""
    found = next((c for c in bundle.candidates if c.candidate.id == candidate), None)
    return found.artifact if found is not None else None
