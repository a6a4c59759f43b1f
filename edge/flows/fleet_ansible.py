"""``edge deploy --inventory --engine ansible``: the same fleet deploy, driven by Ansible.

The hosts and bundles are planned and built as the built-in engine does (edge.flows.fleet);
then a playbook using the edge.fleet collection's ``rollout`` role (devices/ansible/) and an
inventory of the resolved hosts (address, user, port, key, python, work dir) are written into a
private temp dir and run with ansible-runner (``edge[fleet]``, imported lazily). Each host's
outcome of the release task streams into the same HostResult values and per-host table, and
each measurement joins the device's history (edge.core.results), as the built-in engine's do.

Every host deploys on its own (no staging, as the built-in engine's default): the role's batch
rollback is off and the play has no serial; each host installs the bundle's chosen candidate
(as ``--no-on-device``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import devices
from devices.measure import bench_result
from edge.core.errors import DeviceError, UsageError
from edge.core.extras import require
from edge.core.results import keep as keep_result
from edge.core.values import Bundle, DeployReport
from edge.flows.fleet import (
    FleetJob,
    build_fleet_bundle,
    bundle_fields,
    jobs_by_profile,
    plan_fleet,
)
from edge.flows.fleet_values import FleetBundle, FleetReport, FleetRequest, HostResult

__all__ = ["COLLECTION", "run_fleet_ansible"]

log = logging.getLogger("edge")

#: The edge.fleet collection's source, shipped in edge's wheel.
COLLECTION = Path(devices.__file__).parent / "ansible"
#: The role's first task: the one whose outcome is the host's.
RELEASE_TASK = "Install, health-check, benchmark and activate the release"


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
    done = time.monotonic()
    return FleetReport(inventory=str(inventory.path), limit=request.limit, forks=request.forks,
                       bundles=tuple(built), hosts=results, seconds=done - started,
                       deploy_seconds=done - deploying)


def _check(request: FleetRequest) -> None:
    if request.device.provision:
        raise UsageError("--provision is not supported with --engine ansible: provision the "
                         "runtime with the built-in engine first")
    if request.measure_on_device:
        raise UsageError("--on-device is not supported with --engine ansible: each host gets "
                         "the bundle's chosen candidate (--no-on-device)")


def _run(request: FleetRequest, jobs: list[FleetJob],
         bundles: dict[str, tuple[Bundle, Path] | str]) -> dict[str, dict[str, Any]]:
    """Each host's release-task event (host -> event data), streamed as they come."""
    if not jobs:
        return {}
    import ansible_runner

    folder = Path(tempfile.mkdtemp(prefix="edge-ansible-"))
    outcomes: dict[str, dict[str, Any]] = {}
    try:
        playbook, hosts = _write(folder, request, jobs, bundles)
        (folder / "runner").mkdir()
        log.info("deploying to %d host%s with ansible-playbook, %d at a time", len(jobs),
                 "" if len(jobs) == 1 else "s", request.forks)
        runner = ansible_runner.run(
            private_data_dir=str(folder / "runner"), playbook=str(playbook),
            inventory=str(hosts), envvars=_env(folder, request), forks=request.forks,
            quiet=True, event_handler=lambda event: _event(event, outcomes))
        if not outcomes:  # ansible-playbook itself failed (the collection, edge, a setting)
            tail = runner.stdout.read().strip().splitlines()[-3:] if runner.stdout else []
            raise DeviceError(f"ansible-playbook failed (exit {runner.rc}, {runner.status}): "
                              + (" / ".join(line.strip() for line in tail) or "no output"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcomes


def _write(folder: Path, request: FleetRequest, jobs: list[FleetJob],
           bundles: dict[str, tuple[Bundle, Path] | str]) -> tuple[Path, Path]:
    """The playbook (one play per profile's bundle) and the inventory of resolved hosts."""
    link = folder / "collections" / "ansible_collections" / "edge" / "fleet"
    link.parent.mkdir(parents=True)
    link.symlink_to(COLLECTION, target_is_directory=True)
    groups: dict[str, Any] = {}
    plays = []
    for index, (profile_id, profile_jobs) in enumerate(jobs_by_profile(jobs).items()):
        bundle = bundles[profile_id]
        assert not isinstance(bundle, str)
        group = f"edge_{index}"
        groups[group] = {"hosts": {j.host.name: _host_vars(j) for j in profile_jobs},
                         "vars": {"rollout_bundle": str(bundle[1].resolve()),
                                  "rollout_runs": request.device.runs,
                                  "rollout_warmup": request.device.warmup,
                                  "rollout_keep": request.keep,
                                  "rollout_rollback_batch": False}}
        plays.append({"name": f"edge deploy: {profile_id}", "hosts": group,
                      "gather_facts": False, "roles": [{"role": "edge.fleet.rollout"}]})
    playbook, hosts = folder / "deploy.yml", folder / "hosts.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    hosts.write_text(yaml.safe_dump({"all": {"children": groups}}, sort_keys=False))
    return playbook, hosts


def _host_vars(job: FleetJob) -> dict[str, Any]:
    """How to reach the host, as the built-in engine resolved it."""
    found = {"ansible_host": job.host.address, "ansible_user": job.user,
             "ansible_port": job.port, "ansible_python_interpreter": job.python,
             "rollout_work_dir": job.work_dir, "rollout_threads": job.threads}
    if job.identity is not None:
        found["ansible_ssh_private_key_file"] = str(job.identity.expanduser())
    return found


def _env(folder: Path, request: FleetRequest) -> dict[str, str]:
    """ansible's settings: the collection, pipelining, ssh with ControlPersist, host keys."""
    ssh = ["-o ControlMaster=auto", "-o ControlPersist=60s"]
    known = request.device.known_hosts
    if known is not None:
        ssh.append(f"-o UserKnownHostsFile={known.expanduser().resolve()}")
    if request.device.trust_new_host:
        ssh.append("-o StrictHostKeyChecking=accept-new")
    path = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    return {"ANSIBLE_COLLECTIONS_PATH": str(folder / "collections"),
            "ANSIBLE_PIPELINING": "True", "ANSIBLE_SSH_ARGS": " ".join(ssh),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(folder / "cp"),
            "ANSIBLE_LOCAL_TEMP": str(folder / "tmp"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            # ansible-playbook beside this python first (a venv that is not on PATH)
            "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                     os.environ.get("PATH", "")])}


def _event(event: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> bool:
    """Keep each host's release-task outcome; say it as it comes."""
    data = event.get("event_data") or {}
    kind = event.get("event", "")
    if data.get("task") != RELEASE_TASK or kind not in (
            "runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
        return True
    host = data.get("host", "")
    res = data.get("res") or {}
    failed = kind != "runner_on_ok" or bool(res.get("unreachable"))
    outcomes[host] = {"failed": failed, "res": res, "seconds": float(data.get("duration") or 0)}
    log.info("%s: %s", host, f"FAILED: {_line(res.get('msg'))}" if failed
             else f"ok: release {res.get('release')}")
    return True


def _line(message: object) -> str:
    """A module's message, its first line (ansible's are sometimes several)."""
    return (str(message or "failed").strip().splitlines() or ["failed"])[0]


def _result(job: FleetJob, bundle: tuple[Bundle, Path] | str,
            outcome: dict[str, Any] | None) -> HostResult:
    """One host's HostResult from its release-task outcome."""
    base = {"host": job.host.name, "target": job.target, "profile": job.profile.id}
    if isinstance(bundle, str):
        return HostResult(status="failed", error=bundle, **base)
    if outcome is None:
        return HostResult(status="failed", error="not reached: the playbook stopped first",
                          **base)
    res, seconds = outcome["res"], outcome["seconds"]
    if outcome["failed"]:
        error = " ".join(_line(res.get("msg")).split())
        return HostResult(status="failed", error=error, seconds=seconds, **base)
    report = _report(job, bundle[0], res)
    return HostResult(status="ok", candidate=res.get("candidate"), release=res.get("release"),
                      p50_ms=report.bench.p50_ms if report else None, seconds=seconds,
                      report=report, **base)


def _report(job: FleetJob, bundle: Bundle, res: dict[str, Any]) -> DeployReport | None:
    """The device's measurement as a DeployReport (None: already current, nothing measured)."""
    reply = res.get("bench")
    chosen = bundle.chosen_result()
    if not reply or chosen is None or chosen.artifact is None:
        return None
    bench = bench_result(reply, reply["results"][0], job.target, profile=job.profile)
    return DeployReport(target=job.target, transport="ssh", profile=job.profile.id,
                        candidate=str(res.get("candidate")),
                        artifact_sha256=chosen.artifact.sha256, release=str(res.get("release")),
                        bench=bench, active=True)
