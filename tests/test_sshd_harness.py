"""The sshd harness gives a real, reachable, strict SSH device."""

from __future__ import annotations

import shlex
from pathlib import Path

import paramiko
import pytest

from tests.support.sshd import SSHDevice


def _client(known_hosts: Path) -> paramiko.SSHClient:
    """A client that trusts only ``known_hosts`` (no system keys, no agent)."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def _connect(device: SSHDevice, identity: Path, known_hosts: Path) -> paramiko.SSHClient:
    """Connect to the device with exactly one key."""
    client = _client(known_hosts)
    try:
        client.connect(
            device.host, port=device.port, username=device.user, key_filename=str(identity),
            allow_agent=False, look_for_keys=False, timeout=10,
        )
    except BaseException:
        client.close()  # paramiko leaves the transport open when connect() raises
        raise
    return client


def _run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    """Run ``command``; return exit status, stdout and stderr."""
    _, out, err = client.exec_command(command, timeout=60)
    status = out.channel.recv_exit_status()
    return status, out.read().decode(), err.read().decode()


def test_login_and_device_python(ssh_device: SSHDevice) -> None:
    with _connect(ssh_device, ssh_device.identity, ssh_device.known_hosts) as client:
        assert _run(client, "whoami") == (0, "edgeuser\n", "")
        assert _run(client, "pwd")[1].strip() == str(ssh_device.home)
        code = "import numpy, onnxruntime, ai_edge_litert; print(onnxruntime.__version__)"
        status, out, err = _run(client, f"{ssh_device.python} -c {shlex.quote(code)}")
        assert (status, err) == (0, "") and out.strip() == "1.31.1"
    assert ssh_device.target == f"edgeuser@127.0.0.1:{ssh_device.port}"


def test_wrong_identity_is_refused(ssh_device: SSHDevice) -> None:
    with pytest.raises(paramiko.AuthenticationException):
        _connect(ssh_device, ssh_device.wrong_identity, ssh_device.known_hosts).close()


def test_changed_host_key_is_rejected(ssh_device: SSHDevice) -> None:
    with pytest.raises(paramiko.BadHostKeyException):
        _connect(ssh_device, ssh_device.identity, ssh_device.changed_known_hosts).close()
