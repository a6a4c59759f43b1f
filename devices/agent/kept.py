"""What ran a release, kept in its folder: after a ``bench`` of a release's model, what its
runtime said ran each layer (``observe``) and the runtime version, in
``WORK/releases/ID/observed.json``, so the release on the device says what really ran it;
``releases`` lists it beside the release."""

import json
import os
import stat
import time

from .files import write_json_atomic
from .slots import is_release_id

#: The record's name in a release's folder (not one of the release's files).
OBSERVED = "observed.json"
OBSERVED_MAX_BYTES = 8 << 20  # a larger one is not read back (20000 layers fit)
#: What one ``releases`` reply lists of them in all (the newest releases' first).
LISTED_MAX_BYTES = 16 << 20


def keep_observed(results):
    """Each timed model of a release (WORK/releases/ID/model.*): what ran it, as its runtime
    said, and the runtime version, written into the release's folder (the last timing's),
    so the release on the device says what really ran it. The folder's time stays as it was
    (it orders ``releases`` and ``prune``: a bench is not an install). A record that cannot
    be written (a full disk) leaves the timing as it is."""
    for result in results:
        folder = _release_folder(str(result.get("model") or ""))
        if folder is None or not isinstance(result.get("observed"), dict):
            continue
        try:
            before = os.stat(folder, follow_symlinks=False)
            write_json_atomic(os.path.join(folder, OBSERVED), {
                "version": 1, "observed": result["observed"],
                "runtime_version": result.get("runtime_version"),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns),
                     follow_symlinks=False)
        except OSError:
            continue


def _release_folder(model):
    """The release folder a model file lies in directly (``WORK/releases/ID`` of an agent's
    work dir: one with ``agent/`` and ``incoming/`` beside ``releases/``), none of the path a
    link; else None."""
    path = os.path.abspath(model)
    folder = os.path.dirname(path)
    releases = os.path.dirname(folder)
    work = os.path.dirname(releases)
    if os.path.basename(releases) != "releases" or not is_release_id(os.path.basename(folder)):
        return None
    if os.path.realpath(folder) != folder or not all(
            os.path.isdir(os.path.join(work, sub)) for sub in ("agent", "incoming")):
        return None
    return folder


def kept_observed(folder, limit=OBSERVED_MAX_BYTES):
    """The release's kept observation (``keep_observed``) when it is a regular file of at most
    ``limit`` bytes (opened without following a link or blocking on a FIFO); None otherwise
    or when it does not parse (edge validates what it holds)."""
    try:
        handle = os.open(os.path.join(folder, OBSERVED),
                         os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = json.loads(os.read(handle, limit + 1).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(handle)
    return data if isinstance(data, dict) else None
