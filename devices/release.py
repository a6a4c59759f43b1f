"""Releases on a device: install an artifact's files (only those the device lacks, each
sha256-checked), health-check a release, switch ``current`` to it, roll back, list and prune.

Device layout under the work dir (default ``~/.edge``)::

    agent/edge_agent-<sha12>.pyz    the agent, by content
    incoming/                       uploads in flight (never run from here)
    releases/<id16>/model.<ext>     one directory per artifact content, verified by sha256
    models/<sha16>.<ext>            models pushed for measurement (profile, perf, prefixes)
    current -> releases/<id16>      the first model's slot (``default``): switched atomically
    history.json                    after the health check and benchmark; every switch
    slots/<name>/current            every other model's slot (``edge deploy --name``, else
    slots/<name>/history.json       the model's stem): the same (releases are shared by
                                    content; a prune keeps every slot's current and previous)
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.device import Device, install_file, kind, megabytes, prepare
from devices.lock import deploy_lock
from devices.measure import observed_of
from devices.transport import Transport
from edge.core import progress
from edge.core.errors import DeviceError, UsageError
from edge.core.plugins import full_suffix
from edge.core.values import Artifact, Bundle, JsonValue, Observed

__all__ = ["DEFAULT_KEEP", "DEFAULT_SLOT", "HealthCheck", "ReleaseInfo", "ReleasesReport",
           "RollbackReport", "SlotInfo", "Transfer", "activate_release", "check_keep",
           "check_name", "health", "install_artifact", "is_active", "list_releases",
           "prune_quietly", "prune_releases", "release_files", "rollback", "slot_name_for",
           "slot_of_bundle"]

DEFAULT_KEEP = 3  # releases kept on the device after a deploy (active and previous always)
SPACE_MARGIN = 1_000_000  # bytes left free on the device beyond the files sent
_RELEASE = re.compile(r"[0-9a-f]{4,64}")
DEFAULT_SLOT = "default"  # the work dir's own current: where every release went before slots
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class Transfer(JsonValue):
    """What a deploy sent: artifact files (the agent itself is not counted)."""

    files_sent: int = 0
    bytes_sent: int = 0
    files_reused: int = 0  # already on the device with the right sha256: not sent
    bytes_reused: int = 0

    def __add__(self, other: Transfer) -> Transfer:
        return Transfer(files_sent=self.files_sent + other.files_sent,
                        bytes_sent=self.bytes_sent + other.bytes_sent,
                        files_reused=self.files_reused + other.files_reused,
                        bytes_reused=self.bytes_reused + other.bytes_reused)


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthCheck(JsonValue):
    """The agent loaded the release's model and ran it once, on the device."""

    release: str
    runtime: str
    load_ms: float
    run_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class RollbackReport(JsonValue):
    """What ``edge rollback`` switched."""

    target: str
    transport: str
    release: str  # current now
    previous: str | None  # current before
    changed: bool
    artifact: str | None = None
    health: HealthCheck | None = None
    name: str = DEFAULT_SLOT  # the model's slot


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseInfo(JsonValue):
    """One release directory on the device."""

    release: str
    complete: bool  # its main model file is installed
    active: bool
    previous: bool  # the rollback target
    size_bytes: int
    files: dict[str, int] = field(default_factory=dict)
    installed: str = ""  # UTC, the directory's mtime
    last_active: str | None = None
    artifact: str | None = None  # candidate id recorded when it was activated
    current_in: tuple[str, ...] = ()  # the slots whose current release it is
    #: what ran it the last time it was timed on the device (the agent keeps it in the
    #: release's folder), and when (UTC); None: never timed there since it was installed
    observed: Observed | None = None
    observed_at: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SlotInfo(JsonValue):
    """One model's slot on the device: what it runs, what its rollback would go back to."""

    name: str
    active: str | None
    previous: str | None
    artifact: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleasesReport(JsonValue):
    """``edge releases``: what is installed, what is current, the switch history."""

    target: str
    transport: str
    work_dir: str
    active: str | None
    previous: str | None
    releases: tuple[ReleaseInfo, ...]
    history: tuple[dict[str, Any], ...] = ()
    pruned: tuple[str, ...] = ()
    name: str | None = None  # the slot active/previous/history are of (None: several, none asked)
    slots: tuple[SlotInfo, ...] = ()  # every model's slot on the device


