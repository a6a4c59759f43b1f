"""Where edge caches references, conversions and measurements, and the keys it caches by.

A cache key names everything that changes what is cached: the input's content, the settings,
the recipe version of the code that builds it and the versions of the converters it runs. After
an upgrade of a converter or a change of a recipe the old entries are never served again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["cache_root", "cache_key", "earlier_run", "this_run", "versions"]

#: This process's run: a failure it records is its own, not "remembered", while it runs.
_RUN = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def cache_root() -> Path:
    """Where converted artifacts are cached by content (``EDGE_CACHE_DIR`` overrides)."""
    return Path(os.environ.get("EDGE_CACHE_DIR") or "~/.cache/edge").expanduser()


@functools.cache
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def versions(dists: Iterable[str]) -> dict[str, str]:
    """Installed version of each distribution (``absent`` when not installed)."""
    return {dist: _version(dist) for dist in sorted(set(dists))}


def cache_key(*parts: Any, recipe: str | int, converters: Iterable[str] = (),
              toolchain: Mapping[str, str] | None = None) -> str:
    """A 16-hex-digit key over ``parts``, the recipe version and the converters' versions:
    those installed here, and ``toolchain``'s, of a converter run in its own environment
    (``Toolchain.versions()``)."""
    keyed: list[Any] = [list(map(str, parts)), str(recipe), versions(converters)]
    if toolchain:
        keyed.append(dict(toolchain))
    text = json.dumps(keyed, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def this_run() -> str:
    """A token naming this edge run (this process); records written now carry it."""
    return _RUN


def earlier_run(record: Mapping[str, Any]) -> str | None:
    """``'the run of <date time>'`` for a record an earlier run wrote, None for one this run
    wrote (a failure of this very run is not remembered, it is the same failure)."""
    if record.get("run") == _RUN:
        return None
    at = time.localtime(float(record.get("at", 0) or 0))
    return f"the run of {time.strftime('%Y-%m-%d %H:%M', at)}"
