"""Which device a command talks to, and how: ``--host``, else the profile's ``access.host``, else
the embedded local device. Everything here is checked before a connection is made.

``TRANSPORTS`` is the one registry of transports (``local``, ``ssh``): every command builds its
transport from a ``Reach`` through ``open_transport``. A kind profiles accept but nothing
implements yet (``adb``) is refused with one line naming what to do instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.ssh import HostSpec, SSHTransport, parse_host
from devices.transport import LocalTransport, Transport, check_device_path
from edge.core.errors import UsageError
from edge.core.profile import Access

__all__ = ["TRANSPORTS", "AccessOnly", "DeviceTarget", "Reach", "check_target_paths",
           "device_python", "open_transport", "profile_host", "reach_for", "transport_for"]


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
class Reach:
    """How to reach one device: the transport kind and, for SSH, the host and its keys."""

    kind: str = "local"
    host: HostSpec | None = None
    identity: Path | None = None
    known_hosts: Path | None = None
    trust_new_host: bool = False


def _local(reach: Reach) -> Transport:
    return LocalTransport()


def _ssh(reach: Reach) -> Transport:
    assert reach.host is not None
    return SSHTransport(reach.host, identity=reach.identity, known_hosts=reach.known_hosts,
                        trust_new_host=reach.trust_new_host)


#: transport kind -> builder: the only place a transport is made from a Reach
TRANSPORTS: Mapping[str, Callable[[Reach], Transport]] = {"local": _local, "ssh": _ssh}


def open_transport(reach: Reach) -> Transport:
    """The transport of ``reach.kind`` (not yet connected: transports connect lazily)."""
    build = TRANSPORTS.get(reach.kind)
    if build is None:
        raise UsageError(f"access.transport {reach.kind!r} is not implemented yet (edge reaches "
                         f"devices over {' or '.join(TRANSPORTS)}): give --host USER@HOST to "
                         "use SSH, or set the profile's access.transport to ssh or local")
    return build(reach)


@dataclass(frozen=True, kw_only=True, slots=True)
class AccessOnly:
    """Stands for a profile when none was given: only ``access`` (the local device, ~/.edge)."""

    id: str | None = None
    access: Access = Access()


def check_reachable(profile: Any) -> None:
    """A device edge cannot reach (``access.transport: none``) is refused by name."""
    if profile.access.transport == "none":
        raise UsageError(f"{profile.id} cannot be reached by edge (access.transport none: a "
                         "board without Linux or Python); build and verify its artifact with "
                         "edge optimize, and flash it with its vendor's tools")


def check_target_paths(target: DeviceTarget, profile: Any) -> None:
    """The device is reachable, and the work dir and device python well formed, checked before
    any connection (see check_paths)."""
    check_reachable(profile)
    check_device_path("work_dir", profile.access.work_dir)
    check_device_path("device python", target.python or profile.access.python)


def device_python(target: DeviceTarget, profile: Any, transport: Any) -> str:
    """--device-python, else this python for the local device, else the profile's."""
    return target.python or (sys.executable if transport.is_local else profile.access.python)


def reach_for(target: DeviceTarget, profile: Any) -> Reach:
    """--host, else the profile's access.host (a user's own device), else the profile's other
    transport kind (``local``; ``adb`` is refused when opened), else the local device."""
    check_reachable(profile)
    host = target.host or profile_host(profile)
    if host is None:
        kind = profile.access.transport
        return Reach(kind="local" if kind == "ssh" else kind)
    for text in (host, profile.access.user or ""):
        if any(c.isspace() or not c.isprintable() for c in text):  # parse_host's $ allows "\n"
            raise UsageError(f"--host {host!r}: user and host names cannot contain spaces or "
                             "control characters")
    return Reach(kind="ssh", host=parse_host(host, default_user=profile.access.user),
                 identity=target.identity, known_hosts=target.known_hosts,
                 trust_new_host=target.trust_new_host)


def transport_for(target: DeviceTarget, profile: Any) -> Transport:
    """The transport ``reach_for`` names, from the registry."""
    return open_transport(reach_for(target, profile))


def profile_host(profile: Any) -> str | None:
    """USER@HOST:PORT from the profile's ``access`` when it names an SSH device, else None."""
    access = profile.access
    if access.transport != "ssh" or not access.host:
        return None
    host = f"[{access.host}]" if ":" in access.host else access.host
    return f"{access.user}@{host}:{access.port}" if access.user else f"{host}:{access.port}"

