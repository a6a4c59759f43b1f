"""The inventory vars edge reads, checked, for one host: ``FleetHost``.

Read: ``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``,
``ansible_python_interpreter``, ``edge_profile`` (or ``profile``), ``edge_work_dir``;
``ansible_connection`` must be ssh if set. Other vars are kept in ``vars`` and ignored.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.core.errors import UsageError

__all__ = ["FleetHost", "canonical", "fleet_host", "is_ipv6"]

_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9._-]{0,252})$")
_SSH_CONNECTIONS = ("ssh", "paramiko", "smart")
_AUTO_PYTHON = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_ALIASES = {"profile": "edge_profile", "ansible_ssh_host": "ansible_host",
            "ansible_ssh_port": "ansible_port", "ansible_ssh_user": "ansible_user",
            "ansible_private_key_file": "ansible_ssh_private_key_file"}


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetHost:
    """One inventory host with the vars edge uses, validated (None: not set)."""

    name: str
    address: str  # ansible_host, else the inventory name
    port: int | None = None
    user: str | None = None
    identity: Path | None = None
    python: str | None = None
    profile: str | None = None
    work_dir: str | None = None
    groups: tuple[str, ...] = ()  # every group it is in, directly or through children
    vars: dict[str, Any] = field(default_factory=dict)  # all merged vars, as Ansible merges them


def canonical(values: dict[str, Any]) -> dict[str, Any]:
    """Aliases renamed to the names edge reads (the canonical name wins within one scope), so
    that a more specific scope's alias beats a broader scope's canonical var."""
    out = dict(values)
    for alias, name in _ALIASES.items():
        if alias in out:
            value = out.pop(alias)
            out.setdefault(name, value)
    return out


def fleet_host(where: str, name: str, groups: tuple[str, ...], raw: dict[str, Any],
               v: dict[str, Any]) -> FleetHost:
    """The host ``name`` from its merged vars: ``raw`` as written, ``v`` with aliases renamed
    scope by scope (``canonical``). UsageError (naming ``where``) for a var edge cannot use."""
    connection = v.get("ansible_connection")
    if connection is not None and connection not in _SSH_CONNECTIONS:
        raise UsageError(f"{where}: ansible_connection {connection!r} is not supported "
                         "(edge deploys over ssh)")
    address = _text(v.get("ansible_host", name), where, "ansible_host")
    if not (_ADDRESS.match(address) or is_ipv6(address)):
        raise UsageError(f"{where}: {address!r} is not a valid host name or address "
                         "(set ansible_host)")
    python = _optional(v, "ansible_python_interpreter", where)
    identity = _optional(v, "ansible_ssh_private_key_file", where)
    return FleetHost(name=name, address=address, port=_port(v.get("ansible_port"), where),
                     user=_user(v.get("ansible_user"), where),
                     identity=Path(identity).expanduser() if identity is not None else None,
                     python=None if python in _AUTO_PYTHON else python,
                     profile=_optional(v, "edge_profile", where),
                     work_dir=_optional(v, "edge_work_dir", where), groups=groups, vars=raw)


def is_ipv6(text: str) -> bool:
    """Whether ``text`` is an IPv6 address."""
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def _port(port: Any, where: str) -> int | None:
    if port is None:
        return None
    port = int(port) if isinstance(port, str) and port.isdigit() else port
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise UsageError(f"{where}: ansible_port {port!r} is not a port number (1-65535)")
    return port


def _user(user: Any, where: str) -> str | None:
    if user is None:
        return None
    user = _text(user, where, "ansible_user")
    if not _USER.match(user):
        raise UsageError(f"{where}: ansible_user {user!r} is not a plain user name")
    return user


def _optional(v: dict[str, Any], key: str, where: str) -> str | None:
    return _text(v[key], where, key) if v.get(key) is not None else None


def _text(value: Any, where: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or str(value) == "":
        raise UsageError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return str(value)
