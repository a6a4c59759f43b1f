"""A pack switches as one under the deploy fault matrix, against a real sshd.

A real ``edge pack deploy`` process is killed (SIGKILL) at each step of the device's side —
installing releases, timing candidates, the co-run, the switch, the prune — and the device's
command it was waiting for with it; the agent is killed (SIGKILL) in the middle of the switch,
after its first slot; the disk fills (a real, small tmpfs). Afterwards every model's slot is on
a whole pack — the one before, or (killed in the prune, after the switch) the new one — never a
mix, and the next deploy succeeds with no human step. The packs name bundles made once (edge
optimize), so each deploy is the device's part.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.digits import DigitsModel, kept_digits
from tests.support.sshd import SSHDevice
from tests.test_deploy_fault_matrix import _fill, small_disk

STEPS = ("install", "bench", "corun", "activate-pack")  # killed before the switch
STEP_WAIT_S = 300.0
SLOTS = ("digits", "other", "digits-b")

#: A device python's stand-in for the agent's ``activate-pack``: the real agent, SIGKILLed
#: right after it switched the pack's first slot.
KILLER = """import os, signal, sys
agent = sys.argv[1]
sys.path.insert(0, agent)
import edge_agent.releases as releases
from edge_agent import cli
real = releases._switch_one
def first_then_killed(*args):
    real(*args)
    os.kill(os.getpid(), signal.SIGKILL)
releases._switch_one = first_then_killed
sys.argv = [agent, *sys.argv[2:]]
sys.exit(cli.entry())
"""


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, digits: DigitsModel,
          ssh_device: SSHDevice) -> dict[str, Path]:
    """Pack A (two digits CNNs in three slots) and pack B (a third CNN in all three), their
    models optimized once into bundles, and the device's profile (onnxruntime only)."""
    folder = tmp_path_factory.mktemp("packs")
    profile = _profile(ssh_device, folder)
    models = {"digits": digits, "other": kept_digits(folder / "seed1", seed=1),
              "third": kept_digits(folder / "seed2", seed=2)}
    for name, model in models.items():
        done = run_cli("optimize", str(model.onnx), "--profile", str(profile), "--calib",
                       str(model.calib), "-o", str(folder / f"{name}.bundle"))
        assert done.status == 0, done.stderr
    a = _write(folder / "a.yaml", dict(zip(SLOTS, ("digits", "other", "digits"), strict=True)))
    b = _write(folder / "b.yaml", dict.fromkeys(SLOTS, "third"))
    return {"a": a, "b": b, "profile": profile, "folder": folder}


def _keys(device: SSHDevice) -> list[str]:
    return ["--identity", str(device.identity), "--known-hosts", str(device.known_hosts)]


def _profile(device: SSHDevice, folder: Path, work_dir: str = "~/.edge-packs") -> Path:
    path = folder / f"device{'-small' if 'small' in work_dir else ''}.yaml"
    path.write_text(
        "extends: x86-64\nid: pack-device\naccelerators: []\nruntimes: [onnxruntime]\n"
        "compute: {threads: 1}\naccess:\n"
        f"  host: {device.host}\n  port: {device.port}\n  user: {device.user}\n"
        f"  python: {device.python}\n  work_dir: '{work_dir}'\n")
    return path


def _write(path: Path, slots: dict[str, str]) -> Path:
    path.write_text(json.dumps({"models": [{"model": f"{bundle}.bundle", "name": slot,
                                            "rate": 20} for slot, bundle in slots.items()]}))
    return path


def _slots(device: SSHDevice, profile: Path) -> dict[str, str]:
    listed = run_cli("releases", "--profile", str(profile), *_keys(device), "--json")
    assert listed.status == 0, listed.stderr
    return {s["name"]: s["active"] for s in listed.json()["slots"]}


def _deploy(device: SSHDevice, pack: Path, profile: Path,
            *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge", "pack", "deploy", str(pack),
                           "--profile", str(profile), *_keys(device), "--seconds", "0.5",
                           "--tries", "1", "-o", str(pack.parent / "out"), *more],
                          capture_output=True, text=True, check=False, timeout=900)


def _deployed(device: SSHDevice, pack: Path, profile: Path) -> dict[str, str]:
    done = _deploy(device, pack, profile, "--json")
    assert done.returncode == 0, done.stderr
    return {s["slot"]: s["active"] for s in json.loads(done.stdout)["switched"]}


