"""Fleet deploys: planning from an inventory, bounded parallel deploys with failure isolation,
the per-host table, and an end-to-end deploy to 8 emulated devices (network namespaces with
their own sshd, home, CPU and memory caps). The inventory reader itself: tests/devices/
test_inventory.py."""

from __future__ import annotations

import logging
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import edge.flows.fleet as fleet_module
from devices.connect import DeviceTarget
from edge.cli.render_fleet import render_fleet
from edge.core.errors import DeviceError, UsageError
from edge.core.values import BenchResult, DeployReport
from edge.flows.fleet import (
    FleetBundle,
    FleetReport,
    FleetRequest,
    HostResult,
    describe_fleet,
    run_fleet,
)
from edge.flows.optimize import OptimizeOptions
from tests.support.digits import DigitsModel

SAMPLE = Path(__file__).resolve().parents[1] / "edge" / "samples" / "digits.onnx"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# ============================================================================ planning errors


def _inventory(tmp_path: Path, host_vars: str = "") -> Path:
    return _write(tmp_path, "hosts.yml", f"""
        all:
          hosts:
            dev0:
              ansible_host: 127.0.0.1
              ansible_user: edgeuser
              {host_vars}
        """)


@pytest.mark.parametrize(("request_kw", "host_vars", "needles"), [
    ({"profile": None}, "", ["host dev0", "no edge_profile var and no --profile"]),
    ({"profile": "rpi4"}, "edge_profile: nosuch",
     ["host dev0", "unknown profile 'nosuch'"]),
    ({"profile": "rpi4"}, "ansible_ssh_private_key_file: /nonexistent/key",
     ["host dev0", "private key /nonexistent/key: no such file"]),
    ({"profile": "rpi4", "forks": 0}, "", ["--forks must be >= 1"]),
    ({"profile": "rpi4", "device": DeviceTarget(host="pi@x")}, "",
     ["--host and --inventory exclude each other"]),
    ({"profile": "rpi4", "source": Path("/nonexistent.onnx")}, "", ["does not exist"]),
    ({"profile": "rpi4", "device": DeviceTarget(known_hosts=Path("/nonexistent/kh"))}, "",
     ["--known-hosts /nonexistent/kh: no such file"]),
])
def test_bad_requests_fail_before_any_work(tmp_path: Path, request_kw: dict, host_vars: str,
                                           needles: list[str]) -> None:
    kw = {"source": SAMPLE, "inventory": _inventory(tmp_path, host_vars),
          "out_dir": tmp_path / "out", **request_kw}
    with pytest.raises(UsageError) as caught:
        run_fleet(FleetRequest(**kw))
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    assert not (tmp_path / "out").exists()


def test_user_comes_from_the_profile_or_must_be_given(tmp_path: Path) -> None:
    inv = _write(tmp_path, "hosts.yml", "all:\n  hosts:\n    dev0:\n")
    described = describe_fleet(FleetRequest(source=SAMPLE, inventory=inv, profile="rpi4"))
    assert described["hosts"][0]["target"] == "ssh://pi@dev0:22"  # rpi4's access.user and port
    profile = _write(tmp_path, "nouser.yaml", "extends: rpi4\nid: nouser\naccess: {user: null}\n")
    with pytest.raises(UsageError, match="host dev0: no ansible_user, and profile nouser"):
        run_fleet(FleetRequest(source=SAMPLE, inventory=inv, profile=str(profile)))


def test_describe_resolves_profiles_relative_to_the_inventory(tmp_path: Path) -> None:
    _write(tmp_path, "my-pi.yaml", "extends: rpi4\nid: my-pi\naccess: {python: /opt/py}\n")
    inv = _write(tmp_path, "hosts.ini", """
        [pis]
        pi[1:2] ansible_user=pi edge_profile=my-pi.yaml
        [boxes]
        box1 ansible_host=10.1.1.1 ansible_port=2222 ansible_python_interpreter=/usr/bin/python3
        """)
    described = describe_fleet(FleetRequest(source=SAMPLE, inventory=inv, profile="x86-64",
                                            forks=3, out_dir=tmp_path))
    assert [(h["host"], h["profile"], h["target"], h["python"]) for h in described["hosts"]] == [
        ("pi1", "my-pi", "ssh://pi@pi1:22", "/opt/py"),
        ("pi2", "my-pi", "ssh://pi@pi2:22", "/opt/py"),
        ("box1", "x86-64", "ssh://ubuntu@10.1.1.1:2222", "/usr/bin/python3"),
    ]
    assert described["steps"][0] == (f"optimize {SAMPLE} for my-pi into "
                                     f"{tmp_path / 'digits-my-pi.bundle'}")
    assert described["steps"][1].startswith("optimize") and "x86-64" in described["steps"][1]
    assert "at most 3 at once" in described["steps"][2]


