"""Releases on the device: install an uploaded file only if its sha256 matches, tell which
files a release lacks, switch a slot's ``current`` atomically (recording each switch in the
slot's history.json), roll back, list and prune releases. Switches, rollbacks and prunes hold
WORK_DIR/.lock.

Slots (one per model, each its own ``current`` and history) are in ``slots``; releases (by
content) are shared by all of them, and a prune keeps every slot's current and previous release."""

import calendar
import json
import os
import shutil
import time

from . import packs
from .errors import AgentError
from .files import fsync, sha256_file, unlink_quietly, write_json_atomic
from .hold import free_bytes
from .kept import LISTED_MAX_BYTES, OBSERVED, kept_observed
from .runtimes import suffixes
from .slots import (
    DEFAULT_SLOT,
    HEX,
    HISTORY,
    active,
    existing,
    is_release_id,
    made_slot,
    plain_name,
    read_history,
    slot_dir,
    slot_name,
    slots,
    top,
)

HISTORY_MAX = 200  # activations kept in history.json
STALE_PARTIAL_S = 3600  # prune removes incoming/*.partial older than this


def cmd_install(args):
    """Move an uploaded file into place only if its sha256 matches (data synced first)."""
    _check_sha(args.sha256)
    actual = sha256_file(args.src)
    if actual != args.sha256:
        os.unlink(args.src)
        raise AgentError(f"checksum mismatch for {args.src}: got {actual}", status=3)
    fsync(args.src)  # the bytes are on disk before the name is
    os.makedirs(os.path.dirname(args.dest) or ".", exist_ok=True)
    os.replace(args.src, args.dest)
    fsync(os.path.dirname(args.dest) or ".")
    return {"installed": args.dest, "sha256": actual}


def cmd_verify(args):
    """Which of a release's files are missing or differ from their sha256 (so must be sent)."""
    release = _release_name(args.release)
    wanted = []
    for spec in args.file:
        name, _, sha = spec.partition("=")
        if not plain_name(name) or name.endswith(".partial"):
            raise AgentError(f"bad file name {name!r}", status=2)
        _check_sha(sha)
        wanted.append((name, sha))
    if not wanted:
        raise AgentError("verify needs at least one --file NAME=SHA256", status=2)
    folder = os.path.join(args.work_dir, "releases", release)
    present, missing = [], []
    for name, sha in wanted:
        path = os.path.join(folder, name)
        ok = os.path.isfile(path) and not os.path.islink(path) and _sha_or_none(path) == sha
        (present if ok else missing).append(name)
    names = sorted(set(os.listdir(folder)) - {OBSERVED}) if os.path.isdir(folder) else []
    return {"release": release, "present": present, "missing": missing,
            "free_bytes": free_bytes(args.work_dir), "names": names,
            "complete": bool(names) and _main_model(folder) is not None}


def cmd_activate(args):
    """Point WORK_DIR/current at WORK_DIR/releases/RELEASE atomically; record it in history."""
    release = _release_name(args.release)
    if args.artifact is not None and not plain_name(args.artifact):
        raise AgentError(f"bad artifact name {args.artifact!r}", status=2)
    slot = slot_name(args.slot)
    with _Lock(args.work_dir):
        if not _is_release_dir(args.work_dir, release):
            raise AgentError(f"release {release} is not installed", status=2)
        head = top(args.work_dir)
        folder = made_slot(args.work_dir, slot, head)
        adopted = folder == args.work_dir and slot != DEFAULT_SLOT and head[0] == "old"
        previous = _switch(args.work_dir, folder, slot, release, "deploy", args.artifact, head)
        others = [name for name, where in slots(args.work_dir)
                  if where != folder and active(where)]
    return {"active": release, "previous": previous, "changed": previous != release,
            "slot": slot, "others": others, "adopted": adopted}


