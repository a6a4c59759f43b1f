"""A pack's switch (several slots made current as one, ``releases.cmd_activate_pack``) cut
short: its journal, WORK_DIR/pack-switch.json, names each slot as it was before; ``undo`` puts
every one of them back (its ``current``, its history's length, a slot folder it made) and then
removes the journal. Run by every command that takes WORK_DIR's lock, and by ``releases``."""

import contextlib
import json
import os

from .errors import AgentError
from .files import fsync, unlink_quietly, write_json_atomic
from .slots import HISTORY, is_release_id, read_history

#: A pack's switch under way: undone unless it completed.
JOURNAL = "pack-switch.json"


def undo(work_dir):
    """A pack switch cut short: every slot it names back as it was, then the journal gone."""
    path = os.path.join(work_dir, JOURNAL)
    try:
        with open(path) as handle:
            entries = json.load(handle).get("slots", [])
    except (OSError, ValueError, AttributeError):
        entries = [] if not os.path.lexists(path) else None
    if entries is None:
        raise AgentError(f"cannot read {path}: remove it only after checking each model's "
                         "current release (edge releases --name NAME)", status=3)
    for entry in reversed(entries):
        _undo_slot(work_dir, entry)
    if os.path.lexists(path):
        unlink_quietly(path)
        fsync(work_dir)


def _undo_slot(work_dir, entry):
    folder = os.path.normpath(os.path.join(work_dir, str(entry.get("folder", "."))))
    if os.path.dirname(os.path.relpath(folder, work_dir)) not in ("", "slots") or \
            os.path.islink(folder) or not os.path.isdir(folder):
        return  # not a slot's folder (or never made): nothing of it to undo
    before = entry.get("active")
    link = os.path.join(folder, "current")
    if before is not None and is_release_id(before):
        tmp = os.path.join(folder, f".current-{os.getpid()}-{os.urandom(4).hex()}")
        os.symlink(os.path.relpath(os.path.join(work_dir, "releases", before), folder), tmp)
        os.replace(tmp, link)
    elif os.path.islink(link):
        os.unlink(link)
    history = read_history(folder)
    keep = entry.get("history") if isinstance(entry.get("history"), int) else len(history)
    if len(history) > keep:
        write_json_atomic(os.path.join(folder, HISTORY), {"version": 1,
                                                           "activations": history[:keep]})
    fsync(folder)
    if entry.get("made") and folder != work_dir:
        unlink_quietly(os.path.join(folder, HISTORY))
        with contextlib.suppress(OSError):
            os.rmdir(folder)
            fsync(os.path.dirname(folder))
