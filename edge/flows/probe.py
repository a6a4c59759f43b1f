"""``edge devices probe``: write a profile from a live device, for the user to extend.

The device is reached as ``edge deploy`` reaches it (SSH with ``--host``, else the embedded
local device). Facts come from the agent's ``probe`` and read-only commands with a fixed argv
(devices.gather); the profile is built from them (edge.flows.probe_build), each field read or
estimated and saying which in a comment on its line and in the profile's ``source:`` text,
which stays with the profile (and with every bundle made for it); the commented YAML is drawn
by edge.flows.probe_yaml and written atomically here.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from pathlib import Path

from devices.connect import AccessOnly, DeviceTarget, transport_for
from devices.cpus import normalize_arch
from devices.gather import gather
from devices.ssh import HostSpec, parse_host
from edge.core.errors import UsageError
from edge.flows.probe_build import WORK_DIR, build, profile_id_from
from edge.flows.probe_result import ProbeResult
from edge.flows.probe_yaml import render_profile

__all__ = [
    "DeviceTarget",
    "ProbeResult",
    "check_profile_id",
    "normalize_arch",
    "probe_device",
    "probe_to_file",
    "profile_id_from",
    "render_profile",
    "write_profile",
]

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def check_profile_id(profile_id: str) -> str:
    """``profile_id`` if it is a valid profile id, else UsageError."""
    if not ID_PATTERN.match(profile_id):
        raise UsageError(f"--id {profile_id!r}: a profile id is lowercase letters, digits, '.', "
                         "'_' and '-', starting with a letter or digit")
    return profile_id


def probe_device(target: DeviceTarget, *, profile_id: str | None = None) -> ProbeResult:
    """Connect to the device (as ``edge deploy`` would), read what it is, build a profile.

    ``target.host`` None is the embedded local device. Only ``host``, ``identity``,
    ``known_hosts``, ``trust_new_host`` and ``python`` of the target are used. Writes nothing
    locally; on the device, only the agent under ``~/.edge`` (as deploy does).
    """
    if profile_id is not None:
        check_profile_id(profile_id)
    spec = _spec(target)
    with transport_for(target, AccessOnly()) as transport:
        python = target.python or (sys.executable if transport.is_local else "python3")
        facts = gather(transport, python=python, work_dir=WORK_DIR)
    return build(facts, spec, profile_id)


def write_profile(result: ProbeResult, out: Path, *, force: bool = False) -> Path:
    """Write the profile atomically; refuse to replace an existing file unless ``force``.

    The text is validated (parsed back and checked by edge.core.profile) before anything is written.
    """
    out = Path(out)
    text = render_profile(result)
    if out.is_dir():
        raise UsageError(f"{out} is a directory: give a file name, e.g. {out}/my-device.yaml")
    if out.exists() and not force:
        raise UsageError(f"{out} exists: choose another -o, or remove it first")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"-o {out}: directory {parent} does not exist")
    tmp = parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            os.replace(tmp, out)
        else:
            _link_exclusive(tmp, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return out


def probe_to_file(target: DeviceTarget, out: Path | None = None, *,
                  profile_id: str | None = None, force: bool = False) -> tuple[ProbeResult, Path]:
    """``edge devices probe``: check the id and -o first, probe, write; (result, path written).

    ``out`` None writes ``<id>.yaml`` in the current directory.
    """
    if profile_id is not None:
        check_profile_id(profile_id)
    planned = Path(out) if out is not None else (
        Path(f"{profile_id}.yaml") if profile_id is not None else None)
    if planned is not None and planned.exists() and not force:  # fail before connecting
        raise UsageError(f"{planned} exists: choose another -o, or remove it first")
    result = probe_device(target, profile_id=profile_id)
    path = write_profile(result, Path(out) if out is not None else
                         Path(f"{result.profile.id}.yaml"), force=force)
    return result, path


def _spec(target: DeviceTarget) -> HostSpec | None:
    """The HostSpec of an SSH target (user, host, port), None for the local device."""
    return None if target.host is None else parse_host(target.host)


def _link_exclusive(tmp: Path, out: Path) -> None:
    """Publish ``tmp`` as ``out`` only if ``out`` does not exist (no race with another writer)."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise UsageError(f"{out} exists: choose another -o, or remove it first") from None
    except OSError:  # no hard links on this filesystem
        if out.exists():
            raise UsageError(f"{out} exists: choose another -o, or remove it first") from None
        os.replace(tmp, out)