def cmd_activate_pack(args):
    """Make several slots' releases current as one: a journal of every slot's release before
    is written first and removed last, so a switch cut short anywhere is undone whole by the
    next command that takes the lock (or lists releases)."""
    pairs = [_pair(text) for text in args.set]
    if not pairs or len({slot for slot, _, _ in pairs}) != len(pairs):
        raise AgentError("activate-pack needs --set SLOT=RELEASE[:ARTIFACT], one per slot",
                         status=2)
    with _Lock(args.work_dir):
        for _, release, _ in pairs:
            if not _is_release_dir(args.work_dir, release):
                raise AgentError(f"release {release} is not installed", status=2)
        before = [_before(args.work_dir, slot) for slot, _, _ in pairs]
        journal = os.path.join(args.work_dir, packs.JOURNAL)
        write_json_atomic(journal, {"version": 1, "slots": before})
        try:
            switched = [_switch_one(args.work_dir, *pair) for pair in pairs]
        except BaseException:
            packs.undo(args.work_dir)  # a full disk, a bad slot: every slot back, then say so
            raise
        unlink_quietly(journal)
        fsync(args.work_dir)
    return {"slots": switched}


def _pair(text):
    slot, _, rest = text.partition("=")
    release, _, artifact = rest.partition(":")
    if artifact and not plain_name(artifact):
        raise AgentError(f"bad artifact name {artifact!r}", status=2)
    return slot_name(slot), _release_name(release), artifact or None


def _before(work_dir, slot):
    """What undoing the switch of ``slot`` needs: its folder, release and history length."""
    folder = slot_dir(work_dir, slot)
    made = not os.path.lexists(folder)
    return {"slot": slot, "folder": os.path.relpath(folder, work_dir), "made": made,
            "active": None if made else active(folder),
            "history": 0 if made else len(read_history(folder)),
            "top": top(work_dir)[0]}


def _switch_one(work_dir, slot, release, artifact):
    head = top(work_dir)
    folder = made_slot(work_dir, slot, head)
    previous = _switch(work_dir, folder, slot, release, "pack", artifact, head)
    return {"active": release, "previous": previous, "changed": previous != release,
            "slot": slot}


def cmd_rollback(args):
    """Switch a slot in use back to its previously active release (or --to RELEASE),
    atomically; a rollback never makes a slot or takes one over."""
    slot = slot_name(args.slot)
    with _Lock(args.work_dir):
        folder = existing(args.work_dir, slot)
        state = _state(args.work_dir, slot, folder)
        if args.to is None:
            target = state["previous"]
            if target is None:
                raise AgentError("no previous release to roll back to (history has none "
                                 "installed); give --to RELEASE", status=2)
        else:
            target = _release_name(args.to)
            if target not in state["complete"]:
                raise AgentError(f"release {target} is not installed (installed: "
                                 f"{', '.join(sorted(state['complete'])) or 'none'})", status=2)
        artifact = state["artifacts"].get(target)
        previous = _switch(args.work_dir, folder, slot, target, "rollback", artifact,
                           top(args.work_dir))
    return {"active": target, "previous": previous, "changed": previous != target,
            "artifact": artifact, "slot": slot}


def cmd_releases(args):
    """Installed releases (newest use first); the slot's active release, rollback target and
    history; every slot's active and previous release."""
    slot = slot_name(args.slot)
    if os.path.lexists(os.path.join(args.work_dir, packs.JOURNAL)):
        with _Lock(args.work_dir):  # a pack switch cut short: undone before it is listed
            pass
    state = _state(args.work_dir, slot, slot_dir(args.work_dir, slot))
    return {"slot": state["name"], "active": state["active"], "previous": state["previous"],
            "releases": state["releases"], "history": state["history"],
            "slots": state["slots"]}


