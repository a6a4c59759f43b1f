"""Releases on the device: install an uploaded file only if its sha256 matches, tell which
files a release lacks, switch ``current`` atomically (recording each switch in history.json),
roll back, list and prune releases. Switches, rollbacks and prunes hold WORK_DIR/.lock."""

import calendar
import json
import os
import shutil
import time

from .errors import AgentError
from .files import fsync, sha256_file, unlink_quietly, write_json_atomic
from .hold import free_bytes
from .runtimes import suffixes

HEX = frozenset("0123456789abcdef")
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
HISTORY = "history.json"
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
        if not _plain_name(name) or name.endswith(".partial"):
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
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return {"release": release, "present": present, "missing": missing,
            "free_bytes": free_bytes(args.work_dir), "names": names,
            "complete": bool(names) and _main_model(folder) is not None}


def cmd_activate(args):
    """Point WORK_DIR/current at WORK_DIR/releases/RELEASE atomically; record it in history."""
    release = _release_name(args.release)
    if args.artifact is not None and not _plain_name(args.artifact):
        raise AgentError(f"bad artifact name {args.artifact!r}", status=2)
    with _Lock(args.work_dir):
        if not _is_release_dir(args.work_dir, release):
            raise AgentError(f"release {release} is not installed", status=2)
        previous = _switch(args.work_dir, release, "deploy", args.artifact)
    return {"active": release, "previous": previous, "changed": previous != release}


def cmd_rollback(args):
    """Switch back to the previously active release (or --to RELEASE), atomically."""
    with _Lock(args.work_dir):
        state = _state(args.work_dir)
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
        previous = _switch(args.work_dir, target, "rollback", artifact)
    return {"active": target, "previous": previous, "changed": previous != target,
            "artifact": artifact}


def cmd_releases(args):
    """Installed releases (newest use first), the active one, the rollback target, history."""
    state = _state(args.work_dir)
    return {"active": state["active"], "previous": state["previous"],
            "releases": state["releases"], "history": state["history"]}


def cmd_prune(args):
    """Remove the least recently used inactive releases beyond --keep; never active/previous."""
    if args.keep < 1:
        raise AgentError("--keep must be >= 1", status=2)

    with _Lock(args.work_dir):
        state = _state(args.work_dir)
        protected = {state["active"], state["previous"]} - {None}
        kept, removed = [], []
        for info in state["releases"]:  # most recently used first
            name = info["release"]
            if name in protected or len(kept) < args.keep:
                kept.append(name)
                continue
            shutil.rmtree(os.path.join(args.work_dir, "releases", name))
            removed.append(name)
        if removed:
            fsync(os.path.join(args.work_dir, "releases"))
        stale = _remove_stale(args.work_dir)
    return {"kept": kept, "removed": removed, "stale_removed": stale}


def _is_release_id(text):
    """A release id: 1-64 lowercase hex digits (so never a path, an option or a dot name)."""
    return isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= HEX


def _plain_name(text):
    """A file or artifact name: letters, digits, ``._-``; no leading dot or dash; <= 64."""
    return (isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= NAME_CHARS
            and text[0] not in ".-")


def _release_name(text):
    if not _is_release_id(text):
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


def _active(work_dir):
    """The release ``current`` points to (None if no link or not a release)."""
    try:
        target = os.readlink(os.path.join(work_dir, "current"))
    except OSError:
        return None
    head, name = os.path.split(target.rstrip("/"))
    if os.path.basename(head) != "releases" or not _is_release_id(name):
        return None
    return name


def _switch(work_dir, release, action, artifact):
    """Atomically repoint ``current`` (symlink + rename) and record it; return the old release."""
    previous = _active(work_dir)
    history = _read_history(work_dir)  # unreadable: fail before anything changes
    _remove_stale_links(work_dir)
    tmp = os.path.join(work_dir, f".current-{os.getpid()}-{os.urandom(4).hex()}")
    os.symlink(os.path.join("releases", release), tmp)
    try:
        os.replace(tmp, os.path.join(work_dir, "current"))
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync(work_dir)
    if previous != release:
        now = time.time()
        history.append({"release": release, "artifact": artifact, "action": action,
                        "previous": previous, "unix": round(now, 3),
                        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
        write_json_atomic(os.path.join(work_dir, HISTORY),
                           {"version": 1, "activations": history[-HISTORY_MAX:]})
    return previous


def _state(work_dir):
    """Releases on disk joined with history: what is active, what rollback would pick."""
    history = _read_history(work_dir)
    active = _active(work_dir)
    last_active, last_used, artifacts = {}, {}, {}
    for entry in history:
        last_active[entry["release"]] = entry.get("time")
        last_used[entry["release"]] = _entry_epoch(entry)
        if entry.get("artifact"):
            artifacts[entry["release"]] = entry["artifact"]
    releases = []
    root = os.path.join(work_dir, "releases")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for name in names:
        if not _is_release_id(name) or not _is_release_dir(work_dir, name):
            continue  # not ours: never listed, never removed
        folder = os.path.join(root, name)
        files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
                 if os.path.isfile(os.path.join(folder, f))}
        installed = os.stat(folder).st_mtime
        used = max(installed, last_used.get(name, 0.0))
        model = _main_model(folder)
        releases.append({
            "release": name, "model": os.path.join(folder, model) if model else None,
            "complete": model is not None, "files": files, "size_bytes": sum(files.values()),
            "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(installed)),
            "last_active": last_active.get(name), "artifact": artifacts.get(name),
            "active": name == active, "_used": used})
    releases.sort(key=lambda r: (r["active"], r["_used"], r["release"]), reverse=True)
    for info in releases:
        del info["_used"]
    complete = {r["release"] for r in releases if r["complete"]}
    previous = next((e["release"] for e in reversed(history)
                     if e["release"] != active and e["release"] in complete), None)
    for info in releases:
        info["previous"] = info["release"] == previous
    return {"active": active, "previous": previous, "releases": releases,
            "history": history[-20:], "complete": complete, "artifacts": artifacts}


def _entry_epoch(entry):
    """When a history entry was made: its ``unix`` seconds, else its UTC ``time`` stamp."""
    if isinstance(entry.get("unix"), (int, float)):
        return float(entry["unix"])

    try:
        return float(calendar.timegm(time.strptime(entry.get("time"), "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return 0.0


def _read_history(work_dir):
    path = os.path.join(work_dir, HISTORY)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read {path}: {exc}", status=3) from None
    entries = data.get("activations", []) if isinstance(data, dict) else []
    return [e for e in entries if isinstance(e, dict)
            and _is_release_id(e.get("release"))]


def _remove_stale_links(work_dir):
    """Leftover ``.current-*`` links of a switch that died before its rename."""
    for name in os.listdir(work_dir):
        if name.startswith(".current-"):
            unlink_quietly(os.path.join(work_dir, name))


def _remove_stale(work_dir):
    """Uploads abandoned in incoming/ (older than an hour) and leftover switch links."""
    _remove_stale_links(work_dir)
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
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock
