"""The agent's deploy lock (``hold``) and ``space``, run as the script they are on a device,
and the host's ``deploy_lock`` over the local transport (this python plays the device's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devices.agentfile import agent_file
from devices.device import prepare
from devices.lock import deploy_lock
from devices.transport import LocalTransport
from edge.core.errors import DeviceError


def _hold(work: Path, by: str = "tester@host pid 1") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(agent_file()), "hold", str(work), "--by", by],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _try_hold(work: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(agent_file()), "hold", str(work), "--by", "2nd"],
                          capture_output=True, text=True, check=False, timeout=60,
                          stdin=subprocess.DEVNULL)
    return done.returncode, json.loads(done.stdout.splitlines()[0])


def test_hold_keeps_the_lock_until_stdin_closes_and_names_its_holder(tmp_path: Path) -> None:
    (tmp_path / "incoming").mkdir()
    for name in ("abc.1.partial", "edge_agent-0123.pyz.2.partial", "keep.txt"):
        (tmp_path / "incoming" / name).write_bytes(b"x" * 10)
    first = _hold(tmp_path)
    assert first.stdout is not None and first.stdin is not None
    ready = json.loads(first.stdout.readline())
    assert ready["held"] == str(tmp_path / ".deploy.lock") and ready["free_bytes"] > 0
    assert ready["partials_removed"] == ["abc.1.partial"]  # the agent's own upload is kept
    assert sorted(p.name for p in (tmp_path / "incoming").iterdir()) == [
        "edge_agent-0123.pyz.2.partial", "keep.txt"]

    status, reply = _try_hold(tmp_path)
    assert status == 3
    assert reply["error"].startswith("device busy: another deploy (by tester@host pid 1 since ")
    assert f"holds {tmp_path}/.deploy.lock" in reply["error"]

    first.stdin.close()  # the host is done (or gone)
    assert first.wait(timeout=30) == 0
    assert _try_hold(tmp_path)[0] == 0


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    first = _hold(tmp_path)
    assert first.stdout is not None
    first.stdout.readline()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    status, reply = _try_hold(tmp_path)
    assert status == 0, reply


def test_space_reports_the_work_dirs_free_bytes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(agent_file()), "space", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    stat = os.statvfs(tmp_path)
    free = json.loads(done.stdout)["free_bytes"]
    assert abs(free - stat.f_bavail * stat.f_frsize) < 64 << 20


def test_deploy_lock_over_the_local_transport(tmp_path: Path) -> None:
    with LocalTransport(tmp_path / "device") as transport:
        device = prepare(transport, sys.executable, "~/.edge")
        (Path(device.work) / "incoming" / "left.partial").write_bytes(b"x")
        with deploy_lock(device) as held:
            assert held.partials_removed == ("left.partial",)
            with pytest.raises(DeviceError, match=r"device busy: another deploy \(by .* pid "
                                                  f"{os.getpid()} since "):
                with deploy_lock(device, "prune"):
                    pass
        with deploy_lock(device, "prune") as again:  # released
            assert again.path.endswith("/.edge/.deploy.lock")