def cmd_prune(args):
    """Remove the least recently used inactive releases beyond --keep; never active/previous."""
    if args.keep < 1:
        raise AgentError("--keep must be >= 1", status=2)

    with _Lock(args.work_dir):
        state = _state(args.work_dir, DEFAULT_SLOT, args.work_dir)  # every slot's
        protected = {r for s in state["slots"] for r in (s["active"], s["previous"])} - {None}
        kept, removed = [], []
        for info in state["releases"]:  # most recently used first
            name = info["release"]
            if name in protected or len(kept) < args.keep:
                kept.append(name)
                continue
            shutil.rmtree(os.path.join(args.work_dir, "releases", name))  # never a link
            removed.append(name)
        if removed:
            fsync(os.path.join(args.work_dir, "releases"))
        stale = _remove_stale(args.work_dir)
    return {"kept": kept, "removed": removed, "stale_removed": stale}


def _release_name(text):
    if not is_release_id(text):
        raise AgentError(f"bad release name {text!r}: a release id is hex (0-9a-f)", status=2)
    return text


def _check_sha(text):
    if not (isinstance(text, str) and len(text) == 64 and set(text) <= HEX):
        raise AgentError(f"bad sha256 {text!r}: 64 lowercase hex digits", status=2)


def _sha_or_none(path):
    try:
        return sha256_file(path)
    except AgentError:
        return None


def _is_release_dir(work_dir, release):
    path = os.path.join(work_dir, "releases", release)
    return os.path.isdir(path) and not os.path.islink(path)


def _main_model(folder):
    """The release's main model file name (``model`` + a runtime's suffix: model.onnx), or
    None if incomplete."""
    for suffix in suffixes():
        if os.path.isfile(os.path.join(folder, "model" + suffix)):
            return "model" + suffix
    return None


