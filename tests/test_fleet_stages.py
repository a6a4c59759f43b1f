"""Staged fleet rollouts in the built-in engine (``edge deploy --inventory --canary N --batch
N|P% --max-fail N|P%``): the stage computation and failure budget (pure), the dry run and the
table, and the fault cases against 8 real sshd devices (tests/support/fleet_devices.py): a
health check failing in batch 2, a host that is down, a SIGINT mid-stage and a concurrent deploy
holding one device's lock. Each leaves every device on a whole release, and a rerun finishes.

Releases are one-candidate bundles of digits.onnx copies (tests/test_deploy_faults.make_release:
no optimize); each fault case deploys a new one over the previous case's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devices.connect import DeviceTarget
from edge.cli.render_fleet import render_fleet
from edge.core.errors import UsageError
from edge.flows.fleet import (
    FleetBundle,
    FleetReport,
    FleetRequest,
    HostResult,
    StageResult,
    describe_fleet,
    run_fleet,
)
from edge.flows.fleet_stages import (
    Share,
    Staging,
    ansible_serial,
    over_budget,
    parse_share,
    stage_names,
    stages,
)
from tests.support.cli import as_in_a_terminal, run_cli
from tests.test_deploy_faults import Release, make_release

SAMPLE = Path(__file__).resolve().parents[1] / "edge" / "samples" / "digits.onnx"
STAGED = Staging(canary=1, batch=Share(count=3))  # dev0 | dev1-3 | dev4-6 | dev7


# ============================================================================ pure


@pytest.mark.parametrize(("canary", "batch", "expected"), [
    (1, Share(count=3), ((0,), (1, 2, 3), (4, 5, 6), (7,))),
    (None, Share(percent=25), ((0, 1), (2, 3), (4, 5), (6, 7))),
    (2, None, ((0, 1), (2, 3, 4, 5, 6, 7))),
    (None, Share(percent=10), tuple((i,) for i in range(8))),  # 10% of 8: at least 1
    (9, Share(count=2), ((0, 1, 2, 3, 4, 5, 6, 7),)),  # a canary of all: one stage
    (None, None, ((0, 1, 2, 3, 4, 5, 6, 7),)),
])
def test_stages_cut_hosts_in_inventory_order(canary, batch, expected) -> None:
    assert stages(range(8), canary, batch) == expected
    assert stages((), canary, batch) == ()


def test_the_same_stages_as_an_ansible_serial_list() -> None:
    assert ansible_serial(STAGED) == [1, 3]
    assert ansible_serial(Staging(batch=Share(percent=25))) == ["25%"]
    assert ansible_serial(Staging(canary=2)) == [2, "100%"]
    assert ansible_serial(Staging(max_fail=Share(count=1))) == ["100%"]


def test_stage_names() -> None:
    assert stage_names(4, canary=1) == ("canary", "batch 1", "batch 2", "batch 3")
    assert stage_names(2) == ("batch 1", "batch 2")


@pytest.mark.parametrize(("failed", "size", "budget", "over"), [
    (0, 3, Share(count=0), False), (1, 3, Share(count=0), True), (1, 3, Share(count=1), False),
    (2, 3, Share(count=1), True), (1, 3, Share(percent=34), False),
    (1, 3, Share(percent=33), True), (3, 3, Share(percent=100), False), (5, 5, None, False),
])
def test_a_stage_halts_when_its_failures_exceed_the_budget(failed, size, budget, over) -> None:
    assert over_budget(failed, size, budget) is over  # as Ansible's max_fail_percentage


def test_parse_share_and_the_default_budget() -> None:
    assert parse_share("3", "--batch") == Share(count=3)
    assert parse_share(" 25% ", "--batch") == Share(percent=25)
    assert parse_share(None, "--batch") is None
    for bad, needle in [("x", "a number of hosts"), ("-1", "a number of hosts"),
                        ("150%", "0% to 100%"), ("0", "at least 1")]:
        with pytest.raises(UsageError, match=needle):
            parse_share(bad, "--batch", least=1)
    assert Staging().budget is None and not Staging().staged
    assert Staging(canary=1).budget == Share(count=0)
    assert str(Staging(batch=Share(count=2), max_fail=Share(percent=20)).budget) == "20%"


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent("""
        all:
          vars: {ansible_user: pi, edge_profile: rpi4}
          hosts:
            dev[0:7]:
        """).lstrip())
    return path


def test_dry_run_lists_the_stages(tmp_path: Path) -> None:
    plan = describe_fleet(FleetRequest(source=SAMPLE, inventory=_inventory(tmp_path),
                                       staging=Staging(canary=1, batch=Share(percent=50))))
    assert plan["stages"] == [{"name": "canary", "hosts": ["dev0"]},
                              {"name": "batch 1", "hosts": ["dev1", "dev2", "dev3", "dev4"]},
                              {"name": "batch 2", "hosts": ["dev5", "dev6", "dev7"]}]
    assert "  batch 2: dev5, dev6, dev7" in plan["steps"]
    assert describe_fleet(FleetRequest(source=SAMPLE, inventory=_inventory(tmp_path)))[
        "stages"] == []
    done = run_cli("deploy", "sample:digits", "--inventory", str(_inventory(tmp_path)),
                   "--canary", "2", "--batch", "3", "--max-fail", "1", "--dry-run", "--json")
    assert done.status == 0, done.stderr
    assert [len(s["hosts"]) for s in done.json()["stages"]] == [2, 3, 3]
    assert any("more than 1 failed host(s) halts" in s for s in done.json()["steps"])


@pytest.mark.parametrize(("args", "needle"), [
    (("--canary", "1"), "--canary stages a fleet rollout: give --inventory too"),
    (("--inventory", "INV", "--batch", "x"), "--batch 'x': give a number of hosts"),
    (("--inventory", "INV", "--max-fail", "101%"), "--max-fail 101%: a percentage is 0%"),
])
def test_cli_flag_errors(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    args = tuple(str(_inventory(tmp_path)) if a == "INV" else a for a in args)
    done = run_cli("deploy", "sample:digits", "--profile", "rpi4", *args, "--dry-run")
    assert done.status == 2 and done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr


def test_render_a_halted_rollout() -> None:
    def host(name: str, status: str, stage: str, **kw) -> HostResult:
        return HostResult(host=name, target=f"ssh://u@{name}:22", profile="rpi4", status=status,
                          stage=stage, **kw)

    hosts = (host("dev0", "ok", "canary", release="b" * 16, previous="b" * 16,
                  current="b" * 16),
             host("dev1", "rolled back", "batch 1", release="b" * 16, previous="a" * 16,
                  current="a" * 16, error="rolled back to aaaa"),
             host("dev2", "failed", "batch 1", current="a" * 16, error="health check failed"),
             host("dev3", "not reached", "batch 2", error="not reached"))
    report = FleetReport(
        inventory="hosts.yml", limit=None, forks=5, bundles=(FleetBundle(profile="rpi4", hosts=4),),
        hosts=hosts, seconds=1.0, stopped="batch 1",
        stages=(StageResult(name="canary", hosts=("dev0",), result="done"),
                StageResult(name="batch 1", hosts=("dev1", "dev2"), failed=1, result="halted"),
                StageResult(name="batch 2", hosts=("dev3",))))
    text = render_fleet(report)
    assert [h.outcome for h in hosts] == ["unchanged", "rolled back", "failed", "not reached"]
    row = next(line for line in text.splitlines() if line.startswith("dev1"))
    assert row.split()[1:5] == ["batch", "1", "rolled", "back"] and "a" * 16 in row
    assert "stage batch 1: dev1, dev2 - halted (1 failed, --max-fail 0)" in text
    assert "HALTED at stage batch 1" in text
    assert text.splitlines()[-1].startswith(
        "4 hosts from hosts.yml: 1 unchanged, 1 failed, 1 rolled back, 1 not reached in 1.0 s")
    doc = report.to_json()
    assert doc["stopped"] == "batch 1" and doc["stages"][1]["result"] == "halted"
    assert [(h["stage"], h["outcome"], h["current"]) for h in doc["hosts"]][2:] == [
        ("batch 1", "failed", "a" * 16), ("batch 2", "not reached", None)]
    assert report.exit_status == 3


# ============================================================================ 8 real devices

FLEET_SIZE = 8
WORK = ".edge"  # the bundles' profile (x86-64): access.work_dir ~/.edge


@pytest.fixture(scope="module")
def emulated() -> Iterator:
    from tests.support.fleet_devices import fleet_or_skip

    yield from fleet_or_skip(FLEET_SIZE, wipe=True)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Release]:
    root = tmp_path_factory.mktemp("stage-releases")
    return {tag: make_release(root, tag) for tag in "ABCDE"}


@pytest.fixture(scope="module")
def on_a(emulated, releases: dict[str, Release], tmp_path_factory: pytest.TempPathFactory):
    """Release A on every device (plain, unstaged fleet deploy)."""
    inventory = emulated.write_inventory(tmp_path_factory.mktemp("inv") / "hosts.yml")
    report = _rollout(emulated, releases["A"], inventory, Staging())
    assert report.exit_status == 0 and not report.stages, render_fleet(report)
    assert set(_on(emulated).values()) == {releases["A"].id}
    return inventory


def _rollout(emulated, release: Release, inventory: Path, staging: Staging = STAGED
             ) -> FleetReport:
    return run_fleet(FleetRequest(source=release.bundle_dir, inventory=inventory,
                                  forks=FLEET_SIZE, staging=staging, measure_on_device=False,
                                  device=DeviceTarget(known_hosts=emulated.known_hosts, runs=3,
                                                      warmup=1, threads=1)))


def _on(emulated) -> dict[str, str]:
    """Each device's current release; it is whole: its model is there, and the history's last
    switch names it."""
    now = {}
    for device in emulated.devices:
        work = device.home / WORK
        release = os.readlink(work / "current").removeprefix("releases/")
        assert (work / "releases" / release / "model.onnx").is_file(), device.name
        history = json.loads((work / "history.json").read_text())["activations"]
        assert history[-1]["release"] == release, device.name
        now[device.name] = release
    return now


def _outcomes(report: FleetReport) -> dict[str, tuple[str, str | None]]:
    return {h.host: (h.outcome, h.current) for h in report.hosts}


def _crashing_python(emulated, device) -> str:
    """A device python that SIGKILLs itself when the agent is asked for its health check."""
    script = device.home / "python-health-crash"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n"
                      f"  if [ \"$arg\" = health ]; then kill -9 $$; fi\ndone\n"
                      f"exec {emulated.python} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.slow
def test_a_failed_health_check_in_batch_2_halts_and_a_rerun_finishes(
        emulated, releases: dict[str, Release], on_a: Path, tmp_path: Path) -> None:
    b = releases["B"].id
    bad = emulated.devices[4]  # batch 2: dev4, dev5, dev6
    _rollout(emulated, releases["A"], on_a, Staging())  # A everywhere, whatever ran before
    before = _on(emulated)
    untouched = emulated.devices[7].home / WORK / "releases"
    kept = {p.name for p in untouched.iterdir()}
    broken = emulated.write_inventory(tmp_path / "broken.yml", host_vars={
        bad.name: {"ansible_python_interpreter": _crashing_python(emulated, bad)}})
    halted = _rollout(emulated, releases["B"], broken)
    text = render_fleet(halted)
    assert halted.exit_status == 3 and halted.stopped == "batch 2", text
    assert [(s.name, s.result, s.failed) for s in halted.stages] == [
        ("canary", "done", 0), ("batch 1", "done", 0), ("batch 2", "halted", 1),
        ("batch 3", "not reached", 0)]
    assert _outcomes(halted) == {
        "dev0": ("deployed", b), "dev1": ("deployed", b), "dev2": ("deployed", b),
        "dev3": ("deployed", b), "dev4": ("failed", before["dev4"]),
        "dev5": ("rolled back", before["dev5"]), "dev6": ("rolled back", before["dev6"]),
        "dev7": ("not reached", None)}, text
    assert "failed its health check" in str(halted.hosts[4].error)
    assert _on(emulated) == {f"dev{i}": b if i < 4 else before[f"dev{i}"] for i in range(8)}
    assert {p.name for p in untouched.iterdir()} == kept  # batch 3 was never contacted
    assert "HALTED at stage batch 2" in text
    rerun = _rollout(emulated, releases["B"], on_a)  # the fault fixed
    assert rerun.exit_status == 0 and rerun.stopped is None, render_fleet(rerun)
    assert [h.outcome for h in rerun.hosts] == ["unchanged"] * 4 + ["deployed"] * 4
    assert set(_on(emulated).values()) == {b}


@pytest.mark.slow
def test_a_host_that_is_down_fails_its_stage(emulated, releases: dict[str, Release],
                                             on_a: Path, tmp_path: Path) -> None:
    b, c = releases["B"].id, releases["C"].id
    if set(_on(emulated).values()) != {b}:  # as the test before leaves them (run alone: B)
        _rollout(emulated, releases["B"], on_a)
    down = emulated.write_inventory(tmp_path / "down.yml",
                                    host_vars={"dev2": {"ansible_port": 2222}})  # refused
    halted = _rollout(emulated, releases["C"], down)
    assert halted.exit_status == 3 and halted.stopped == "batch 1", render_fleet(halted)
    assert _outcomes(halted)["dev2"] == ("failed", None)
    assert str(halted.hosts[2].error).startswith("cannot connect to")
    assert [h.outcome for h in halted.hosts] == ["deployed", "rolled back", "failed",
                                                 "rolled back"] + ["not reached"] * 4
    assert _on(emulated) == {f"dev{i}": c if i == 0 else b for i in range(8)}
    budget = _rollout(emulated, releases["C"], down,
                      Staging(canary=1, batch=Share(count=3), max_fail=Share(count=1)))
    assert budget.exit_status == 3 and budget.stopped is None, render_fleet(budget)
    assert [s.result for s in budget.stages] == ["done"] * 4
    assert _on(emulated) == {f"dev{i}": b if i == 2 else c for i in range(8)}


@pytest.mark.slow
def test_sigint_mid_stage_leaves_whole_releases_and_a_rerun_finishes(
        emulated, releases: dict[str, Release], on_a: Path) -> None:
    d = releases["D"]
    before = _on(emulated)
    argv = [sys.executable, "-m", "edge", "deploy", str(d.bundle_dir), "--inventory", str(on_a),
            "--canary", "1", "--batch", "3", "--forks", str(FLEET_SIZE), "--no-on-device",
            "--runs", "3", "--warmup", "1", "--threads", "1",
            "--known-hosts", str(emulated.known_hosts), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONPATH": str(Path(__file__).parents[1])},
                            preexec_fn=as_in_a_terminal)
    batch_1 = [device.home / WORK / "releases" / d.id for device in emulated.devices[1:4]]
    deadline = time.monotonic() + 120
    while not any(p.exists() for p in batch_1) and proc.poll() is None:
        assert time.monotonic() < deadline, "batch 1 never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, err
    now = _on(emulated)  # every device on a whole release: D or the one it ran before
    assert now["dev0"] == d.id, now
    assert all(now[name] in (d.id, before[name]) for name in now), now
    assert all(now[f"dev{i}"] == before[f"dev{i}"] for i in range(4, 8))  # not contacted
    rerun = _rollout(emulated, d, on_a)
    assert rerun.exit_status == 0, render_fleet(rerun)
    assert rerun.hosts[0].outcome == "unchanged"
    assert set(_on(emulated).values()) == {d.id}


@pytest.mark.slow
def test_a_concurrent_deploy_holding_a_device_lock(emulated, releases: dict[str, Release],
                                                   on_a: Path) -> None:
    from devices.device import prepare
    from devices.lock import deploy_lock
    from devices.ssh import SSHTransport, parse_host

    e = releases["E"].id
    before = _on(emulated)
    busy = emulated.devices[5]  # batch 2
    with SSHTransport(parse_host(busy.target), identity=emulated.identity,
                      known_hosts=emulated.known_hosts) as transport:
        with deploy_lock(prepare(transport, emulated.python, f"~/{WORK}")):
            halted = _rollout(emulated, releases["E"], on_a)
    assert halted.exit_status == 3 and halted.stopped == "batch 2", render_fleet(halted)
    assert _outcomes(halted)["dev5"] == ("failed", before["dev5"])  # asked after the failure
    assert "lock" in str(halted.hosts[5].error), halted.hosts[5].error
    assert [h.outcome for h in halted.hosts][4:] == ["rolled back", "failed", "rolled back",
                                                     "not reached"]
    assert _on(emulated) == {f"dev{i}": e if i < 4 else before[f"dev{i}"] for i in range(8)}
