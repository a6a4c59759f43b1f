"""``edge deploy --inventory --engine ansible`` with ``--provision`` and ``--on-device``, which it
once refused: on real sshd devices (network namespaces), staged (``--canary 1``), each run by
the built-in engine and by ansible on the same hosts, giving the same table: the same hosts,
stages, outcomes, candidates and releases (provisioned: the runtime installed into WORK/venv
from wheels fetched on this host, the device's own python having none), and per host the same
candidates compared on the device, with the reason and contest of the choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devices.connect import DeviceTarget
from devices.inventory_vars import FleetHost
from edge.core.profile import load_profile
from edge.flows.fleet import FleetJob
from edge.flows.fleet_ansible import _write
from edge.flows.fleet_values import FleetRequest
from edge.flows.optimize import OptimizeOptions
from tests.support.cli import Result, run_cli
from tests.support.digits import DigitsModel
from tests.support.sshd import SYSTEM_PYTHON
from tests.test_fleet_ansible import rechosen, release_of

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "edge" / "samples" / "digits.onnx"
FLEET_SIZE = 8  # the run's shared fleet (tests/test_fleet_ansible.py uses the same)


@pytest.fixture(scope="module")
def emulated() -> Iterator[Any]:
    from tests.support.fleet_devices import fleet_or_skip

    yield from fleet_or_skip(FLEET_SIZE)


@pytest.fixture(scope="module")
def fleet_dir(emulated: Any, digits: DigitsModel,
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits bundle for the emulated profile; an inventory of the devices with their
    runtimes (hosts.yml) and one whose python is the system's, with no numpy and no runtime
    (bare.yml: only a provisioned venv can run a model there)."""
    where = tmp_path_factory.mktemp("ansible-provision")
    profile = where / "emu-x86.yaml"
    profile.write_text(textwrap.dedent(f"""
        extends: x86-64
        id: emu-x86
        compute: {{cores: 1, threads: 1}}
        memory: {{ram_mb: {emulated.memory_mb}, model_budget_mb: 256}}
        runtimes: [tflite, onnxruntime]
        access: {{user: {emulated.user}, python: {emulated.python}}}
        """))
    done = subprocess.run([sys.executable, "-m", "edge", "optimize", str(digits.onnx),
                           "--profile", str(profile), "--calib", str(digits.calib), "--eval",
                           str(digits.eval), "-o", str(where / "a.bundle")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    emulated.write_inventory(where / "hosts.yml")
    bare = {d.name: {"ansible_python_interpreter": str(SYSTEM_PYTHON)} for d in emulated.devices}
    emulated.write_inventory(where / "bare.yml", host_vars=bare)
    return where


def current(device: Any) -> str | None:
    link = device.home / ".edge" / "current"
    return Path(os.readlink(link)).name if link.is_symlink() else None


def both_engines(fleet_dir: Path, *args: str, fresh: Any = None) -> tuple[Result, Result]:
    """The same deploy by the built-in engine, then by ansible (``fresh``: called before
    each, e.g. to wipe the devices)."""
    results = []
    for engine in ("edge", "ansible"):
        if fresh is not None:
            fresh()
        results.append(run_cli("deploy", str(fleet_dir / "a.bundle"), *args, "--engine", engine))
    return results[0], results[1]


def rows(result: Result, *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(h[k] for k in keys) for h in result.json()["hosts"]]


@pytest.mark.slow
def test_provision_works_with_the_ansible_engine_as_with_the_built_in_one(
        emulated: Any, fleet_dir: Path) -> None:
    """--provision --canary 1 on three devices whose python has no runtime: each engine (on
    wiped devices) installs the bundle's runtime into WORK/venv and deploys with its python."""
    hosts = emulated.devices[:3]
    builtin, ansible = both_engines(
        fleet_dir, "--inventory", str(fleet_dir / "bare.yml"), "--limit",
        ",".join(d.name for d in hosts), "--provision", "--no-on-device", "--known-hosts",
        str(emulated.known_hosts), "--runs", "3", "--warmup", "1", "--forks", "8",
        "--canary", "1", "--json", fresh=emulated.wipe)
    assert builtin.status == ansible.status == 0, ansible.stderr[-3000:] + ansible.stdout[-3000:]
    assert "not supported" not in ansible.stderr
    keys = ("host", "stage", "status", "outcome", "candidate", "release", "error")
    assert rows(builtin, *keys) == rows(ansible, *keys), ansible.stdout[-3000:]
    assert [h[:3] for h in rows(ansible, *keys)] == [
        (d.name, "canary" if i == 0 else "batch 1", "ok") for i, d in enumerate(hosts)]
    assert [s["result"] for s in ansible.json()["stages"]] == ["done", "done"]
    for host, device in zip(ansible.json()["hosts"], hosts, strict=True):
        venv = device.home / ".edge" / "venv"
        marker = json.loads((venv / "edge-provision.json").read_text())
        assert (venv / "bin" / "python").exists() and host["report"]["bench"]["runtime"] in \
            marker["runtimes"], host
        assert current(device) == host["release"] and host["p50_ms"] > 0


@pytest.mark.slow
def test_a_provisioned_stage_over_budget_is_rolled_back_with_the_venvs_python(
        emulated: Any, fleet_dir: Path, tmp_path: Path) -> None:
    """--provision --canary 1, the batch's other host down (a closed port): the host of that
    batch that switched goes back to its previous release, health-checked by the provisioned
    venv's python (the device's own has no runtime), with either engine alike."""
    up, switched, down = emulated.devices[6], emulated.devices[7], emulated.devices[5]
    bare: dict[str, dict[str, Any]] = {
        d.name: {"ansible_python_interpreter": str(SYSTEM_PYTHON)} for d in (up, switched, down)}
    bare[down.name]["ansible_port"] = 2222
    inventory = emulated.write_inventory(tmp_path / "hosts.yml", devices=(up, switched, down),
                                         host_vars=bare)
    a = fleet_dir / "a.bundle"
    b = rechosen(a, tmp_path / "b.bundle", "tflite-fp32")  # another release, the same runtime
    common = ("--inventory", str(inventory), "--provision", "--no-on-device", "--known-hosts",
              str(emulated.known_hosts), "--runs", "3", "--warmup", "1", "--forks", "8",
              "--json")
    halted = {}
    for engine in ("edge", "ansible"):
        emulated.wipe()
        first = run_cli("deploy", str(a), *common, "--limit", f"{up.name},{switched.name}",
                        "--engine", engine)
        assert first.status == 0, first.stderr[-3000:]
        halted[engine] = run_cli("deploy", str(b), *common, "--canary", "1", "--engine", engine)
        assert halted[engine].status == 3, halted[engine].stderr[-3000:]
        assert (current(up), current(switched)) == (release_of(b), release_of(a)), engine
    keys = ("host", "stage", "outcome", "current")
    assert rows(halted["edge"], *keys) == rows(halted["ansible"], *keys), \
        halted["ansible"].stdout[-3000:]
    assert [r[2] for r in rows(halted["ansible"], *keys)] == ["deployed", "rolled back", "failed"]
    assert halted["ansible"].json()["stopped"] == "batch 1"


@pytest.mark.slow
def test_on_device_works_with_the_ansible_engine_as_with_the_built_in_one(
        emulated: Any, fleet_dir: Path) -> None:
    """--on-device --canary 1 on three devices: with each engine every host times the same
    faithful candidates and activates the one edge chose from its own timings."""
    hosts = emulated.devices[3:6]
    builtin, ansible = both_engines(
        fleet_dir, "--inventory", str(fleet_dir / "hosts.yml"), "--limit",
        ",".join(d.name for d in hosts), "--on-device", "--known-hosts",
        str(emulated.known_hosts), "--runs", "3", "--warmup", "1", "--forks", "8",
        "--canary", "1", "--json")
    assert builtin.status == ansible.status == 0, ansible.stderr[-3000:] + ansible.stdout[-3000:]
    assert rows(builtin, "host", "stage", "status") == rows(ansible, "host", "stage", "status")
    assert [s["result"] for s in ansible.json()["stages"]] == ["done", "done"]
    for mine, theirs, device in zip(ansible.json()["hosts"], builtin.json()["hosts"], hosts,
                                    strict=True):
        report = mine["report"]
        compared = [c["candidate"] for c in report["compared"]]
        assert compared == [c["candidate"] for c in theirs["report"]["compared"]], report
        assert len(compared) >= 2 and mine["candidate"] in compared
        assert report["reason"] and report["contest"]["rounds"] >= 1, report
        assert all(c["bench"]["where"] == mine["target"] and c["bench"]["p50_ms"] > 0
                   for c in report["compared"])
        assert current(device) == mine["release"] == report["release"]


@pytest.mark.slow
def test_on_device_latency_budget_is_judged_on_each_host_by_ansible(emulated: Any,
                                                                     fleet_dir: Path) -> None:
    """No candidate within --latency-budget on the device: the host fails saying so and keeps
    its release (as with the built-in engine, tests/test_fleet.py)."""
    device = emulated.devices[6]
    common = ("--inventory", str(fleet_dir / "hosts.yml"), "--limit", device.name,
              "--known-hosts", str(emulated.known_hosts), "--runs", "3", "--warmup", "1",
              "--engine", "ansible", "--json")
    first = run_cli("deploy", str(fleet_dir / "a.bundle"), *common, "--no-on-device")
    assert first.status == 0, first.stderr[-3000:]
    before = current(device)
    strict = run_cli("deploy", str(fleet_dir / "a.bundle"), *common, "--on-device",
                     "--latency-budget", "1e-6")
    (host,) = strict.json()["hosts"]
    assert strict.status == 3 and host["report"] is None, strict.stdout[-3000:]
    assert "no faithful candidate runs within --latency-budget 1e-06 ms" in host["error"]
    assert current(device) == before == host["current"]


def test_the_dry_run_says_the_ansible_engine_provisions_and_measures(tmp_path: Path) -> None:
    """The refusal is gone: the plan says what the play will do, touching nothing."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars: {edge_profile: rpi4}\n  hosts:\n"
                         "    pi1: {ansible_host: 10.0.0.11, ansible_user: pi}\n"
                         "    pi2: {ansible_host: 10.0.0.12, ansible_user: pi}\n")
    done = run_cli("deploy", str(SAMPLE), "--inventory", str(inventory), "--engine", "ansible",
                   "--provision", "--on-device", "--canary", "1", "--dry-run", "--json",
                   "-o", str(tmp_path / "bundles"))
    assert done.status == 0, done.stderr
    steps = " ".join(done.json()["steps"])
    assert "install each bundle's runtime into WORK/venv" in steps
    assert "benchmark every faithful candidate on the device" in steps
    assert "rollout_provision true, rollout_on_device true" in steps
    assert not (tmp_path / "bundles").exists()


def test_the_play_gets_the_provisioning_and_the_hosts_choice(tmp_path: Path) -> None:
    """edge's inventory for the play: the group's provision/on-device switches, each host's
    runtime order and latency budget (its profile's, or --latency-budget)."""
    request = FleetRequest(source=SAMPLE, inventory=tmp_path / "hosts.yml",
                           device=DeviceTarget(provision=True), measure_on_device=True,
                           options=OptimizeOptions(latency_budget_ms=5.0))
    job = FleetJob(host=FleetHost(name="pi1", address="192.0.2.1"), profile=load_profile("rpi4"),
                   user="pi", port=22, identity=None, python="python3", work_dir="~/.edge",
                   threads=1)
    _, hosts = _write(tmp_path, request, [job], {"rpi4": (None, tmp_path)})  # type: ignore[dict-item]
    group = yaml.safe_load(hosts.read_text().replace("!unsafe ", ""))["all"]["children"]["edge"]
    assert group["vars"]["rollout_provision"] is True and group["vars"]["rollout_on_device"]
    host = group["hosts"]["pi1"]
    assert host["rollout_runtimes"] == list(load_profile("rpi4").runtimes)
    assert host["rollout_latency_budget_ms"] == 5.0
    assert host["rollout_latency_budget_name"] == "--latency-budget"


#: The collection's transport in a child (importing ansible patches the process: see
#: tests/test_ansible_unsafe.py): each argv reaches the device's shell as one quoted command.
_QUOTED = """
import json, shlex, sys
from devices.ansible.plugins.plugin_utils.connection_transport import ConnectionTransport

class Action:
    def _low_level_execute_command(self, cmd, sudoable=True):
        return {"rc": 0, "stdout": json.dumps(shlex.split(cmd)), "stderr": ""}

argv = json.loads(sys.argv[1])
print(ConnectionTransport(Action(), "ssh://u@h:22").run(argv).stdout)
"""


def test_the_collections_transport_quotes_every_argument() -> None:
    argv = ["python3", "-c", "import os; print(1)", "a b", "$(touch /tmp/x)", "`id`", "x'y\"z"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _QUOTED, json.dumps(argv)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == argv
