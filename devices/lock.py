"""The device-wide deploy lock, held from the host for a whole deploy (or rollback, or prune).

``deploy_lock`` starts the agent's ``hold`` on its own channel: it takes WORK/.deploy.lock,
removes uploads an interrupted deploy left in incoming/, reports the free space, and keeps the
lock until the host closes its stdin -- or dies, or loses the connection: the OS lock dies with
the agent process, so no stale lock ever needs a human. A second deploy meanwhile fails at
once with exit 3, naming the holder.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from devices.device import Device
from edge.core.errors import DeviceError

__all__ = ["Held", "deploy_lock"]

READY_TIMEOUT = 60.0  # the agent starts, takes the lock (never waits for it) and answers


@dataclass(frozen=True, kw_only=True, slots=True)
class Held:
    """The lock taken: its path, the work dir's free bytes, the leftovers removed."""

    path: str
    free_bytes: int
    partials_removed: tuple[str, ...] = ()


@contextlib.contextmanager
def deploy_lock(device: Device, what: str = "deploy") -> Iterator[Held]:
    """Hold the device's deploy lock for the ``with`` block (busy: a DeviceError, exit 3)."""
    session = device.transport.start(
        [device.python, device.agent, "hold", device.work, "--by", _holder(), "--what", what],
        timeout=READY_TIMEOUT)
    try:
        held = _ready(device, session.readline())
        yield held
    finally:
        session.close()


def _ready(device: Device, line: str) -> Held:
    """The agent's first line: the lock taken, or why not."""
    try:
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ValueError(reply)
    except ValueError:
        raise DeviceError(f"{device.label}: the agent could not take the deploy lock "
                          f"({line.strip() or 'no answer'})") from None
    if "error" in reply:
        raise DeviceError(f"{device.label}: {reply['error']}")
    return Held(path=str(reply["held"]), free_bytes=int(reply["free_bytes"]),
                partials_removed=tuple(reply.get("partials_removed", ())))


def _holder() -> str:
    """Who takes the lock, as a second deploy is told: user@host pid N."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"