# ============================================================================ isolation, bound


def _fake_report(target: str) -> DeployReport:
    bench = BenchResult(where=target, runtime="tflite", runs=1, warmup=0, threads=1, p50_ms=1.5,
                        p90_ms=2.0, p99_ms=2.0, mean_ms=1.6)
    return DeployReport(target=target, transport="ssh", profile="rpi4", candidate="tflite-int8",
                        artifact_sha256="ab" * 32, release="ab" * 8, bench=bench)


def test_parallel_deploy_is_bounded_and_isolates_failures(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    inv = _write(tmp_path, "hosts.yml", """
        all:
          vars: {ansible_user: pi, edge_profile: rpi4}
          hosts:
            dev[0:9]:
        """)
    running, peak, lock = [0], [0], threading.Lock()

    def fake_deploy(request, job, bundle, say):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            say("working")
            time.sleep(0.05)
            if job.host.name == "dev3":
                raise DeviceError("authentication failed for pi@dev3:22 with key\nsecond line")
            if job.host.name == "dev6":
                raise KeyError("boom")
            return _fake_report(job.target)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(fleet_module, "build_fleet_bundle", lambda request, profile, hosts: (
        None, tmp_path))
    monkeypatch.setattr(fleet_module, "bundle_fields", lambda outcome: {"bundle": "b"})
    monkeypatch.setattr(fleet_module, "_deploy_to", fake_deploy)
    report = run_fleet(FleetRequest(source=SAMPLE, inventory=inv, forks=3))
    assert peak[0] == 3  # never more than --forks at once, and it did run in parallel
    assert [h.host for h in report.hosts] == [f"dev{i}" for i in range(10)]  # inventory order
    assert [h.host for h in report.failed] == ["dev3", "dev6"]
    assert report.exit_status == 3
    dev3 = report.hosts[3]
    assert dev3.error == "authentication failed for pi@dev3:22 with key"  # its first line only
    assert report.hosts[6].error == "internal error: KeyError: 'boom'"
    assert all(h.ok and h.release == "ab" * 8 and h.p50_ms == 1.5 for h in report.ok)
    assert len(report.ok) == 8


def test_a_profile_without_a_bundle_fails_only_its_hosts(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    inv = _write(tmp_path, "hosts.yml", """
        all:
          vars: {ansible_user: pi}
          hosts:
            pi1: {edge_profile: rpi4}
            box1: {edge_profile: x86-64}
        """)
    monkeypatch.setattr(fleet_module, "build_fleet_bundle", lambda request, profile, hosts: (
        "no bundle for rpi4: no candidate kept fidelity" if profile.id == "rpi4"
        else (None, tmp_path)))
    monkeypatch.setattr(fleet_module, "bundle_fields", lambda outcome: (
        {"error": outcome} if isinstance(outcome, str) else {"bundle": "b"}))
    monkeypatch.setattr(fleet_module, "_deploy_to",
                        lambda request, job, bundle, say: _fake_report(job.target))
    report = run_fleet(FleetRequest(source=SAMPLE, inventory=inv))
    assert [(h.host, h.status) for h in report.hosts] == [("pi1", "failed"), ("box1", "ok")]
    assert report.hosts[0].error == "no bundle for rpi4: no candidate kept fidelity"
    assert report.exit_status == 3


def test_render_fleet_table() -> None:
    ok = HostResult(host="dev0", target="ssh://u@10.0.0.2:22", profile="rpi4", status="ok",
                    candidate="tflite-int8", release="ab" * 8, p50_ms=1.23456, seconds=2.04,
                    report=_fake_report("ssh://u@10.0.0.2:22"))
    bad = HostResult(host="dev1", target="ssh://u@10.0.0.6:22", profile="rpi4",
                     status="failed", error="cannot connect to 10.0.0.6:22: refused",
                     seconds=0.1)
    report = FleetReport(inventory="hosts.yml", limit="fleet", forks=8,
                         bundles=(FleetBundle(profile="rpi4", hosts=2, bundle="d.bundle",
                                              chosen="tflite-int8"),),
                         hosts=(ok, bad), seconds=3.0, deploy_seconds=2.1)
    text = render_fleet(report)
    lines = text.splitlines()
    assert lines[0] == "bundle for rpi4: d.bundle (chosen tflite-int8)"
    header = next(line for line in lines if line.startswith("host"))
    assert header.split() == ["host", "status", "target", "profile", "candidate", "release",
                              "p50", "ms", "seconds", "error"]
    row = next(line for line in lines if line.startswith("dev0"))
    assert "ok" in row and "1.235" in row and "2.0" in row and "abababab" in row
    row = next(line for line in lines if line.startswith("dev1"))
    assert "failed" in row and row.endswith("cannot connect to 10.0.0.6:22: refused")
    assert lines[-1] == ("2 hosts from hosts.yml --limit fleet: 1 ok, 1 failed in 3.0 s, "
                         "2.1 s deploying (forks 8)")
    doc = report.to_json()
    assert (doc["ok"], doc["failed"]) == (1, 1)
    assert doc["hosts"][0]["report"]["release"] == "ab" * 8 and doc["hosts"][1]["report"] is None
    assert report.exit_status == 3
    assert replace(report, hosts=(ok,)).exit_status == 0


# ============================================================================ emulated fleet

FLEET_SIZE = 8


@pytest.fixture(scope="module")
def emulated() -> Iterator:
    from tests.support.fleet_devices import fleet_or_skip

    yield from fleet_or_skip(FLEET_SIZE)


@pytest.fixture(scope="module")
def fleet_dir(emulated, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An inventory of the devices beside the profile file it names (relative)."""
    where = tmp_path_factory.mktemp("fleet")
    (where / "emu-x86.yaml").write_text(textwrap.dedent(f"""
        extends: x86-64
        id: emu-x86
        name: Emulated x86-64 device (1 CPU, 1 GB)
        compute: {{cores: 1, threads: 1}}
        memory: {{ram_mb: {emulated.memory_mb}, model_budget_mb: 256}}
        runtimes: [tflite, onnxruntime]
        access: {{user: {emulated.user}, python: {emulated.python}}}
        """))
    emulated.write_inventory(where / "hosts.yml", profile="emu-x86.yaml")
    return where


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _device_state(emulated) -> dict[str, tuple[Path, bool, str]]:
    """Each device's current release directory, whether it holds a model, and its owner."""
    state = {}
    for device in emulated.devices:
        work = device.home / ".edge"  # each device's own home, seen from the root namespace
        current = (work / "current").resolve()
        state[device.name] = (current, any(current.glob("model.*")), (work / "current").owner())
    return state


@pytest.fixture(scope="module")
def deployed(emulated, fleet_dir: Path, digits: DigitsModel):
    """Optimize the digits CNN once for the profile, then deploy it to all 8 devices; the
    devices' state right after it (other tests of this module wipe and redeploy them)."""
    logger = logging.getLogger("edge")
    lines, level = _Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        report = run_fleet(FleetRequest(
            source=digits.onnx, inventory=fleet_dir / "hosts.yml", forks=FLEET_SIZE,
            options=OptimizeOptions(calib=digits.calib, eval=digits.eval), out_dir=fleet_dir,
            device=DeviceTarget(known_hosts=emulated.known_hosts, runs=10, warmup=2),
            measure_on_device=False))  # the bundle's choice everywhere (one release)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return report, lines.lines, _device_state(emulated)


@pytest.mark.slow
def test_fleet_of_8_deploys_in_parallel(deployed, emulated, fleet_dir: Path) -> None:
    report, _, state = deployed
    assert report.exit_status == 0, render_fleet(report)
    assert [h.host for h in report.hosts] == [d.name for d in emulated.devices]
    (bundle,) = report.bundles
    assert bundle.profile == "emu-x86" and bundle.bundle == str(fleet_dir / "digits-emu-x86.bundle")
    releases = {h.release for h in report.hosts}
    assert len(releases) == 1 and all(h.candidate == bundle.chosen for h in report.hosts)
    # They overlapped: the deploy phase took far less than the hosts' times added up.
    assert report.deploy_seconds < sum(h.seconds for h in report.hosts) / 3, render_fleet(report)
    for device, host in zip(emulated.devices, report.hosts, strict=True):
        assert host.target == f"ssh://{device.target}"
        assert host.report is not None and host.report.bench.where == host.target
        current, has_model, owner = state[device.name]
        assert current == (device.home / ".edge" / "releases" / host.release).resolve()
        assert has_model and owner == emulated.user
    table = render_fleet(report)
    for device in emulated.devices:
        assert any(line.startswith(f"{device.name} ") and " ok " in line
                   for line in table.splitlines())
    assert table.splitlines()[-1].startswith(f"{FLEET_SIZE} hosts from ")


@pytest.mark.slow
def test_progress_lines_name_every_host(deployed, emulated) -> None:
    _, lines, _ = deployed
    for device in emulated.devices:
        assert f"{device.name}: connecting to ssh://{device.target}" in lines
        assert any(line.startswith(f"{device.name}: ok in ") for line in lines), lines
    assert any(f"[{FLEET_SIZE}/{FLEET_SIZE} done, 0 failed]" in line for line in lines)


@pytest.mark.slow
def test_devices_are_isolated_and_capped(deployed, emulated) -> None:
    homes = {d.home for d in emulated.devices}
    addresses = {d.address for d in emulated.devices}
    assert len(homes) == len(addresses) == FLEET_SIZE
    for device in emulated.devices:
        quota, period = device.cgroup.cpu_limit()  # cgroup v1 or v2
        assert quota == period  # 1 CPU
        assert device.cgroup.memory_limit() == 1024 * 2**20
        assert device.sshd_pid in device.cgroup.members()
        used = device.cpu_seconds()  # the deploy's agent runs were accounted to the device
        assert used is None or used > 0.1


@pytest.mark.slow
@pytest.mark.parametrize("case", ["wrong-key", "closed-port"])
def test_one_failing_host_does_not_stop_the_others(case: str, deployed, emulated,
                                                   fleet_dir: Path, tmp_path: Path) -> None:
    report, _, _ = deployed
    bundle = Path(report.bundles[0].bundle)
    bad = emulated.devices[-1]
    host_vars = {"wrong-key": {"ansible_ssh_private_key_file": str(emulated.wrong_identity)},
                 "closed-port": {"ansible_port": 2222}}[case]
    inventory = emulated.write_inventory(tmp_path / "hosts.yml",
                                         profile=str(fleet_dir / "emu-x86.yaml"),
                                         host_vars={bad.name: host_vars})
    emulated.wipe()
    again = run_fleet(FleetRequest(source=bundle, inventory=inventory, forks=FLEET_SIZE,
                                   device=DeviceTarget(known_hosts=emulated.known_hosts,
                                                       runs=5, warmup=1),
                                   measure_on_device=False))
    assert again.exit_status == 3
    assert [h.host for h in again.failed] == [bad.name]
    assert len(again.ok) == FLEET_SIZE - 1
    error = again.failed[0].error
    assert error is not None and "\n" not in error
    expected = {"wrong-key": f"authentication failed for {emulated.user}@{bad.address}:22",
                "closed-port": f"cannot connect to {bad.address}:2222"}[case]
    assert error.startswith(expected), error
    assert not any(bad.home.iterdir())  # nothing was written on the failed device
    for device in emulated.devices[:-1]:
        assert (device.home / ".edge" / "current").is_symlink()
    row = next(line for line in render_fleet(again).splitlines() if line.startswith(bad.name))
    assert "failed" in row and row.endswith(error)


@pytest.mark.slow
def test_limit_deploys_only_the_selected_devices(deployed, emulated, fleet_dir: Path) -> None:
    report, _, _ = deployed
    emulated.wipe()
    picked = run_fleet(FleetRequest(source=Path(report.bundles[0].bundle),
                                    inventory=fleet_dir / "hosts.yml", limit="dev1,dev2",
                                    device=DeviceTarget(known_hosts=emulated.known_hosts,
                                                        runs=3, warmup=0),
                                    measure_on_device=False))
    assert [h.host for h in picked.hosts] == ["dev1", "dev2"] and picked.exit_status == 0
    for device in emulated.devices:
        assert (device.home / ".edge").exists() == (device.name in ("dev1", "dev2"))


def test_cli_fleet_dry_run_and_flag_errors(tmp_path: Path) -> None:
    """`edge deploy --inventory --limit --dry-run` lists the selected hosts; touches nothing."""
    from tests.support.cli import run_cli

    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars: {edge_profile: rpi4}\n  children:\n    kitchen:\n      hosts:\n"
        "        pi1: {ansible_host: 10.0.0.11, ansible_user: pi}\n"
        "        pi2: {ansible_host: 10.0.0.12, ansible_user: pi}\n"
        "    garage:\n      hosts:\n"
        "        nano: {ansible_host: 10.0.0.20, ansible_user: ubuntu}\n")
    done = run_cli("deploy", "sample:digits", "--inventory", str(inventory), "--limit",
                   "kitchen", "--dry-run", "--json", "-o", str(tmp_path / "bundles"))
    assert done.status == 0, done.stderr
    assert "2 host(s)" in " ".join(done.json()["steps"])
    assert not (tmp_path / "bundles").exists()
    stray = run_cli("deploy", "sample:digits", "--profile", "rpi4", "--limit", "kitchen")
    assert stray.status == 2 and "--inventory" in stray.stderr
    nothing = run_cli("deploy", "sample:digits", "--inventory", str(inventory), "--limit",
                      "nowhere", "--dry-run")
    assert nothing.status == 2 and nothing.stderr.count("\n") == 1


@pytest.mark.slow
def test_keep_reaches_every_host(deployed, emulated, fleet_dir: Path) -> None:
    """--keep is applied on each host: many releases from a measure-on-device deploy, then a
    deploy with keep=1 leaves only the active one and its rollback target."""
    report, _, _ = deployed
    bundle = Path(report.bundles[0].bundle)
    emulated.wipe()
    device = DeviceTarget(known_hosts=emulated.known_hosts, runs=3, warmup=0)

    def releases(name: str) -> set[str]:
        home = next(d.home for d in emulated.devices if d.name == name)
        return {p.name for p in (home / ".edge" / "releases").iterdir()}

    many = run_fleet(FleetRequest(source=bundle, inventory=fleet_dir / "hosts.yml",
                                  limit="dev1,dev2", device=device, keep=50))  # default: all
    assert many.exit_status == 0, render_fleet(many)
    before = {h.host: releases(h.host) for h in many.hosts}
    assert all(len(r) >= 3 for r in before.values()), before
    pruned = run_fleet(FleetRequest(source=bundle, inventory=fleet_dir / "hosts.yml",
                                    limit="dev1,dev2", device=device, keep=1,
                                    measure_on_device=False))
    assert pruned.exit_status == 0, render_fleet(pruned)
    for host in pruned.hosts:
        left = releases(host.host)
        assert host.release in left and len(left) <= 2 < len(before[host.host]), left


@pytest.mark.slow
def test_on_device_latency_budget_is_judged_on_each_host(deployed, emulated,
                                                          fleet_dir: Path) -> None:
    """--on-device applies --latency-budget to each device's own interleaved timings: when no
    candidate runs within it there, that host fails saying so and keeps its current release;
    a budget every candidate meets activates one as usual."""
    report, _, _ = deployed
    bundle = Path(report.bundles[0].bundle)
    emulated.wipe()
    device = DeviceTarget(known_hosts=emulated.known_hosts, runs=3, warmup=0)
    first = run_fleet(FleetRequest(source=bundle, inventory=fleet_dir / "hosts.yml",
                                   limit="dev3", device=device))
    assert first.exit_status == 0, render_fleet(first)
    home = next(d.home for d in emulated.devices if d.name == "dev3")
    before = (home / ".edge" / "current").resolve()

    def on_device(ms: float) -> FleetReport:
        return run_fleet(FleetRequest(source=bundle, inventory=fleet_dir / "hosts.yml",
                                      limit="dev3", device=device, measure_on_device=True,
                                      options=OptimizeOptions(latency_budget_ms=ms)))

    strict = on_device(1e-6)
    (host,) = strict.hosts
    assert strict.exit_status != 0 and host.report is None, render_fleet(strict)
    assert "no faithful candidate runs within --latency-budget 1e-06 ms" in str(host.error)
    assert (home / ".edge" / "current").resolve() == before  # nothing was activated
    generous = on_device(10_000.0)
    assert generous.exit_status == 0, render_fleet(generous)
    (host,) = generous.hosts
    assert host.report is not None and any((home / ".edge" / "current").glob("model.*"))


@pytest.mark.slow
def test_each_device_keeps_its_own_home_when_the_hosts_passwd_is_replaced(emulated) -> None:
    """usermod (the one-device sshd's make_home) replaces /etc/passwd by a rename, which detaches
    the devices' own passwd: every module's fleet gets each device's own home back first."""
    import os
    import shutil
    import subprocess

    from tests.support.fleet_devices import _home_seen

    copy = Path("/etc/passwd.edge-test")
    shutil.copy2("/etc/passwd", copy)
    os.replace(copy, "/etc/passwd")  # what usermod does
    assert _home_seen(emulated.devices[0].sshd_pid) != str(emulated.devices[0].home)
    emulated.own_homes()
    for device in emulated.devices:
        home = subprocess.run(
            ["ssh", "-i", str(emulated.identity), "-o", "BatchMode=yes",
             "-o", f"UserKnownHostsFile={emulated.known_hosts}", "-p", str(device.port),
             f"{emulated.user}@{device.address}", "echo $HOME"],
            capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        assert home == str(device.home)
