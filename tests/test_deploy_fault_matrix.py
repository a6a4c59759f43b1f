"""Faults at every deploy step, against a real sshd, that must need no human afterwards.

A real ``edge deploy`` process is stopped at one step (upload, install, health, bench, activate,
prune) by a real signal (SIGKILL, SIGINT, SIGTERM). The step is held by a device python wrapper
that, when the agent is asked for that step, writes its PID and waits; the upload step is caught
by its partial file growing on the device. Afterwards: the release that was current is current
and whole (sha256 of every file), the deploy lock was released with the process, and the next
deploy succeeds unattended, removing any leftover upload. Also: two deploys at once (the second
exits 3 naming the holder), a prune and a rollback during a deploy, a full disk (a real, small
tmpfs), an upload corrupted on the way, and a device that stops answering mid-upload (every
process of its user stopped).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devices.ssh import SSHTransport, parse_host
from edge.core.errors import DeviceError
from edge.flows.deploy import deploy
from tests.support.cli import as_in_a_terminal
from tests.support.sshd import SSHDevice, _user_pids
from tests.test_deploy_faults import (
    PROFILE,
    ROUNDS,
    WORK,
    FaultyTransport,
    Release,
    _active,
    _deploy,
    _sha,
    _ssh,
    _work,
    assert_serving,
    make_release,
    put_midway,
)

pytestmark = pytest.mark.slow

STEPS = ("upload", "install", "health", "bench", "activate", "prune")
BIG_MB = 48  # the upload must still be running when the signal comes
STEP_WAIT_S = 60.0


# ---------------------------------------------------------------- releases


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Release]:
    root = tmp_path_factory.mktemp("matrix-releases")
    return {tag: make_release(root, tag) for tag in ("A", "B", "C", "D")}


@pytest.fixture()
def serving_a(ssh_device: SSHDevice, releases: dict[str, Release]) -> Release:
    """Release A is current (deployed now, or already there)."""
    _deploy(ssh_device, releases["A"])
    assert _active(ssh_device) == releases["A"].id
    return releases["A"]


# ---------------------------------------------------------------- the edge process


def _profile(device: SSHDevice, folder: Path) -> Path:
    profile = folder / "matrix-device.yaml"
    profile.write_text(
        "extends: x86-64\nid: matrix-device\naccess:\n"
        f"  host: {device.host}\n  port: {device.port}\n  user: {device.user}\n"
        f"  python: {device.python}\n  work_dir: {WORK}\n")
    return profile


def start_edge(device: SSHDevice, release: Release, folder: Path, *, python: str,
               keep: int = 3) -> subprocess.Popen[str]:
    """``edge deploy`` as its own process, as a user runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "edge", "deploy", str(release.bundle_dir),
         "--profile", str(_profile(device, folder)), "--identity", str(device.identity),
         "--known-hosts", str(device.known_hosts), "--device-python", python,
         "--runs", "3", "--warmup", "1", "--threads", "1", "--keep", str(keep)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_in_a_terminal)



def pause_python(device: SSHDevice, step: str) -> tuple[str, Path]:
    """A device python that, asked for agent ``step``, writes its PID to a marker and waits
    until a ``go`` file appears (then runs the real agent); and that marker."""
    folder = device.home / "pause-python"
    folder.mkdir(exist_ok=True)
    marker, go = folder / f"{step}.pid", folder / f"{step}.go"
    for stale in (marker, go):
        stale.unlink(missing_ok=True)
    script = folder / f"python-{step}"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = {step} ]; then\n"
                      f"    echo $$ > {marker}\n"
                      f"    while [ ! -e {go} ]; do sleep 0.05; done\n  fi\ndone\n"
                      f"exec {device.python} \"$@\"\n")
    script.chmod(0o755)
    os.chmod(folder, 0o777)  # edgeuser writes the marker
    return str(script), marker


def wait_for_step(proc: subprocess.Popen[str], device: SSHDevice, release: Release, step: str,
                  marker: Path) -> None:
    """Block until the deploy is in ``step`` (fail if it exits first)."""
    deadline = time.monotonic() + STEP_WAIT_S
    while time.monotonic() < deadline:
        if _in_step(device, release, step, marker):
            return
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"edge deploy ended before {step}: {err}")
        time.sleep(0.01)
    pytest.fail(f"edge deploy never reached {step}")


def _in_step(device: SSHDevice, release: Release, step: str, marker: Path) -> bool:
    if step != "upload":
        return marker.exists() and marker.read_text().strip().isdigit()
    partials = (_work(device) / "incoming").glob(f"{release.id}.*.partial")
    return any(p.stat().st_size > (1 << 20) for p in partials)