def _device_folder(device: SSHDevice) -> Path:
    folder = device.home / "pack-python"
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o777)  # the device user writes its markers here
    return folder


def _pausing_python(device: SSHDevice, step: str) -> tuple[Path, Path]:
    """A device python that, asked for agent ``step``, writes its PID and waits (it is killed
    there); every other command runs."""
    folder = _device_folder(device)
    marker = folder / f"{step}.pid"
    marker.unlink(missing_ok=True)
    script = folder / f"python-{step}"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = {step} ]; then\n"
                      f"    echo $$ > {marker}\n    while true; do sleep 0.05; done\n  fi\n"
                      f"done\nexec {device.python} \"$@\"\n")
    script.chmod(0o755)
    return script, marker


def _kill_at(device: SSHDevice, step: str, pack: Path, profile: Path) -> None:
    """``edge pack deploy`` started, SIGKILLed once the device is asked for ``step``, with the
    device's command it waits for."""
    python, marker = _pausing_python(device, step)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge", "pack", "deploy", str(pack), "--profile", str(profile),
         *_keys(device), "--seconds", "0.5", "--tries", "1", "-o", str(pack.parent / "out"),
         "--device-python", str(python)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + STEP_WAIT_S
    while not (marker.exists() and marker.read_text().strip().isdigit()):
        if proc.poll() is not None:
            pytest.fail(f"edge pack deploy ended before {step}: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"edge pack deploy never reached {step}")
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    with contextlib.suppress(ProcessLookupError):
        os.kill(int(marker.read_text()), signal.SIGKILL)


def _killing_python(device: SSHDevice) -> Path:
    folder = _device_folder(device)
    (folder / "killer.py").write_text(KILLER)
    script = folder / "python-killer"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = activate-pack ]; "
                      f"then exec {device.python} {folder / 'killer.py'} \"$@\"; fi\ndone\n"
                      f"exec {device.python} \"$@\"\n")
    script.chmod(0o755)
    return script


def test_a_pack_deploy_killed_at_any_step_leaves_every_slot_on_a_whole_pack(
        packs: dict[str, Path], ssh_device: SSHDevice) -> None:
    device, a, b, profile = ssh_device, packs["a"], packs["b"], packs["profile"]
    before = _deployed(device, a, profile)
    assert set(before) == set(SLOTS) and _slots(device, profile) == before
    for step in STEPS:
        _kill_at(device, step, b, profile)
        assert _slots(device, profile) == before, f"killed in {step}: the slots moved"
    # the agent itself killed after the first slot of the switch: the journal undoes it
    killed = _deploy(device, b, profile, "--device-python", str(_killing_python(device)))
    assert killed.returncode == 3 and "activate-pack was killed" in killed.stderr
    work = device.home / ".edge-packs"
    assert (work / "pack-switch.json").exists()  # cut short: the journal is left
    assert _slots(device, profile) == before and not (work / "pack-switch.json").exists()
    # killed in the prune, after the switch: every slot is on the new pack
    _kill_at(device, "prune", b, profile)
    after = _slots(device, profile)
    assert all(after[s] != before[s] for s in SLOTS)
    # the lock died with each process; the next deploy needs no human step
    healed = _deployed(device, a, profile)  # (each slot's candidate as measured now)
    assert _slots(device, profile) == healed and set(healed) == set(SLOTS)


def test_a_full_disk_leaves_every_slot_and_the_next_deploy_needs_no_cleanup(
        packs: dict[str, Path], ssh_device: SSHDevice) -> None:
    device = ssh_device
    with small_disk(device, 64) as work_dir:
        profile = _profile(device, packs["folder"], work_dir)
        root = device.home / ".edge-small"
        before = _deployed(device, packs["a"], profile)
        filler = _fill(root, "someone-elses-data", 20_000)
        done = _deploy(device, packs["b"], profile)
        assert done.returncode == 3, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and "space" in line
        assert _slots(device, profile) == before
        filler.unlink()  # the user frees space
        healed = _deployed(device, packs["b"], profile)
        assert _slots(device, profile) == healed and all(healed[s] != before[s] for s in SLOTS)
        assert list((root / "incoming").glob("*.partial")) == []
