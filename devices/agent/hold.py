"""The deploy lock: one deploy (or rollback, or prune) at a time changes a device's releases.

``hold WORK_DIR --by TEXT --what TEXT`` takes a non-blocking flock on WORK_DIR/.deploy.lock,
writes who holds it, removes every upload left in incoming/ (safe: no other deploy runs),
prints one JSON line (the lock, the work dir's free bytes) and holds the lock until its stdin
closes. Its stdin is the host's SSH channel, so the lock dies with the host process, however it
dies (kill -9 included): the kernel drops a flock when its holder exits. A second ``hold``
meanwhile exits 3, naming the holder. ``space WORK_DIR`` reports the free bytes alone.

The per-command WORK_DIR/.lock of ``releases`` is another file: the two never deadlock.
"""

import json
import os
import sys
import time

from .errors import AgentError
from .files import unlink_quietly

LOCK_NAME = ".deploy.lock"


def cmd_hold(args):
    """Hold WORK_DIR/.deploy.lock until stdin closes (busy: exit 3 naming the holder)."""
    work = _work_dir(args.work_dir)
    path = os.path.join(work, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock_or_busy(fd, path)
        _write_holder(fd, args)
        removed = remove_partials(work)
        print(json.dumps({"held": path, "free_bytes": free_bytes(work),
                          "partials_removed": removed}), flush=True)
        sys.stdin.read()  # until the host closes the channel, or dies
    finally:
        os.close(fd)  # releases the lock, as the process's death would
    return {"released": path}


def cmd_space(args):
    """The free bytes of the work dir's file system (for an unprivileged user)."""
    work = _work_dir(args.work_dir)
    return {"work_dir": work, "free_bytes": free_bytes(work)}


def free_bytes(path):
    """Bytes an unprivileged user may still write on ``path``'s file system."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def remove_partials(work):
    """Every ``*.partial`` upload in incoming/ (called with the deploy lock held), but the
    agent's own (pushed before any lock is taken; ``prune`` removes it after an hour)."""
    incoming = os.path.join(work, "incoming")
    removed = []
    for name in sorted(os.listdir(incoming)) if os.path.isdir(incoming) else []:
        if name.endswith(".partial") and not name.startswith("edge_agent"):
            unlink_quietly(os.path.join(incoming, name))
            removed.append(name)
    return removed


def _work_dir(path):
    if not os.path.isdir(path):
        raise AgentError(f"work dir {path} does not exist", status=2)
    return path


def _lock_or_busy(fd, path):
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(path)
        raise AgentError(f"device busy: another {holder.get('what', 'deploy')} (by "
                         f"{holder.get('by', '?')} since {holder.get('since', '?')}) holds "
                         f"{path}; try again when it has finished", status=3) from None


def _write_holder(fd, args):
    record = {"what": args.what, "by": args.by, "pid": os.getpid(),
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(record) + "\n").encode())


def _holder(path):
    """Who holds the lock, as it wrote itself into the file (unreadable: {})."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