def _switch(work_dir, folder, slot, release, action, artifact, head):
    """Atomically repoint the slot's ``current`` in ``folder`` (a relative symlink + rename)
    and record it in the slot's history (also when the release stays, if the slot's name is
    new there: WORK_DIR's own slot is claimed by its name); return the old release. ``head``:
    WORK_DIR's own slot as ``top`` read it."""
    previous = active(folder)
    history = read_history(folder)  # unreadable: fail before anything changes
    state, held = head if folder == work_dir else ("named", slot)
    name = held if slot == DEFAULT_SLOT else slot
    claims = folder == work_dir and slot != DEFAULT_SLOT and (state, held) != ("named", slot)
    # ``default`` on a device from before slots leaves it so (the next model takes it over)
    named = {} if slot == DEFAULT_SLOT and state == "old" else {"slot": name}
    _remove_stale_links(folder)
    tmp = os.path.join(folder, f".current-{os.getpid()}-{os.urandom(4).hex()}")
    os.symlink(os.path.relpath(os.path.join(work_dir, "releases", release), folder), tmp)
    try:
        os.replace(tmp, os.path.join(folder, "current"))
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync(folder)
    if previous != release or claims:
        now = time.time()
        history.append({"release": release, "artifact": artifact, "action": action,
                        "previous": previous, **named, "unix": round(now, 3),
                        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
        write_json_atomic(os.path.join(folder, HISTORY),
                           {"version": 1, "activations": history[-HISTORY_MAX:]})
    return previous


def _slot_state(slot, folder, complete):
    """A slot's active release, rollback target (its last other complete one) and history."""
    history = read_history(folder)
    now = active(folder)
    previous = next((e["release"] for e in reversed(history)
                     if e["release"] != now and e["release"] in complete), None)
    artifact = next((e.get("artifact") for e in reversed(history)
                     if e["release"] == now and e.get("artifact")), None)
    return {"slot": slot, "active": now, "previous": previous, "artifact": artifact,
            "history": history}


def _state(work_dir, slot, folder):
    """Releases on disk joined with every slot's history: what the slot runs, what its
    rollback would pick, what every slot runs."""
    root = os.path.join(work_dir, "releases")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    names = [n for n in names if is_release_id(n) and _is_release_dir(work_dir, n)]
    complete = {n for n in names if _main_model(os.path.join(root, n))}
    found = slots(work_dir, folder, slot)
    states = [_slot_state(name, where, complete) for name, where in found]
    mine = states[[where for _, where in found].index(folder)]
    last_active, last_used, artifacts = {}, {}, {}
    for entry in sorted((e for s in states for e in s["history"]), key=_entry_epoch):
        last_active[entry["release"]] = entry.get("time")
        last_used[entry["release"]] = _entry_epoch(entry)
        if entry.get("artifact"):
            artifacts[entry["release"]] = entry["artifact"]
    releases = [_release_info(root, name, mine, states, last_active, last_used, artifacts)
                for name in names]
    releases.sort(key=lambda r: (r["active"], r["_used"], r["release"]), reverse=True)
    room = LISTED_MAX_BYTES
    for info in releases:  # the newest first: what they kept, while the reply has room
        room -= info.pop("_observed_bytes")
        if room < 0 and info["observed"] is not None:
            info.update(observed=None, observed_omitted=True)
        del info["_used"]
    return {"name": mine["slot"], "active": mine["active"], "previous": mine["previous"],
            "releases": releases,
            "history": mine["history"][-20:], "complete": complete, "artifacts": artifacts,
            "slots": [{k: s[k] for k in ("slot", "active", "previous", "artifact")}
                      for s in states if s["active"] or s["history"] or s is mine]}


def _release_info(root, name, mine, states, last_active, last_used, artifacts):
    """One release directory as ``releases`` lists it (``_used``: for the order only)."""
    folder = os.path.join(root, name)
    files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
             if os.path.isfile(os.path.join(folder, f)) and f != OBSERVED}
    kept = kept_observed(folder) or {}
    installed = os.stat(folder).st_mtime
    model = _main_model(folder)
    return {
        "release": name, "model": os.path.join(folder, model) if model else None,
        "complete": model is not None, "files": files, "size_bytes": sum(files.values()),
        "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(installed)),
        "last_active": last_active.get(name), "artifact": artifacts.get(name),
        "active": name == mine["active"], "previous": name == mine["previous"],
        "current_in": [s["slot"] for s in states if s["active"] == name],
        "observed": kept.get("observed"), "observed_at": kept.get("time"),
        "_observed_bytes": len(json.dumps(kept)) if kept else 0,
        "_used": max(installed, last_used.get(name, 0.0))}


def _entry_epoch(entry):
    """When a history entry was made: its ``unix`` seconds, else its UTC ``time`` stamp."""
    if isinstance(entry.get("unix"), (int, float)):
        return float(entry["unix"])

    try:
        return float(calendar.timegm(time.strptime(entry.get("time"), "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return 0.0


def _remove_stale_links(folder):
    """Leftover ``.current-*`` links of a switch that died before its rename."""
    for name in os.listdir(folder):
        if name.startswith(".current-"):
            unlink_quietly(os.path.join(folder, name))


def _remove_stale(work_dir):
    """Uploads abandoned in incoming/ (older than an hour) and every slot's leftover switch
    links."""
    for _, folder in slots(work_dir):
        _remove_stale_links(folder)
    removed = []
    incoming = os.path.join(work_dir, "incoming")
    now = time.time()
    for name in sorted(os.listdir(incoming)) if os.path.isdir(incoming) else []:
        path = os.path.join(incoming, name)
        try:
            old = now - os.lstat(path).st_mtime > STALE_PARTIAL_S
        except OSError:
            continue
        if name.endswith(".partial") and old:
            unlink_quietly(path)
            removed.append(name)
    return removed


class _Lock:
    """An exclusive lock on WORK_DIR/.lock (switches, rollbacks and prunes never interleave)."""

    def __init__(self, work_dir):
        if not os.path.isdir(work_dir):
            raise AgentError(f"work dir {work_dir} does not exist", status=2)
        self.path = os.path.join(work_dir, ".lock")
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        packs.undo(os.path.dirname(self.path))
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock
