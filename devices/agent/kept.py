"""What ran a release, kept in its folder: after a ``bench`` of a release's model, what its
runtime said ran each layer (``observe``) and the runtime version, in
``WORK/releases/ID/observed.json``, so the release on the device says what really ran it;
``releases`` lists it beside the release."""

import json
import os
import time

from .files import write_json_atomic
from .slots import is_release_id

#: The record's name in a release's folder (not one of the release's files).
OBSERVED = "observed.json"
OBSERVED_MAX_BYTES = 8 << 20  # a larger one is not read back (20000 layers fit)


def keep_observed(results):
    """Each timed model of a release (WORK/releases/ID/model.*): what ran it, as its runtime
    said, and the runtime version, written into the release's folder (the last timing's),
    so the release on the device says what really ran it. A record that cannot be written
    (a full disk) leaves the timing as it is."""
    for result in results:
        folder = _release_folder(str(result.get("model") or ""))
        if folder is None or not isinstance(result.get("observed"), dict):
            continue
        try:
            write_json_atomic(os.path.join(folder, OBSERVED), {
                "version": 1, "observed": result["observed"],
                "runtime_version": result.get("runtime_version"),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        except OSError:
            continue


def _release_folder(model):
    """The release folder a model file lies in directly (``.../releases/ID``), else None."""
    folder = os.path.dirname(os.path.abspath(model))
    parent = os.path.dirname(folder)
    if os.path.basename(parent) != "releases" or not is_release_id(os.path.basename(folder)):
        return None
    return None if os.path.islink(folder) else folder


def kept_observed(folder):
    """The release's kept observation (``keep_observed``), None when there is none or it is
    unreadable or too large (edge validates what it holds)."""
    path = os.path.join(folder, OBSERVED)
    try:
        if os.path.islink(path) or os.path.getsize(path) > OBSERVED_MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
