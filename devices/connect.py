"""Which device a command talks to, and how: ``--host``, else the profile's ``access.host``, else
the embedded local device. Everything here is checked before a connection is made."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.core.errors import UsageError
from edge.core.profile import Access, Profile

__all__ = ["DeviceTarget", "access_profile", "check_target_paths", "device_python",
           "opened_device", "profile_host", "transport_for"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceTarget:
    """Which device to reach and how to measure on it (shared by deploy, bench, probe, ...)."""

    host: str | None = None
    identity: Path | None = None
    known_hosts: Path | None = None
    trust_new_host: bool = False
    python: str | None = None
    runs: int = 50
    warmup: int = 5
    threads: int | None = None  # None: the profile's thread count
    provision: bool = False  # install the runtime into WORK/venv from host-fetched wheels


@dataclass(frozen=True, kw_only=True, slots=True)
class _AccessOnly:
    """Stands for a profile when none was given: only ``access`` (the local device, ~/.edge)."""

    id: str | None = None
    access: Access = Access()


def access_profile(ref: str | None) -> Profile | _AccessOnly:
    """The profile for access settings; without one, the defaults (local device, ~/.edge)."""
    if ref is None:
        return _AccessOnly()
    from edge.core.profile import load_profile

    return load_profile(ref)


def check_target_paths(target: DeviceTarget, profile: Any) -> None:
    """The work dir and device python, checked before any connection (see check_paths)."""
    from devices.transport import check_device_path

    check_device_path("work_dir", profile.access.work_dir)
    check_device_path("device python", target.python or profile.access.python)


def device_python(target: DeviceTarget, profile: Any, transport: Any) -> str:
    """--device-python, else this python for the local device, else the profile's."""
    return target.python or (sys.executable if transport.is_local else profile.access.python)


def transport_for(target: DeviceTarget, profile: Any) -> Any:
    """--host, else the profile's access.host (a user's own device), else the local device."""
    host = target.host or profile_host(profile)
    if host is None:
        from devices.transport import LocalTransport

        return LocalTransport()
    from devices.ssh import SSHTransport, parse_host

    for text in (host, profile.access.user or ""):
        if any(c.isspace() or not c.isprintable() for c in text):  # parse_host's $ allows "\n"
            raise UsageError(f"--host {host!r}: user and host names cannot contain spaces or "
                             "control characters")
    spec = parse_host(host, default_user=profile.access.user)
    return SSHTransport(spec, identity=target.identity, known_hosts=target.known_hosts,
                        trust_new_host=target.trust_new_host)


def profile_host(profile: Any) -> str | None:
    """USER@HOST:PORT from the profile's ``access`` when it names an SSH device, else None."""
    access = profile.access
    if access.transport != "ssh" or not access.host:
        return None
    host = f"[{access.host}]" if ":" in access.host else access.host
    return f"{access.user}@{host}:{access.port}" if access.user else f"{host}:{access.port}"


@contextlib.contextmanager
def opened_device(target: DeviceTarget, profile_ref: str | None) -> Iterator[Any]:
    """A ``devices.device.Device`` (agent pushed, runtimes probed) for commands that measure
    on it: --host, else the profile's access.host, else the embedded local device."""
    from devices.device import open_device

    profile = access_profile(profile_ref)
    check_target_paths(target, profile)
    with transport_for(target, profile) as transport:
        yield open_device(transport, python=device_python(target, profile, transport),
                          work_dir=profile.access.work_dir)
