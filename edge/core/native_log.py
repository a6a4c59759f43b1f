"""What native libraries write straight to file descriptor 2 (LiteRT's "Created TensorFlow Lite
XNNPACK delegate" notice, XNNPACK's cpuinfo notes on sysfs files it missed) goes to a log under
the cache, a file to read when something goes wrong, instead of the user's terminal."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from edge.core.cache import cache_root

__all__ = ["LOG_BYTES", "native_log", "stderr_to_log"]

#: A log starts over past this size.
LOG_BYTES = 1 << 20
#: One redirect of file descriptor 2 at a time in this process (fleet threads load too).
_REDIRECT = threading.Lock()


def native_log(name: str) -> Path:
    """Where runtime ``name``'s own native output goes."""
    return cache_root() / "logs" / f"{name}.log"


@contextlib.contextmanager
def stderr_to_log(name: str) -> Iterator[None]:
    """File descriptor 2 appended to ``native_log(name)`` (/dev/null when it cannot be written)
    while the block runs; Python's own stderr is flushed first."""
    with _REDIRECT:
        sys.stderr.flush()
        sink = _open_log(native_log(name))
        try:
            saved = os.dup(2)
        except OSError:  # no file descriptor 2 to redirect: run the block as it is
            os.close(sink)
            yield
            return
        try:
            os.dup2(sink, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(sink)


def _open_log(log: Path) -> int:
    """The log's descriptor for appending (started over past ``LOG_BYTES``; a link is never
    followed), else /dev/null's."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        big = log.is_file() and log.stat().st_size > LOG_BYTES
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if big else os.O_APPEND)
        return os.open(log, flags, 0o600)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)
