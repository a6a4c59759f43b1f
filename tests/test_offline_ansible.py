"""``edge deploy --inventory --engine ansible`` works offline (issue 39): in a network namespace
whose only network is its loopback, with an empty ``$HOME``, edge drives ansible-playbook
(ansible-runner, ansible-core) over ssh to a real sshd started inside that namespace; ``strace``
sees no connection but the device's address and port (no name-service query, no galaxy, no
telemetry), and ``$HOME``, the working directory and ``$TMPDIR`` stay empty
(``ANSIBLE_HOME`` is edge's private folder); nothing of edge's is left running (ansible's ssh
masters persist 60 s unless edge closes them)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.sshd import SSHDaemon, SSHDevice, sshd_config_text
from tests.test_offline import BUNDLE, NETWORK, _env, _folders, _listing

#: The port and address of a connection (strace's sockaddr).
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
ADDRESS = re.compile(r'inet_(?:addr|pton)\((?:AF_INET6?, )?"([^"]+)"')


@contextlib.contextmanager
def _namespace() -> Iterator[str]:
    """A named network namespace with its loopback up, removed with what runs in it."""
    for tool in ("ip", "strace"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed to prove edge works offline; install it")
    name = f"edge-offline-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
                       check=True, capture_output=True)
        yield name
    finally:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


@contextlib.contextmanager
def _sshd_inside(namespace: str, device: SSHDevice, where: Path) -> Iterator[None]:
    """The device's sshd (its keys, its user) listening inside ``namespace`` too."""
    keys = device.identity.parent
    config = where / "sshd_config"
    config.write_text(sshd_config_text(
        address="127.0.0.1", port=device.port, host_key=keys / "host_ed25519",
        pid_file=where / "sshd.pid", authorized_keys=keys / "authorized_keys"))
    daemon = SSHDaemon(config, prefix=("ip", "netns", "exec", namespace))
    try:
        if not daemon.listening("127.0.0.1", device.port, 15):
            pytest.fail("sshd did not start in the namespace: " + " / ".join(daemon.log))
        yield
    finally:
        daemon.stop()


def _running_in(namespace: str) -> set[str]:
    """The names of the processes in ``namespace``."""
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                          text=True).stdout.split()
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
    return names


def _inventory(path: Path, device: SSHDevice) -> Path:
    host = {"ansible_host": device.host, "ansible_port": device.port,
            "ansible_user": device.user, "ansible_ssh_private_key_file": str(device.identity),
            "ansible_python_interpreter": device.python}
    path.write_text(yaml.safe_dump({"all": {"hosts": {"dev1": host}}}))
    return path


def _connections(trace: str) -> set[tuple[str, int]]:
    """(address, port) of every internet connection or datagram the trace shows."""
    found = set()
    for line in trace.splitlines():
        if NETWORK.search(line):
            port, address = PORT.search(line), ADDRESS.search(line)
            found.add((address.group(1), int(port.group(1))) if port and address else (line, 0))
    return found


def test_a_fleet_deploy_through_ansible_reaches_only_its_device(ssh_device: SSHDevice,
                                                                tmp_path: Path) -> None:
    folders = _folders(tmp_path)
    bundle = folders["out"] / "tiny.bundle"
    shutil.copytree(BUNDLE, bundle)
    hosts = _inventory(tmp_path / "hosts.yml", ssh_device)
    trace = tmp_path / "strace.txt"
    with _namespace() as namespace, _sshd_inside(namespace, ssh_device, tmp_path):
        done = subprocess.run(
            ["ip", "netns", "exec", namespace, "strace", "-f", "-qq", "--seccomp-bpf", "-o",
             str(trace), "-e", "trace=connect,sendto,sendmsg", sys.executable, "-m", "edge",
             "deploy", str(bundle), "--inventory", str(hosts), "--engine", "ansible",
             "--known-hosts", str(ssh_device.known_hosts), "--no-on-device", "--runs", "3",
             "--json"], cwd=folders["cwd"], env=_env(folders), capture_output=True, text=True,
            timeout=600)
        left = _running_in(namespace) - {"sshd"}
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [h["status"] for h in json.loads(done.stdout)["hosts"]] == ["ok"], done.stdout
    assert _connections(trace.read_text()) == {("127.0.0.1", ssh_device.port)}
    assert left == set(), "edge left these running (ansible's ssh masters are closed)"
    for name in ("home", "cwd", "tmp"):
        assert _listing(folders[name]) == [], f"written in {name}: {_listing(folders[name])}"