def install_artifact(device: Device, bundle_dir: Path, artifact: Artifact) -> tuple[str, Transfer]:
    """Send and install only the files the device lacks (by sha256) into the artifact's release;
    the main file goes last, so its presence means the release is complete. Returns the main
    model's path on the device and what was sent."""
    folder = f"{device.work}/releases/{artifact.release_id[:16]}"
    files = release_files(bundle_dir, artifact)
    main = files[-1][2]
    reply = device.call("verify", device.work, artifact.release_id[:16],
                        *[arg for _, sha, name in files for arg in ("--file", f"{name}={sha}")])
    missing = set(reply.get("missing", ()))
    _check_unchanged(device, artifact.release_id[:16], reply, missing)
    _check_space(device, artifact.release_id[:16], reply.get("free_bytes"),
                 sum(local.stat().st_size for local, _, name in files if name in missing))
    transfer = Transfer()
    for local, sha256, name in files:
        size = local.stat().st_size
        if name in missing:
            install_file(device, local, sha256, f"{folder}/{name}")
            transfer += Transfer(files_sent=1, bytes_sent=size)
        else:
            transfer += Transfer(files_reused=1, bytes_reused=size)
    return f"{folder}/{main}", transfer


def release_files(bundle_dir: Path, artifact: Artifact) -> list[tuple[Path, str, str]]:
    """(file in the bundle, its sha256, its name in the release) for each of the artifact's
    files, the main model file last (``model.<ext>``: its presence means the release is
    complete)."""
    files = [(bundle_dir / c.file, c.sha256, f"model{full_suffix(c.file)}")
             for c in artifact.companions]
    main = f"model{full_suffix(artifact.file)}"
    files.append((bundle_dir / artifact.file, artifact.sha256, main))
    return files


def _check_unchanged(device: Device, release: str, reply: dict, missing: set[str]) -> None:
    """An installed release (its main model there) is never given files under new names: it
    may be current or the rollback target, and a failed deploy must leave it as it was. (A file
    of its own names that went bad is put right: the same name, the content it was made with.)"""
    names = set(reply.get("names", ()))
    new = sorted(missing - names)
    if not reply.get("complete") or not new:
        return
    raise DeviceError(f"{device.label}: release {release} is installed there as "
                      f"{', '.join(sorted(names))}, not with {', '.join(new)}; an installed "
                      "release is never changed, and nothing was: edge releases --prune can "
                      "remove it once it is neither current nor the previous one")


def _check_space(device: Device, release: str, free: object, needed: int) -> None:
    """Refuse an upload the device has no room for, before a byte is sent."""
    if not isinstance(free, int) or not needed or needed + SPACE_MARGIN <= free:
        return
    raise DeviceError(f"{device.label}: not enough space for release {release}: it needs "
                      f"{megabytes(needed + SPACE_MARGIN)} in {device.work}, the device has "
                      f"{megabytes(free)} free; free some space there (edge releases --prune "
                      "1 removes old releases) and deploy again")


def health(device: Device, model: str, release: str) -> HealthCheck:
    """The gate before a switch: the agent loads the model and runs it once."""
    try:
        with progress.step(f"{device.label}: health check of release {release}"):
            reply = device.call("health", "--model", model, timeout=300)
    except DeviceError as exc:
        why = str(exc).removeprefix(f"{device.label}: ")
        raise DeviceError(f"{device.label}: release {release} failed its health check and was "
                          f"not activated; the current release is unchanged ({why})") from None
    return HealthCheck(release=release, runtime=reply["runtime"],
                       load_ms=float(reply["load_ms"]), run_ms=float(reply["run_ms"]))


def activate_release(device: Device, release: str, artifact: str,
                     name: str = DEFAULT_SLOT) -> str | None:
    """Switch the slot's ``current`` to the release; return the release that was current
    there before. A release current from before slots becomes this slot's previous one (the
    device's first model keeps the work dir's own ``current``): said in a warning."""
    reply = device.call("activate", device.work, release, "--artifact", artifact,
                        "--slot", name)
    if reply.get("adopted") and reply.get("previous") not in (None, release):
        log.warning("%s: release %s, current there from before slots (one model per device), "
                    "is now the previous release of %s: edge rollback --name %s returns to "
                    "it", device.label, reply["previous"], name, name)
    elif reply.get("previous") is None and reply.get("others"):
        log.warning("%s: %s is a new model there, beside %s (each keeps its own current release; "
                    "to replace one of them instead, deploy with --name NAME)", device.label,
                    name, ", ".join(reply["others"]))
    return reply.get("previous")