@contextlib.contextmanager
def held_still(device: SSHDevice, hold: bool) -> Iterator[None]:
    """With ``hold``, every process of the device user stopped (SIGSTOP) inside, continued on
    the way out: an upload stays where it is while the test looks at the device (48 MB went
    up in less time than that look took on a quiet machine, and the signal came after it)."""
    stopped = _user_pids(pwd.getpwnam(device.user).pw_uid) if hold else set()
    _send(stopped, signal.SIGSTOP)
    try:
        yield
    finally:
        _send(stopped, signal.SIGCONT)


def _send(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def release_paused(marker: Path) -> None:
    """Kill the wrapper still holding the step (so its agent never runs): the PID it wrote,
    if that process is still that wrapper."""
    if not marker.exists():
        return
    pid = marker.read_text().strip()
    marker.unlink()
    with contextlib.suppress(OSError, ValueError):
        if f"python-{marker.stem}" in Path(f"/proc/{pid}/cmdline").read_text():
            os.kill(int(pid), signal.SIGKILL)


def finish(proc: subprocess.Popen[str], sig: int) -> tuple[int, str, float]:
    """Send ``sig``; the exit status, stderr and seconds until the process ended."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"edge deploy still running 30 s after signal {sig} (this pytest's own "
                    f"SIGINT handler: {signal.getsignal(signal.SIGINT)!r})")
    return proc.returncode, err, time.monotonic() - sent


# ---------------------------------------------------------------- device state


def known(releases: dict[str, Release]) -> set[str]:
    return {r.sha256 for r in releases.values()}


def assert_unlocked_and_next_deploy_clean(device: SSHDevice, release: Release,
                                          releases: dict[str, Release]) -> None:
    """The lock died with the killed deploy; the next deploy succeeds with no manual step
    and leaves no upload behind."""
    outcome, _ = _deploy(device, release)
    assert outcome.report.active and outcome.report.release == release.id
    assert_serving(device, release, known(releases))
    assert list((_work(device) / "incoming").iterdir()) == []


def agent_hold_is_busy(device: SSHDevice) -> str:
    """Try the deploy lock as a second deploy would, on the device itself: its error."""
    agent = next((_work(device) / "agent").glob("edge_agent-*.pyz"))
    done = subprocess.run([device.python, str(agent), "hold", str(_work(device)), "--by",
                           "the test"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode == 0:
        return ""
    lines = done.stdout.splitlines()
    return json.loads(lines[0]).get("error", "") if lines else done.stderr.strip()


# ---------------------------------------------------------------- every step x every signal


CASES = [(sig, step) for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)
         for step in STEPS]


@pytest.mark.parametrize(("sig", "step"), CASES,
                         ids=[f"{signal.Signals(s).name}-{step}" for s, step in CASES])
def test_a_signal_at_any_step_leaves_the_device_serving_and_unlocked(
    sig: int, step: str, ssh_device: SSHDevice, releases: dict[str, Release],
    serving_a: Release, tmp_path: Path,
) -> None:
    tag = f"{signal.Signals(sig).name}-{step}"  # a release of its own: never on the device yet
    new = releases[tag] = make_release(tmp_path, tag, pad_mb=BIG_MB if step == "upload" else 0)
    python, marker = pause_python(ssh_device, step)
    proc = start_edge(ssh_device, new, tmp_path, python=python)
    try:
        wait_for_step(proc, ssh_device, new, step, marker)
        with held_still(ssh_device, step == "upload"):
            busy = agent_hold_is_busy(ssh_device)  # the lock is held at this very step
        status, err, seconds = finish(proc, sig)
    finally:
        release_paused(marker)
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    if sig == signal.SIGKILL:
        assert status == -signal.SIGKILL
    else:
        assert seconds < 2.0, f"took {seconds:.1f} s to stop"
        assert err.strip().splitlines()[-1] == ("error: interrupted" if sig == signal.SIGINT
                                                else "error: terminated")
        assert status == (130 if sig == signal.SIGINT else 143)
    # stopped before the switch: the previous release serves; in prune: the switch is done
    assert_serving(ssh_device, new if step == "prune" else serving_a, known(releases))
    if step == "upload":
        assert not (_work(ssh_device) / "releases" / new.id).exists()
    assert_unlocked_and_next_deploy_clean(ssh_device, new, releases)
    # the lock was held at that very step, by that process, and died with it
    assert busy.startswith("device busy: another deploy (by ") and f"pid {proc.pid} " in busy
    assert agent_hold_is_busy(ssh_device) == ""


# ---------------------------------------------------------------- concurrent deploys


def test_a_second_deploy_a_prune_and_a_rollback_wait_for_none_and_change_nothing(
    ssh_device: SSHDevice, releases: dict[str, Release], serving_a: Release, tmp_path: Path,
) -> None:
    from devices.release import prune_releases, rollback

    b, c = releases["B"], releases["C"]
    python, marker = pause_python(ssh_device, "health")
    first = start_edge(ssh_device, b, tmp_path, python=python, keep=1)
    try:
        wait_for_step(first, ssh_device, b, "health", marker)
        second = start_edge(ssh_device, c, tmp_path, python=ssh_device.python, keep=1)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 3
        *_, line = err.strip().splitlines()  # (a warning may come first)
        assert err.count("error: ") == 1 and "Traceback" not in err
        assert line.startswith("error: ") and "device busy: another deploy (by " in line
        assert f"pid {first.pid} since " in line and "/.deploy.lock" in line
        with _ssh(ssh_device) as transport:
            with pytest.raises(DeviceError, match=r"device busy: another deploy \(by "):
                prune_releases(transport, python=ssh_device.python, work_dir=WORK, keep=1)
            with pytest.raises(DeviceError, match="device busy"):
                rollback(transport, python=ssh_device.python, work_dir=WORK)
        assert (_work(ssh_device) / "releases" / b.id / "model.onnx").exists()  # not pruned
        (marker.parent / "health.go").touch()  # the first deploy goes on, and succeeds
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        release_paused(marker)
        if first.poll() is None:
            first.kill()
    assert_serving(ssh_device, b, known(releases))
    assert_unlocked_and_next_deploy_clean(ssh_device, c, releases)


# ---------------------------------------------------------------- a full disk


@contextlib.contextmanager
def small_disk(device: SSHDevice, megabytes: int) -> Iterator[str]:
    """A fresh work dir on a real tmpfs of ``megabytes``, owned by the device user."""
    folder = device.home / ".edge-small"
    folder.mkdir(exist_ok=True)
    user = pwd.getpwnam(device.user)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,uid={user.pw_uid},"
                           f"gid={user.pw_gid},mode=0755", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:  # never a silent skip: CI runs as root, where this works
        pytest.fail(f"cannot mount a tmpfs for the disk-full test: {done.stderr.strip()}")
    try:
        yield "~/.edge-small"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _deploy_to(device: SSHDevice, release: Release, work_dir: str,
               wrap: Callable[[SSHTransport], FaultyTransport] = FaultyTransport) -> None:
    with _ssh(device) as inner:
        deploy(release.bundle_dir, release.bundle, wrap(inner), profile=PROFILE,
               python=device.python,
               work_dir=work_dir, rounds=ROUNDS, threads=1)


def _fill(folder: Path, name: str, leave: int) -> Path:
    """A file that leaves only ``leave`` bytes free on ``folder``'s file system."""
    stat = os.statvfs(folder)
    filler = folder / name
    with open(filler, "wb") as handle:
        handle.truncate(0)
        left = stat.f_bavail * stat.f_frsize - leave
        while left > 0:
            left -= handle.write(b"\0" * min(left, 1 << 20))
    return filler


class FillsTheDisk(FaultyTransport):
    """Another upload (abandoned) fills the disk right after the free-space check."""

    def __init__(self, inner: SSHTransport, incoming: Path) -> None:
        super().__init__(inner)
        self.incoming = incoming  # the device's incoming/, as this host sees it

    def put(self, local: Path, remote: str) -> None:
        if Path(remote).name.startswith("edge_agent"):
            return self.inner.put(local, remote)
        self.fired = True
        _fill(self.incoming, "0123456789abcdef.dead.partial", 20_000)
        return self.inner.put(local, remote)


def test_a_full_disk_is_named_and_the_next_deploy_needs_no_cleanup(
    ssh_device: SSHDevice, releases: dict[str, Release],
) -> None:
    a, b = releases["A"], releases["B"]
    with small_disk(ssh_device, 2) as work_dir:
        root = ssh_device.home / ".edge-small"
        _deploy_to(ssh_device, a, work_dir)
        before = _sha(root / "current" / "model.onnx")
        filler = _fill(root, "someone-elses-data", 50_000)  # not ours: never removed
        with pytest.raises(DeviceError, match=r"not enough space for release .* needs 1\.\d MB "
                                              r"in .*\.edge-small, the device has 0\.\d MB free"):
            _deploy_to(ssh_device, b, work_dir)
        assert filler.exists() and list((root / "incoming").iterdir()) == []
        filler.unlink()  # the user frees space

        incoming = root / "incoming"
        with pytest.raises(DeviceError, match=r"the device's disk is full: .* needs 0\.\d MB "
                                              r".*has 0\.0 MB free") as full:
            _deploy_to(ssh_device, b, work_dir, lambda inner: FillsTheDisk(inner, incoming))
        assert "\n" not in str(full.value)
        assert [p.name for p in (root / "incoming").iterdir()] == [
            "0123456789abcdef.dead.partial"]  # ours removed; the other one is left...
        assert os.readlink(root / "current") == f"releases/{a.id}"
        assert _sha(root / "current" / "model.onnx") == before

        _deploy_to(ssh_device, b, work_dir)  # ...until the next deploy, under its lock
        assert os.readlink(root / "current") == f"releases/{b.id}"
        assert _sha(root / "current" / "model.onnx") == b.sha256
        assert list((root / "incoming").iterdir()) == []


# ---------------------------------------------------------------- a corrupted upload


class CorruptsUploads(FaultyTransport):
    """Bytes change on the way: the uploaded file differs from what was sent."""

    def __init__(self, inner, device: SSHDevice) -> None:
        super().__init__(inner)
        self.device = device

    def put(self, local: Path, remote: str) -> None:
        self.inner.put(local, remote)
        if not Path(remote).name.startswith("edge_agent"):
            self.fired = True
            on_disk = self.device.home / Path(remote).relative_to(self.inner.home())
            data = bytearray(on_disk.read_bytes())
            data[len(data) // 2] ^= 0xFF
            on_disk.write_bytes(bytes(data))


def test_a_corrupted_upload_is_refused_and_cleaned(
    ssh_device: SSHDevice, releases: dict[str, Release], serving_a: Release,
) -> None:
    d = releases["D"]
    with _ssh(ssh_device) as inner, pytest.raises(DeviceError, match="checksum mismatch"):
        transport = CorruptsUploads(inner, ssh_device)
        deploy(d.bundle_dir, d.bundle, transport, profile=PROFILE,
               python=ssh_device.python, work_dir=WORK,
               rounds=ROUNDS, threads=1)
    assert transport.fired
    assert_serving(ssh_device, serving_a, known(releases))
    assert list((_work(ssh_device) / "incoming").iterdir()) == []
    assert not (_work(ssh_device) / "releases" / d.id / "model.onnx").exists()
    assert_unlocked_and_next_deploy_clean(ssh_device, d, releases)


# ---------------------------------------------------------------- a device that stops answering


class StallsMidUpload(FaultyTransport):
    """Every process of the device user is stopped (SIGSTOP) after the upload's first chunk:
    the connection stays open, nothing answers."""

    def __init__(self, inner: SSHTransport, uid: int) -> None:
        super().__init__(inner)
        self.uid = uid
        self.stopped: set[int] = set()

    def put(self, local: Path, remote: str) -> None:
        if Path(remote).name.startswith("edge_agent"):
            return self.inner.put(local, remote)
        put_midway(self.inner, local, remote, self.stall)

    def stall(self) -> None:
        self.fired = True
        self.stopped = _user_pids(self.uid)
        _send(self.stopped, signal.SIGSTOP)

    def resume(self) -> None:
        _send(self.stopped, signal.SIGCONT)


def test_a_device_that_stops_answering_mid_upload_fails_in_bounded_time(
    ssh_device: SSHDevice, releases: dict[str, Release], serving_a: Release, tmp_path: Path,
) -> None:
    new = releases["stall"] = make_release(tmp_path, "stall", pad_mb=16)
    inner = SSHTransport(parse_host(ssh_device.target), identity=ssh_device.identity,
                         known_hosts=ssh_device.known_hosts, timeout=5, io_timeout=3)
    transport = StallsMidUpload(inner, pwd.getpwnam(ssh_device.user).pw_uid)
    started = time.monotonic()
    try:
        with inner, pytest.raises(DeviceError, match="upload of .* failed .*timed out"):
            deploy(new.bundle_dir, new.bundle, transport, profile=PROFILE,
                   python=ssh_device.python,
                   work_dir=WORK, rounds=ROUNDS, threads=1)
        seconds = time.monotonic() - started
    finally:
        transport.resume()
    assert transport.fired and seconds < 30, f"{seconds:.1f} s"
    assert_serving(ssh_device, serving_a, known(releases))
    assert_unlocked_and_next_deploy_clean(ssh_device, new, releases)
