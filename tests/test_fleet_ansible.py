"""The edge.fleet Ansible collection (devices/ansible/) against 8 real sshd devices (network
namespaces): the shipped staged-rollout playbook run by ansible-playbook (ansible-core, pinned),
a health check failing in batch 2 halting it with that batch back on its previous release and
later batches untouched, a rerun after the fix finishing, a third run changing nothing; check
mode and --diff; rollback and prune states."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.core.errors import UsageError
from tests.support.cli import as_in_a_terminal
from tests.support.digits import DigitsModel

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FLEET_SIZE = 8
FAULTY = "dev2"  # batch 2 of serial [1, "25%", "100%"] over 8 hosts: dev1, dev2


@pytest.fixture(scope="module")
def emulated() -> Iterator:
    from tests.support.fleet_devices import fleet_or_skip

    yield from fleet_or_skip(FLEET_SIZE)


def _profile(where: Path, fleet) -> Path:
    path = where / "emu-x86.yaml"
    path.write_text(textwrap.dedent(f"""
        extends: x86-64
        id: emu-x86
        name: Emulated x86-64 device (1 CPU, 1 GB)
        compute: {{cores: 1, threads: 1}}
        memory: {{ram_mb: {fleet.memory_mb}, model_budget_mb: 256}}
        runtimes: [tflite, onnxruntime]
        access: {{user: {fleet.user}, python: {fleet.python}}}
        """))
    return path


def rechosen(bundle: Path, out: Path, candidate: str) -> Path:
    """A copy of ``bundle`` whose chosen candidate is ``candidate`` (another release)."""
    shutil.copytree(bundle, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["candidates"]:
        cand = entry["candidate"]
        name = "-".join([cand["target"], cand["precision"], *([cand["variant"]]
                                                             if cand.get("variant") else [])])
        if entry["status"] == "chosen":
            entry["status"] = "passed"
        if name == candidate:
            entry["status"] = "chosen"
    manifest["chosen"] = candidate
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def fleet_dir(emulated, digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two bundles (two releases) of the digits CNN, an inventory whose dev2 runs the agent
    through a python that fails the health check while ``<home>/.edge-fault`` exists."""
    where = tmp_path_factory.mktemp("ansible-fleet")
    profile = _profile(where, emulated)
    done = subprocess.run([sys.executable, "-m", "edge", "optimize", str(digits.onnx),
                           "--profile", str(profile), "--calib", str(digits.calib), "--eval",
                           str(digits.eval), "-o", str(where / "a.bundle")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    chosen = json.loads((where / "a.bundle" / "manifest.json").read_text())["chosen"]
    rechosen(where / "a.bundle", where / "b.bundle",
             "tflite-fp32" if chosen != "tflite-fp32" else "tflite-int8")
    faulty = next(d for d in emulated.devices if d.name == FAULTY)
    wrapper = faulty.home / "python-with-fault"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$2" = health ] && [ -e "$HOME/.edge-fault" ]; then
          echo '{{"error": "injected fault: the model does not load"}}'; exit 3
        fi
        exec {emulated.python} "$@"
        """))
    wrapper.chmod(0o755)
    emulated.write_inventory(where / "hosts.yml", host_vars={
        FAULTY: {"ansible_python_interpreter": str(wrapper)}})
    return where


def collections_dir(where: Path) -> Path:
    """A collections path holding edge.fleet: a link to the collection's source."""
    path = where / "collections"
    (path / "ansible_collections" / "edge").mkdir(parents=True, exist_ok=True)
    link = path / "ansible_collections" / "edge" / "fleet"
    if not link.exists():
        link.symlink_to(ROOT / "devices" / "ansible", target_is_directory=True)
    return path


def ansible_env(where: Path, known_hosts: Path) -> dict[str, str]:
    """ansible's settings: the collection, ssh with ControlPersist, pipelining, 8 forks."""
    control = tempfile.mkdtemp(prefix="eacp", dir="/tmp")  # short: a socket path <= 108
    return {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_dir(where)),
            "ANSIBLE_PIPELINING": "True", "ANSIBLE_FORKS": str(FLEET_SIZE),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": control, "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=120s "
                                f"-o UserKnownHostsFile={known_hosts} "
                                "-o StrictHostKeyChecking=yes",
            "ANSIBLE_LOCAL_TEMP": str(where / "ansible-tmp"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def playbook(fleet_dir: Path, emulated, bundle: str, *extra: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(fleet_dir / "hosts.yml"),
         "edge.fleet.staged_rollout", "-e", f"rollout_bundle={fleet_dir / bundle}",
         "-e", "rollout_runs=3", "-e", "rollout_warmup=1", *extra],
        capture_output=True, text=True, env=ansible_env(fleet_dir, emulated.known_hosts),
        timeout=600, check=False)


def current(device) -> str | None:
    link = device.home / ".edge" / "current"
    return Path(os.readlink(link)).name if link.is_symlink() else None


def release_of(bundle: Path) -> str:
    from edge.core.bundle import read_bundle

    chosen = read_bundle(bundle).chosen_result()
    assert chosen is not None and chosen.artifact is not None
    return chosen.artifact.release_id[:16]


def recap(out: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {ok, changed, failed, ...}."""
    rows = re.findall(r"^(\S+)\s+:\s+(.*)$", out.split("PLAY RECAP")[-1], re.M)
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
            for host, rest in rows}


@pytest.mark.slow
def test_staged_rollout_halts_rolls_back_resumes_and_settles(emulated, fleet_dir: Path) -> None:
    a, b = release_of(fleet_dir / "a.bundle"), release_of(fleet_dir / "b.bundle")
    assert a != b
    names = [d.name for d in emulated.devices]
    first = playbook(fleet_dir, emulated, "a.bundle", "-e", '{"rollout_serial": ["100%"]}')
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert {d.name: current(d) for d in emulated.devices} == dict.fromkeys(names, a)
    faulty = next(d for d in emulated.devices if d.name == FAULTY)
    (faulty.home / ".edge-fault").write_text("")
    later = emulated.devices[3:]  # batch 3: never reached
    histories = {d.name: (d.home / ".edge" / "history.json").read_text() for d in later}
    halted = playbook(fleet_dir, emulated, "b.bundle")
    assert halted.returncode != 0, halted.stdout[-3000:]
    assert "injected fault" in halted.stdout
    # the canary batch (dev0) stays on b; batch 2 (dev1, dev2) is back on a; the rest untouched
    assert {d.name: current(d) for d in emulated.devices} == {
        "dev0": b, **dict.fromkeys(names[1:], a)}, halted.stdout[-4000:]
    assert {d.name: (d.home / ".edge" / "history.json").read_text() for d in later} == histories
    assert set(recap(halted.stdout)) == {"dev0", "dev1", "dev2"}
    (faulty.home / ".edge-fault").unlink()
    resumed = playbook(fleet_dir, emulated, "b.bundle")
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    assert {d.name: current(d) for d in emulated.devices} == dict.fromkeys(names, b)
    assert recap(resumed.stdout)["dev0"]["changed"] == 0  # already there
    settled = playbook(fleet_dir, emulated, "b.bundle")
    assert settled.returncode == 0, settled.stdout[-4000:]
    assert {h: r["changed"] for h, r in recap(settled.stdout).items()} == dict.fromkeys(names, 0)


@pytest.mark.slow
def test_check_mode_diff_rollback_and_prune(emulated, fleet_dir: Path) -> None:
    """On dev7: deploy a (check mode + --diff changes nothing), roll back, prune."""
    device = emulated.devices[-1]
    limit = ("--limit", device.name)
    deployed = playbook(fleet_dir, emulated, "b.bundle", *limit)
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    before = current(device)
    checked = playbook(fleet_dir, emulated, "a.bundle", "--check", "--diff", *limit)
    assert checked.returncode == 0, checked.stdout[-3000:]
    a = release_of(fleet_dir / "a.bundle")
    assert f"+current: {a}" in checked.stdout and f"-current: {before}" in checked.stdout
    assert recap(checked.stdout)[device.name]["changed"] == 1 and current(device) == before

    def adhoc(args: str) -> dict:
        done = subprocess.run(
            [str(BIN / "ansible"), "-i", str(fleet_dir / "hosts.yml"), device.name, "-m",
             "edge.fleet.release", "-a", args],
            capture_output=True, text=True, env=ansible_env(fleet_dir, emulated.known_hosts),
            timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        return json.loads(done.stdout.split(" => ", 1)[1])  # "dev7 | CHANGED => {...}"

    deployed_a = playbook(fleet_dir, emulated, "a.bundle", *limit)
    assert deployed_a.returncode == 0 and current(device) == a
    back = adhoc("state=rolled_back")
    assert back["changed"] and back["release"] == before == current(device)
    assert back["previous"] == a and back["health"]["run_ms"] >= 0
    pruned = adhoc("state=pruned keep=1")
    assert current(device) == before and pruned["release"] == before
    left = {p.name for p in (device.home / ".edge" / "releases").iterdir()}
    assert before in left and len(left) <= 2  # the active one and its rollback target


@pytest.mark.slow
def test_both_engines_give_the_same_table_exit_status_and_history(emulated,
                                                                   fleet_dir: Path) -> None:
    """`edge deploy --inventory` with the built-in engine, then `--engine ansible`, the same
    inventory and the same fault (dev2's health check): the same hosts ok and failed, the same
    exit status, and both engines' measurements in the results store."""
    from edge.core.results import kept_results
    from tests.support.cli import run_cli

    faulty = next(d for d in emulated.devices if d.name == FAULTY)
    common = ("--inventory", str(fleet_dir / "hosts.yml"), "--no-on-device", "--known-hosts",
              str(emulated.known_hosts), "--runs", "3", "--warmup", "1", "--forks", "8",
              "--json")
    before = sum(len(v) for v in kept_results().values())
    # ansible's module leaves a host already on the release alone (changed=false, no health
    # check): it gets the release dev2 is not on; the built-in engine checks again anyway
    on_a = current(faulty) == release_of(fleet_dir / "a.bundle")
    fresh, other = ("b.bundle", "a.bundle") if on_a else ("a.bundle", "b.bundle")
    (faulty.home / ".edge-fault").write_text("")
    try:
        builtin = run_cli("deploy", str(fleet_dir / other), *common)
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        ansible = run_cli("deploy", str(fleet_dir / fresh), *common, "--engine", "ansible")
    finally:
        (faulty.home / ".edge-fault").unlink()
    # ansible-runner's own SIGINT/SIGTERM handlers do not outlive the run: Ctrl-C still stops edge
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert builtin.status == ansible.status == 3, ansible.stderr[-3000:]
    assert ansible.stdout, ansible.stderr[-3000:]
    tables = [[(h["host"], h["status"]) for h in r.json()["hosts"]] for r in (builtin, ansible)]
    assert tables[0] == tables[1] == [(d.name, "failed" if d.name == FAULTY else "ok")
                                      for d in emulated.devices], ansible.stdout[-3000:]
    for result in (builtin, ansible):
        (bad,) = [h for h in result.json()["hosts"] if h["status"] == "failed"]
        assert "failed its health check" in bad["error"] and "injected fault" in bad["error"]
    b = release_of(fleet_dir / fresh)
    assert {d.name: current(d) for d in emulated.devices if d.name != FAULTY} == {
        d.name: b for d in emulated.devices if d.name != FAULTY}
    hosts = ansible.json()["hosts"]
    assert all(h["p50_ms"] > 0 and h["report"]["release"] == b
               for h in hosts if h["status"] == "ok")
    after = sum(len(v) for v in kept_results().values())
    assert after - before == 2 * (FLEET_SIZE - 1)  # every ok host, by each engine


@pytest.mark.slow
def test_a_host_that_is_down_fails_its_batch_which_is_rolled_back(emulated, fleet_dir: Path,
                                                                  tmp_path: Path) -> None:
    """dev4 and dev5 in one batch, dev5 unreachable (a closed port): dev4, which switched, goes
    back to its previous release; the play fails."""
    dev4, dev5 = emulated.devices[4], emulated.devices[5]
    inventory = emulated.write_inventory(tmp_path / "hosts.yml", devices=(dev4, dev5),
                                         host_vars={dev5.name: {"ansible_port": 2222}})
    shutil.copy(inventory, fleet_dir / "down.yml")
    first = playbook(fleet_dir, emulated, "a.bundle", "--limit", dev4.name)
    assert first.returncode == 0, first.stdout[-3000:]
    before, bundle = current(dev4), "b.bundle"
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(fleet_dir / "down.yml"),
         "edge.fleet.staged_rollout", "-e", f"rollout_bundle={fleet_dir / bundle}",
         "-e", "rollout_runs=3", "-e", "rollout_warmup=1", "-e", '{"rollout_serial": ["100%"]}'],
        capture_output=True, text=True, env=ansible_env(fleet_dir, emulated.known_hosts),
        timeout=600, check=False)
    assert done.returncode != 0, done.stdout[-3000:]
    rows = recap(done.stdout)
    assert rows[dev5.name]["failed"] == rows[dev4.name]["failed"] == 1, rows
    assert f"fatal: [{dev5.name}]: UNREACHABLE!" in done.stdout
    assert current(dev4) == before == release_of(fleet_dir / "a.bundle"), done.stdout[-3000:]
    assert f"rolled back to {before}: {dev5.name} of this batch failed" in done.stdout


@pytest.mark.slow
def test_a_deploy_holding_the_device_lock_makes_the_task_fail_at_once(emulated,
                                                                      fleet_dir: Path) -> None:
    """While an edge deploy holds dev6's deploy lock, the playbook's task there fails at once
    naming the holder, and dev6 keeps its release."""
    from devices.connect import Reach, open_transport
    from devices.device import prepare
    from devices.lock import deploy_lock
    from devices.ssh import HostSpec

    device = emulated.devices[6]
    first = playbook(fleet_dir, emulated, "a.bundle", "--limit", device.name)
    assert first.returncode == 0, first.stdout[-3000:]
    before = current(device)
    reach = Reach(kind="ssh", host=HostSpec(user=emulated.user, host=device.address,
                                            port=device.port),
                  identity=emulated.identity, known_hosts=emulated.known_hosts)
    with open_transport(reach) as transport:
        with deploy_lock(prepare(transport, emulated.python, "~/.edge"), "deploy"):
            busy = playbook(fleet_dir, emulated, "b.bundle", "--limit", device.name)
    assert busy.returncode != 0 and "device busy: another deploy" in busy.stdout, \
        busy.stdout[-3000:]
    assert current(device) == before


def releases_of(fleet_dir: Path) -> dict[str, Path]:
    """A bundle per candidate the digits bundle kept (release id -> bundle dir), made once."""
    manifest = json.loads((fleet_dir / "a.bundle" / "manifest.json").read_text())
    found = {}
    for entry in manifest["candidates"]:
        cand = entry["candidate"]
        name = "-".join([cand["target"], cand["precision"], *([cand["variant"]]
                                                             if cand.get("variant") else [])])
        out = fleet_dir / f"r-{name}.bundle"
        if entry["status"] in ("chosen", "passed") and entry.get("artifact"):
            if not out.exists():
                rechosen(fleet_dir / "a.bundle", out, name)
            try:
                found[release_of(out)] = out
            except UsageError:  # not a candidate edge deploys (the original model)
                continue
    return found


def whole(device, bundles: dict[str, Path]) -> bool:
    """``current`` points to a complete release: every file as the bundle made it (sha256)."""
    import hashlib

    from devices.release import release_files
    from edge.core.bundle import read_bundle

    release = current(device)
    if release is None or release not in bundles:
        return False
    chosen = read_bundle(bundles[release]).chosen_result()
    assert chosen is not None and chosen.artifact is not None
    folder = device.home / ".edge" / "current"
    return all((folder / name).is_file() and hashlib.sha256((folder / name).read_bytes())
               .hexdigest() == sha for _, sha, name in release_files(bundles[release],
                                                                    chosen.artifact))


@pytest.mark.slow
def test_both_engines_halt_a_staged_rollout_the_same_way(emulated, fleet_dir: Path) -> None:
    """--canary 1 --batch 3, dev2's health check failing (stage "batch 1"): with each engine,
    dev0 deployed, dev1/dev3 rolled back, dev2 failed, the rest not reached; exit 3."""
    from tests.support.cli import run_cli

    bundles = releases_of(fleet_dir)
    first4 = emulated.devices[:4]
    if any(current(d) is None for d in first4):  # each has a release to go back to
        done = playbook(fleet_dir, emulated, "a.bundle", "--limit", "dev0,dev1,dev2,dev3")
        assert done.returncode == 0, done.stdout[-3000:]
    fresh = [r for r in bundles if all(current(d) != r for d in first4)]
    assert len(fresh) >= 2, (list(bundles), [current(d) for d in first4])
    common = ("--inventory", str(fleet_dir / "hosts.yml"), "--no-on-device", "--known-hosts",
              str(emulated.known_hosts), "--runs", "3", "--warmup", "1", "--forks", "8",
              "--canary", "1", "--batch", "3", "--json")
    faulty = next(d for d in emulated.devices if d.name == FAULTY)
    (faulty.home / ".edge-fault").write_text("")
    try:
        ansible = run_cli("deploy", str(bundles[fresh[0]]), *common, "--engine", "ansible")
        builtin = run_cli("deploy", str(bundles[fresh[1]]), *common)
    finally:
        (faulty.home / ".edge-fault").unlink()
    rows = [[(h["host"], h["stage"], h["outcome"], h["current"] is None) for h in r.json()["hosts"]]
            for r in (builtin, ansible)]
    assert rows[0] == rows[1], ansible.stdout[-4000:] + ansible.stderr[-2000:]
    assert [row[2] for row in rows[1]] == ["deployed", "rolled back", "failed", "rolled back"
                                          ] + ["not reached"] * 4
    assert builtin.status == ansible.status == 3
    for result in (builtin, ansible):
        report = result.json()
        assert report["stopped"] == "batch 1"
        assert [s["result"] for s in report["stages"]] == ["done", "halted"] + ["not reached"] * 2
        bad = report["hosts"][2]
        assert bad["error"].startswith(f"{bad['target']}: release "), bad["error"]
    assert current(emulated.devices[0]) == fresh[1]
    assert all(whole(d, bundles) for d in emulated.devices[:4])


@pytest.mark.slow
def test_sigint_mid_batch_leaves_whole_releases_and_a_rerun_finishes(emulated,
                                                                     fleet_dir: Path) -> None:
    """Ctrl-C (SIGINT to ansible-playbook's process group) while batch 2 installs: every
    device on a whole release; a rerun of the playbook finishes with all on the release."""
    import time

    bundles = releases_of(fleet_dir)
    batch_2 = emulated.devices[1:3]  # serial [1, "25%", "100%"] over 8 hosts
    target = next(r for r in bundles  # one batch 2 never had: its folder shows the install
                  if not any((d.home / ".edge" / "releases" / r).exists() for d in batch_2))
    before = {d.name: current(d) for d in emulated.devices}
    known = dict(bundles)
    proc = subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", str(fleet_dir / "hosts.yml"),
         "edge.fleet.staged_rollout", "-e", f"rollout_bundle={bundles[target]}",
         "-e", "rollout_runs=3", "-e", "rollout_warmup=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env=ansible_env(fleet_dir, emulated.known_hosts), preexec_fn=as_in_a_terminal)
    folders = [d.home / ".edge" / "releases" / target for d in batch_2]
    deadline = time.monotonic() + 120
    while not any(p.exists() for p in folders) and proc.poll() is None:
        assert time.monotonic() < deadline, "batch 2 never started"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-3000:]
    assert all(whole(d, known) or before[d.name] is current(d) is None  # never deployed
               for d in emulated.devices), (
        {d.name: current(d) for d in emulated.devices}, out[-3000:])
    assert current(emulated.devices[0]) == target
    rerun = playbook(fleet_dir, emulated, bundles[target].name)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert {current(d) for d in emulated.devices} == {target}
    assert all(whole(d, known) for d in emulated.devices)


@pytest.mark.slow
def test_the_ansible_engine_deploys_into_the_named_slot(emulated, fleet_dir: Path) -> None:
    """`--engine ansible --name kws` on hosts whose first model is the digits one: each host's
    slot kws gets the release, the digits model stays current in the work dir's own slot."""
    from tests.support.cli import run_cli

    hosts = [d for d in emulated.devices if d.name in ("dev0", "dev3")]
    common = ("--inventory", str(fleet_dir / "hosts.yml"), "--limit", "dev0,dev3",
              "--no-on-device", "--known-hosts", str(emulated.known_hosts), "--runs", "3",
              "--warmup", "1", "--json")
    first = run_cli("deploy", str(fleet_dir / "b.bundle"), *common)  # the slot digits
    assert first.status == 0, first.stderr[-3000:]
    tops = {d.name: current(d) for d in hosts}
    done = run_cli("deploy", str(fleet_dir / "a.bundle"), *common, "--engine", "ansible",
                   "--name", "kws")
    assert done.status == 0, done.stderr[-3000:]
    a = release_of(fleet_dir / "a.bundle")
    for device in hosts:
        assert Path(os.readlink(device.home / ".edge" / "slots/kws" / "current")).name == a
        assert current(device) == tops[device.name]
    assert {h["report"]["name"] for h in done.json()["hosts"] if h["report"]} <= {"kws"}
