"""A device edge talks to: its transport, its python, its work dir and the agent pushed there.

``open_device`` prepares the work dir, pushes the agent (one zipapp, named by its content) when
that version is not there yet, checks the device's python and probes its runtimes; ``Device.call``
runs one agent command and returns its JSON. Models pushed for measurement are stored by content
under ``<work>/models/`` (``store``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from devices.agentfile import agent_file
from devices.replies import check_reply
from devices.transport import Transport, check_device_path, expand_home
from edge.core import progress
from edge.core.errors import DeviceError
from edge.core.model import sha256_file
from edge.core.plugins import full_suffix

__all__ = ["Device", "check_paths", "install_file", "kind", "megabytes", "open_device", "prepare",
           "store"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """A prepared device: where the agent is and which runtimes it found."""

    transport: Transport
    python: str
    work: str
    agent: str
    runtimes: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """The transport's label: ``local:<dir>`` or ``ssh://user@host:port``."""
        return self.transport.label

    def call(self, *args: str, timeout: float = 600.0) -> dict:
        """Run an agent command; its JSON, checked against the command's schema
        (devices.replies), or a DeviceError with the agent's message."""
        done = self.transport.run([self.python, self.agent, *args], timeout=timeout)
        try:
            reply = json.loads(done.stdout.strip().splitlines()[-1])
            if not isinstance(reply, dict):
                raise ValueError(reply)
        except (IndexError, ValueError, RecursionError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            how = "was killed" if done.status < 0 or done.status > 128 else "failed"
            raise DeviceError(f"{self.label}: agent {args[0]} {how} "
                              f"(exit {done.status}): {tail}") from None
        if done.status != 0 or "error" in reply:
            raise DeviceError(f"{self.label}: {str(reply.get('error', 'agent failed'))[:500]}")
        return check_reply(args[0], reply, self.label)


def open_device(transport: Transport, *, python: str, work_dir: str) -> Device:
    """Prepare the work dir, push the agent if missing, check python, probe runtimes."""
    with progress.step(f"{transport.label}: preparing the device"):
        device = prepare(transport, python, work_dir)
        probe = device.call("probe", timeout=120)
    return replace(device, runtimes=frozenset(probe.get("runtimes", {})))


def check_paths(*, python: str, work_dir: str) -> None:
    """Refuse a work dir or device python that is empty, has control characters (newline,
    tab, ...) or starts with ``~user``. Anything else is used literally: every remote command
    is quoted, so ``;``, ``$(...)``, backticks, quotes and spaces are just characters."""
    check_device_path("work_dir", work_dir)
    check_device_path("device python", python)


def prepare(transport: Transport, python: str, work_dir: str) -> Device:
    """The device's work dir made, the agent there, its python checked (no probe)."""
    check_paths(python=python, work_dir=work_dir)
    home = transport.home()
    work = expand_home(work_dir, home, relative=True)
    python = expand_home(python, home)
    for sub in ("agent", "incoming", "releases"):
        transport.mkdir(f"{work}/{sub}")
    local = agent_file()
    agent = f"{work}/agent/{local.name}"
    if not transport.exists(agent):
        _upload_atomic(transport, local, agent, work)
    _check_python(transport, python)
    return Device(transport=transport, python=python, work=work, agent=agent)


def _check_python(transport: Transport, python: str) -> None:
    done = transport.run([python, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                         timeout=60)
    if done.status != 0 or done.stdout.strip() != "True":
        raise DeviceError(f"{transport.label}: no usable python at '{python}' (need >= 3.8); "
                          "set access.python in the profile or pass --device-python")


def _upload_atomic(transport: Transport, local: Path, remote: str, work: str) -> None:
    tmp = f"{work}/incoming/{Path(remote).name}.{secrets.token_hex(4)}.partial"
    transport.put(local, tmp)
    done = transport.run(["mv", "-f", "--", tmp, remote], timeout=60)
    if done.status != 0:
        raise DeviceError(f"{transport.label}: cannot move the agent into place: "
                          f"{(done.stderr.strip().splitlines() or ['mv failed'])[-1]}")


def store(device: Device, local: Path, stem: str | None = None) -> tuple[str, bool]:
    """``local``'s path under the device's models/ (named ``stem`` or by its sha256), pushed
    sha256-checked unless already there; and whether this call pushed it."""
    sha256 = sha256_file(local)
    remote = f"{device.work}/models/{stem or sha256[:16]}{full_suffix(local.name)}"
    uploaded = not device.transport.exists(remote)
    if uploaded:
        install_file(device, local, sha256, remote)
    return remote, uploaded


def install_file(device: Device, local: Path, sha256: str, final: str) -> None:
    """Upload to incoming/ under a fresh name, then the agent checks the sha256 and renames.

    A failed upload's partial file is removed (best effort: a dropped connection cannot, and
    the next deploy removes it), and a full disk is named as such."""
    tmp = f"{device.work}/incoming/{sha256[:16]}.{secrets.token_hex(4)}.partial"
    try:
        device.transport.put(local, tmp)
    except DeviceError as exc:
        _discard(device, tmp)
        raise _explained(device, exc, local) from None
    device.call("install", tmp, final, "--sha256", sha256)


def _discard(device: Device, tmp: str) -> None:
    """Remove an upload's partial file, if the device still answers (within seconds)."""
    try:
        device.transport.run(["rm", "-f", "--", tmp], timeout=10)
    except DeviceError:
        pass  # the connection is gone: the next deploy removes it (under its lock)


def _explained(device: Device, exc: DeviceError, local: Path) -> DeviceError:
    """A failed upload, said to be a full disk when the device has less room than the file."""
    try:
        free = int(device.call("space", device.work, timeout=10)["free_bytes"])
    except (DeviceError, KeyError, TypeError, ValueError):
        return exc
    size = local.stat().st_size
    if free >= size:
        return exc
    return DeviceError(f"{device.label}: the device's disk is full: {local.name} needs "
                       f"{megabytes(size)} in {device.work}, the device has {megabytes(free)} "
                       f"free ({str(exc).removeprefix(device.label + ': ')})")


def megabytes(size: int) -> str:
    """Bytes in MB, as the disk-space messages say them."""
    return f"{size / 1e6:.1f} MB"


def kind(transport: Transport) -> str:
    """``local`` or ``ssh``, as reports name a transport."""
    return "local" if transport.is_local else "ssh"
