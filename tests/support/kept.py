"""What the tests build once and keep between runs, under the test data cache.

A trained test model, edge's conversion and reference caches: each is kept under
``EDGE_TEST_DATA`` (default ~/.cache/edge-test-data) in a folder whose name is a key over
everything that changes it (the source files that build it, their arguments and the versions
of the packages they run), so a change of any of them builds a new one and an old one is never
served. A folder is built under a temporary name and renamed into place (an interrupted build
leaves nothing that looks finished), under a lock (two runs build it once).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TypeVar

__all__ = ["data_root", "keeping", "keeping_caches", "key_of", "kept_folder"]

T = TypeVar("T")


def data_root() -> Path:
    """The test data cache (``EDGE_TEST_DATA`` overrides ~/.cache/edge-test-data)."""
    return Path(os.environ.get("EDGE_TEST_DATA", "~/.cache/edge-test-data")).expanduser()


def keeping() -> bool:
    """Whether this run keeps what it builds (``EDGE_TEST_KEEP=0``: a cold run, nothing kept
    or read from earlier runs)."""
    return os.environ.get("EDGE_TEST_KEEP", "1") not in ("", "0")


def keeping_caches() -> bool:
    """Whether edge's conversion and reference caches are kept between runs
    (``EDGE_TEST_KEEP_CACHES=1``; off by default: tests that check what a first conversion
    says or remembers need a cold cache, and do not yet ask for one themselves)."""
    return os.environ.get("EDGE_TEST_KEEP_CACHES", "0") not in ("", "0")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def key_of(*parts: object, sources: Iterable[Path] = (), dists: Iterable[str] = ()) -> str:
    """A 16-hex-digit key over ``parts``, the bytes of ``sources`` and the versions of
    ``dists``."""
    digest = hashlib.sha256(json.dumps([list(map(str, parts)),
                                        {d: _version(d) for d in sorted(dists)}]).encode())
    for source in sorted(sources):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def kept_folder(name: str, key: str, build: Callable[[Path], T],
                read: Callable[[Path], T]) -> T:
    """``read(folder)`` of the kept folder ``name-key``, built first by ``build(folder)`` when
    it is not there yet."""
    if not keeping():
        scratch = Path(tempfile.mkdtemp(prefix=f"cold-{name}-"))
        build(scratch)
        return read(scratch)
    final = data_root() / "kept" / f"{name}-{key}"
    with _locked(final):
        if not (final / ".done").is_file():
            shutil.rmtree(final, ignore_errors=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
            try:
                build(scratch)
                (scratch / ".done").write_text("")
                scratch.rename(final)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return read(final)
