"""What edge keeps of a command's output on a device is bounded before it is kept (issue 39:
"work on device-reported sizes is bounded before it starts"), against a real sshd: a device
that sends 80 MB on stdout, or keeps a command running past its time limit, is one DeviceError
(exit 3) while edge's memory stays put; a chatty stderr is read to the end (the command never
stalls on a full window) and its first MiB kept; an ordinary command's status, stdout and
stderr come back as they were."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator

import pytest

from devices.ssh import MAX_STDERR, MAX_STDOUT, SSHTransport, parse_host
from edge.core.errors import DeviceError
from tests.support.sshd import SSHDevice


@pytest.fixture
def ssh(ssh_device: SSHDevice) -> Iterator[SSHTransport]:
    with SSHTransport(parse_host(ssh_device.target), identity=ssh_device.identity,
                      known_hosts=ssh_device.known_hosts) as transport:
        yield transport


def test_an_ordinary_command_comes_back_whole(ssh: SSHTransport) -> None:
    done = ssh.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.status, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_device_that_sends_without_end_is_one_device_error(ssh: SSHTransport) -> None:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DeviceError, match=f"more than {MAX_STDOUT >> 20} MB of output"):
        ssh.run(["head", "-c", str(MAX_STDOUT + (16 << 20)), "/dev/zero"])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) >> 10
    assert grown_mb < 2 * (MAX_STDOUT >> 20), f"edge grew by {grown_mb} MB"
    assert ssh.run(["echo", "still here"]).stdout == "still here\n"  # the connection lives


def test_a_command_past_its_time_limit_is_one_device_error(ssh: SSHTransport) -> None:
    start = time.monotonic()
    with pytest.raises(DeviceError, match="still running at its time limit"):
        ssh.run(["sleep", "30"], timeout=1)
    assert time.monotonic() - start < 5


def test_a_chatty_stderr_is_drained_and_its_first_mib_kept(ssh: SSHTransport) -> None:
    done = ssh.run(["sh", "-c", "head -c 8000000 /dev/zero | tr '\\0' e >&2; echo done"])
    assert (done.status, done.stdout) == (0, "done\n")
    assert done.stderr == "e" * MAX_STDERR
