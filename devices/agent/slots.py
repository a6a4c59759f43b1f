"""Slots on the device: one per model, each with its ``current`` link and its history.

The first model on a device has WORK_DIR's own (as every release had before slots: a device
with one model looks as it always did); every other model has WORK_DIR/slots/NAME. Each history
entry records its slot's name (``"slot"``: a name, or null for ``default`` on a fresh work dir);
WORK_DIR's history with no entry carrying that key is from before slots, and the first slot a
deploy switches there takes it over (its release becomes that slot's previous one). ``default``
always means WORK_DIR's own slot. Names are lowercase (one slot per name on any filesystem).
Resolution never follows a link: a slot directory that is a link or a file is refused.
"""

import json
import os

from .errors import AgentError

HEX = frozenset("0123456789abcdef")
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
SLOT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")
HISTORY = "history.json"
DEFAULT_SLOT = "default"  # WORK_DIR's own current and history.json, whatever model it holds


def is_release_id(text):
    """A release id: 1-64 lowercase hex digits (so never a path, an option or a dot name)."""
    return isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= HEX


def plain_name(text):
    """A file or artifact name: letters, digits, ``._-``; no leading dot or dash; <= 64."""
    return (isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= NAME_CHARS
            and text[0] not in ".-")


def slot_name(text):
    """A slot's name: ``default`` when none is given, else lowercase letters, digits, ``._-``
    (at most 64, no leading dot or dash)."""
    if text is None:
        return DEFAULT_SLOT
    if not (plain_name(text) and set(text) <= SLOT_CHARS):
        raise AgentError(f"bad slot name {text!r}: lowercase letters, digits and ._- (at most "
                         "64, no leading dot or dash)", status=2)
    return text


def read_history(folder):
    """A slot's activations (entries naming a release id); unreadable: exit 3."""
    path = os.path.join(folder, HISTORY)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read {path}: {exc}; repair or remove it (it is the history "
                         "of the work dir's own slot)", status=3) from None
    entries = data.get("activations", []) if isinstance(data, dict) else []
    return [e for e in entries if isinstance(e, dict) and is_release_id(e.get("release"))]


def top(work_dir):
    """WORK_DIR's own slot: (its state, the name of the model it holds). State: "empty", "old"
    (a release or history from before slots: no entry names a slot) or "named"."""
    history = read_history(work_dir)
    if any("slot" in e for e in history):
        name = next((e["slot"] for e in reversed(history) if "slot" in e), None)
        return "named", name if plain_name(name) else None
    used = bool(history) or os.path.islink(os.path.join(work_dir, "current"))
    return ("old" if used else "empty"), None


def slot_dir(work_dir, slot, head=None):
    """Where a slot's ``current`` and history.json live: WORK_DIR for ``default``, for the
    model WORK_DIR holds, or for a new model when WORK_DIR is empty or from before slots (and
    no WORK_DIR/slots/NAME exists); else WORK_DIR/slots/NAME. ``head``: ``top``, if read."""
    named = os.path.join(work_dir, "slots", slot)
    state, held = head or top(work_dir)
    if slot in (DEFAULT_SLOT, held) or (state != "named" and not os.path.lexists(named)):
        return work_dir
    return named


def made_slot(work_dir, slot, head=None):
    """The slot's directory, made if new; a link or a file in its place is refused (a switch
    never writes through a link)."""
    folder = slot_dir(work_dir, slot, head)
    if folder == work_dir:
        return folder
    for path in (os.path.join(work_dir, "slots"), folder):
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        if os.path.islink(path) or not os.path.isdir(path):
            raise AgentError(f"{path} is not a directory: remove it, then deploy again",
                             status=3)
    return folder


def slots(work_dir, folder=None, asked=None):
    """(name, directory) of every slot in use: WORK_DIR's own under its model's name
    (``default`` when it has none), then each real directory under WORK_DIR/slots; and the
    ``asked`` slot's ``folder`` when it is none of them (a new slot)."""
    state, held = top(work_dir)
    found = [(held or DEFAULT_SLOT, work_dir)] if state != "empty" else []
    root = os.path.join(work_dir, "slots")
    if os.path.isdir(root) and not os.path.islink(root):
        found += [(n, os.path.join(root, n)) for n in sorted(os.listdir(root))
                  if n not in (DEFAULT_SLOT, held) and plain_name(n) and set(n) <= SLOT_CHARS
                  and os.path.isdir(os.path.join(root, n))
                  and not os.path.islink(os.path.join(root, n))]
    if folder is not None and all(f != folder for _, f in found):
        found.append((asked, folder))
    return found


def existing(work_dir, slot):
    """The directory of a slot in use (a rollback never makes or takes over one); else exit 2
    naming the slots there."""
    found = slots(work_dir)
    if slot == DEFAULT_SLOT and found and found[0][1] == work_dir:
        return work_dir
    for name, folder in found:
        if name == slot:
            return folder
    raise AgentError(f"no model {slot} on this device (models: "
                     f"{', '.join(n for n, _ in found) or 'none'})", status=2)


def active(folder):
    """The release a slot's ``current`` points to (None if no link or not a release)."""
    try:
        target = os.readlink(os.path.join(folder, "current"))
    except OSError:
        return None
    head, name = os.path.split(target.rstrip("/"))
    if os.path.basename(head) != "releases" or not is_release_id(name):
        return None
    return name