def is_active(device: Device, release: str, name: str | None = None) -> bool:
    """Whether the slot's ``current`` points at the release (no name: any slot's)."""
    if name is not None:
        return device.call("releases", device.work, "--slot", name).get("active") == release
    slots = device.call("releases", device.work).get("slots", ())
    return any(s.get("active") == release for s in slots)


def check_name(name: str) -> str:
    """A slot's name: lowercase letters, digits and ``._-``, at most 64, starting with a letter
    or digit (a UsageError otherwise)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(f"--name {name!r}: a model's name on the device is 1 to 64 lowercase "
                         "letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def slot_name_for(path: str) -> str:
    """The default slot of a model: its file's stem, lowercase, with what a name cannot hold
    made '-' (``default``, the work dir's own slot, becomes ``default-model``)."""
    stem = Path(path.replace("\\", "/")).stem.lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", stem).lstrip("._-")[:64] or "model"
    return "default-model" if name == DEFAULT_SLOT else name


def slot_of_bundle(bundle: Bundle) -> str:
    """The default slot of a bundle's model: the stem of the file the user gave (not of the
    reference ONNX edge made of it, which carries a content hash)."""
    return slot_name_for((bundle.origin or bundle.source).path)


def _pick_slot(state: dict, name: str | None, label: str) -> str:
    """The slot a command without --name means: the device's only one (or ``default`` on a
    device with none); several: a UsageError naming them."""
    only = _only_slot(state) if name is None else _known(state, name, label)
    if only is not None:
        return only
    used = [s["slot"] for s in state.get("slots", ()) if s.get("active")]
    raise UsageError(f"{label} holds {len(used)} models ({', '.join(used)}): give --name NAME")


def _known(state: dict, name: str, label: str) -> str:
    """``name`` when the device has that model's slot (``default``: any first model); else a
    UsageError naming the models there."""
    used = [s["slot"] for s in state.get("slots", ()) if s.get("active") or s.get("previous")]
    if name in used or (name == DEFAULT_SLOT and used):
        return name
    raise UsageError(f"{label}: no model {name} there (models: {', '.join(used) or 'none'}); "
                     "see edge releases")


def prune_quietly(device: Device, keep: int) -> tuple[str, ...]:
    """Prune after a successful switch; a failure here is a warning, not a failed deploy."""
    try:
        return tuple(device.call("prune", device.work, "--keep", str(keep))["removed"])
    except DeviceError as exc:
        log.warning("could not prune old releases: %s", exc)
        return ()


def rollback(transport: Transport, *, python: str, work_dir: str,
             to: str | None = None, name: str | None = None) -> RollbackReport:
    """Make the slot's previously active release (or ``to``, an installed id or unique prefix)
    current again, after its health check; record the switch in the slot's history. Without
    ``name``: the device's only slot (several: a UsageError naming them).

    A malformed or unknown release or name is a UsageError; nothing is changed then.
    """
    if to is not None:
        _check_release_text(to)
    if name is not None:
        check_name(name)
    device = prepare(transport, python, work_dir)
    with deploy_lock(device, "rollback"):
        return _rollback(device, to, name)


def _rollback(device: Device, to: str | None, asked: str | None) -> RollbackReport:
    transport = device.transport
    state = device.call("releases", device.work)
    name = _pick_slot(state, asked, transport.label)
    if name != state.get("slot"):
        state = device.call("releases", device.work, "--slot", name)
    active = state.get("active")
    target = _target(state, to, f"{transport.label} ({name})")
    info = next(r for r in state["releases"] if r["release"] == target)
    if target == active:
        return RollbackReport(target=transport.label, transport=kind(transport),
                              release=target, previous=active, changed=False,
                              artifact=info.get("artifact"), name=name)
    checked = health(device, info["model"], target)
    reply = device.call("rollback", device.work, "--to", target, "--slot", name)
    return RollbackReport(target=transport.label, transport=kind(transport),
                          release=reply["active"], previous=reply.get("previous"),
                          changed=bool(reply.get("changed")), artifact=reply.get("artifact"),
                          health=checked, name=name)


def _target(state: dict, to: str | None, label: str) -> str:
    """``to`` resolved, or the previous release (none: a UsageError)."""
    if to is not None:
        return _resolve(to, state, label)
    target = state.get("previous")
    if target is None:
        raise UsageError(f"{label}: no previous release to roll back to "
                         f"(active: {state.get('active') or 'none'}); see edge releases, then "
                         "give --to RELEASE")
    return target


def list_releases(transport: Transport, *, python: str, work_dir: str,
                  prune_keep: int | None = None, name: str | None = None) -> ReleasesReport:
    """The device's releases (most recently used first) and every slot; a slot's active,
    previous release and history: ``name``'s, else the device's only slot's (several: none,
    the slots say what each runs). With ``prune_keep`` first remove releases beyond that many
    that no slot runs or would roll back to."""
    if prune_keep is not None:
        check_keep(prune_keep)
    if name is not None:
        check_name(name)
    device = prepare(transport, python, work_dir)
    pruned: tuple[str, ...] = ()
    if prune_keep is not None:
        pruned = _prune(device, prune_keep)
    state = device.call("releases", device.work)
    slot = _only_slot(state) if name is None else _known(state, name, device.label)
    if slot is not None and slot != state.get("slot"):
        state = device.call("releases", device.work, "--slot", slot)
    return _releases_report(device, state, slot, pruned)


def _only_slot(state: dict) -> str | None:
    """The device's one slot in use (``default`` when none is); None when several are."""
    used = [s["slot"] for s in state.get("slots", ()) if s.get("active")]
    return used[0] if len(used) == 1 else DEFAULT_SLOT if not used else None


def _releases_report(device: Device, state: dict, slot: str | None,
                     pruned: tuple[str, ...]) -> ReleasesReport:
    """The agent's ``releases`` reply as a ReleasesReport (of ``slot``; None: of no slot)."""
    mine = slot is not None
    releases = tuple(ReleaseInfo(
        release=r["release"], complete=bool(r["complete"]), active=mine and bool(r["active"]),
        previous=mine and bool(r.get("previous")), size_bytes=int(r["size_bytes"]),
        files=dict(r.get("files", {})), installed=r.get("installed", ""),
        last_active=r.get("last_active"), artifact=r.get("artifact"),
        current_in=tuple(r.get("current_in", ())),
        observed=observed_of(r.get("observed"), "?"), observed_at=_text(r.get("observed_at")))
        for r in state["releases"])
    slots = tuple(SlotInfo(name=s["slot"], active=s.get("active"), previous=s.get("previous"),
                           artifact=s.get("artifact"))
                  for s in state.get("slots", ()) if s.get("active"))
    return ReleasesReport(target=device.label, transport=kind(device.transport),
                          work_dir=device.work, active=state.get("active") if mine else None,
                          previous=state.get("previous") if mine else None, releases=releases,
                          history=tuple(state.get("history", ())) if mine else (),
                          pruned=pruned, name=slot, slots=slots)


def _text(value: object) -> str | None:
    """A short text a device sent (a time stamp), None when it sent none or something else."""
    return value[:64] if isinstance(value, str) else None


def prune_releases(transport: Transport, *, python: str, work_dir: str,
                   keep: int = DEFAULT_KEEP) -> tuple[str, ...]:
    """Remove the least recently used releases beyond ``keep`` (never the active one or the
    rollback target); return the removed ids."""
    check_keep(keep)
    return _prune(prepare(transport, python, work_dir), keep)


def _prune(device: Device, keep: int) -> tuple[str, ...]:
    """Prune under the deploy lock: never a release another deploy is installing."""
    with deploy_lock(device, "prune"):
        return tuple(device.call("prune", device.work, "--keep", str(keep))["removed"])


def check_keep(keep: int) -> None:
    """At least one release is kept."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise UsageError(f"--keep {keep!r}: keep at least 1 release")


def _check_release_text(text: str) -> None:
    if not _RELEASE.fullmatch(text):
        raise UsageError(f"--to {text!r}: a release is 4 to 64 lowercase hex digits "
                         "(see edge releases)")


def _resolve(text: str, state: dict, label: str) -> str:
    """An installed, complete release id from an id or a unique prefix of one."""
    complete = [r["release"] for r in state["releases"] if r["complete"]]
    matches = [r for r in complete if r.startswith(text)]
    if text in complete:
        return text
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"{label}: release {text} is not installed (installed: "
                         f"{', '.join(complete) or 'none'})")
    raise UsageError(f"{label}: release prefix {text} is ambiguous ({', '.join(matches)})")
