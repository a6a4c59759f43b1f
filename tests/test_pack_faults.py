"""A pack switches as one under the deploy fault matrix, on the embedded local device.

A real ``edge pack deploy`` process is killed (SIGKILL) at each step of the device's side —
installing releases, timing candidates, the co-run, the switch, the prune — with the device's
command it was waiting for killed too (as an SSH session's end would); the agent is killed
(SIGKILL) in the middle of the switch, after its first slot; the disk fills (a real, small
tmpfs). Afterwards every model's slot is on a whole pack — the one before, or (killed in the
prune, after the switch) the new one — never a mix, and the next deploy succeeds with no human
step. The packs name bundles made once (edge optimize), so each deploy is the device's part.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.digits import DigitsModel, kept_digits

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
def packs(tmp_path_factory: pytest.TempPathFactory, digits: DigitsModel) -> dict[str, Path]:
    """Pack A (two digits CNNs in three slots) and pack B (a third CNN in all three), their
    models optimized once into bundles, and the profile (this host, onnxruntime only)."""
    folder = tmp_path_factory.mktemp("packs")
    profile = _profile(folder)
    models = {"digits": digits, "other": kept_digits(folder / "seed1", seed=1),
              "third": kept_digits(folder / "seed2", seed=2)}
    for name, model in models.items():
        done = run_cli("optimize", str(model.onnx), "--profile", str(profile), "--calib",
                       str(model.calib), "-o", str(folder / f"{name}.bundle"))
        assert done.status == 0, done.stderr
    a = _write(folder / "a.yaml", dict(zip(SLOTS, ("digits", "other", "digits"), strict=True)))
    b = _write(folder / "b.yaml", dict.fromkeys(SLOTS, "third"))
    return {"a": a, "b": b, "profile": profile, "folder": folder}


def _profile(folder: Path, work_dir: str = "~/.edge") -> Path:
    path = folder / f"host{'-small' if 'small' in work_dir else ''}.yaml"
    path.write_text("extends: x86-64\nid: host\naccelerators: []\nruntimes: [onnxruntime]\n"
                    f"compute: {{threads: 1}}\naccess: {{work_dir: '{work_dir}'}}\n")
    return path


def _write(path: Path, slots: dict[str, str]) -> Path:
    path.write_text(json.dumps({"models": [{"model": f"{bundle}.bundle", "name": slot,
                                            "rate": 20} for slot, bundle in slots.items()]}))
    return path


def _slots(profile: Path) -> dict[str, str]:
    listed = run_cli("releases", "--profile", str(profile), "--json")
    assert listed.status == 0, listed.stderr
    return {s["name"]: s["active"] for s in listed.json()["slots"]}


def _deploy(pack: Path, profile: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge", "pack", "deploy", str(pack),
                           "--profile", str(profile), "--seconds", "0.5", "--tries", "1",
                           "-o", str(pack.parent / "out"), *more],
                          capture_output=True, text=True, check=False, timeout=900)


def _deployed(pack: Path, profile: Path) -> dict[str, str]:
    done = _deploy(pack, profile, "--json")
    assert done.returncode == 0, done.stderr
    return {s["slot"]: s["active"] for s in json.loads(done.stdout)["switched"]}


def _pausing_python(folder: Path, step: str) -> tuple[Path, Path]:
    """A device python that, asked for agent ``step``, writes its PID and waits (it is killed
    there); every other command runs."""
    marker = folder / f"{step}.pid"
    marker.unlink(missing_ok=True)
    script = folder / f"python-{step}"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = {step} ]; then\n"
                      f"    echo $$ > {marker}\n    while true; do sleep 0.05; done\n  fi\n"
                      f"done\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script, marker


def _kill_at(step: str, pack: Path, profile: Path) -> None:
    """``edge pack deploy`` started, SIGKILLed once the device is asked for ``step``, with the
    device's command it waits for."""
    python, marker = _pausing_python(pack.parent, step)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge", "pack", "deploy", str(pack), "--profile", str(profile),
         "--seconds", "0.5", "--tries", "1", "-o", str(pack.parent / "out"),
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


def _killing_python(folder: Path) -> Path:
    (folder / "killer.py").write_text(KILLER)
    script = folder / "python-killer"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = activate-pack ]; "
                      f"then exec {sys.executable} {folder / 'killer.py'} \"$@\"; fi\ndone\n"
                      f"exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def test_a_pack_deploy_killed_at_any_step_leaves_every_slot_on_a_whole_pack(
        packs: dict[str, Path]) -> None:
    a, b, profile = packs["a"], packs["b"], packs["profile"]
    before = _deployed(a, profile)
    assert set(before) == set(SLOTS) and _slots(profile) == before
    for step in STEPS:
        _kill_at(step, b, profile)
        assert _slots(profile) == before, f"killed in {step}: the slots moved"
    # the agent itself killed after the first slot of the switch: the journal undoes it
    killed = _deploy(b, profile, "--device-python", str(_killing_python(packs["folder"])))
    assert killed.returncode == 3 and "activate-pack was killed" in killed.stderr
    work = Path(json.loads(run_cli("releases", "--profile", str(profile), "--json").stdout)[
        "work_dir"])
    assert _slots(profile) == before and not (work / "pack-switch.json").exists()
    # killed in the prune, after the switch: every slot is on the new pack
    _kill_at("prune", b, profile)
    after = _slots(profile)
    assert all(after[s] != before[s] for s in SLOTS)
    # the lock died with each process; the next deploys need no human step
    healed = _deployed(a, profile)  # (each slot's candidate as measured now)
    assert _slots(profile) == healed and set(healed) == set(SLOTS)


@contextlib.contextmanager
def _small_disk(megabytes: int) -> Iterator[Path]:
    """The local device's ~/.edge-small on a real tmpfs of ``megabytes``."""
    folder = Path(os.environ["EDGE_LOCAL_DEVICE"]).expanduser() / ".edge-small"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755",
                           "tmpfs", str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:  # never a silent skip: CI runs as root, where this works
        pytest.fail(f"cannot mount a tmpfs for the disk-full test: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    stat = os.statvfs(folder)
    filler = folder / "someone-elses-data"
    with open(filler, "wb") as handle:
        left = stat.f_bavail * stat.f_frsize - leave
        while left > 0:
            left -= handle.write(b"\0" * min(left, 1 << 20))
    return filler


def test_a_full_disk_leaves_every_slot_and_the_next_deploy_needs_no_cleanup(
        packs: dict[str, Path]) -> None:
    profile = _profile(packs["folder"], "~/.edge-small")
    with _small_disk(64) as root:
        before = _deployed(packs["a"], profile)
        filler = _fill(root, 20_000)
        done = _deploy(packs["b"], profile)
        assert done.returncode == 3, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and "space" in line
        assert _slots(profile) == before
        filler.unlink()  # the user frees space
        healed = _deployed(packs["b"], profile)
        assert _slots(profile) == healed and all(healed[s] != before[s] for s in SLOTS)
        assert list((root / "incoming").glob("*.partial")) == []
