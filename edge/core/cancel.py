"""One process-wide request to stop: set when the command is being interrupted, polled by
work running in other threads (a converter's child process) so that a Ctrl-C ends edge at
once instead of when that work would have finished."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["Cancelled", "check", "clear", "on_interrupt", "request", "requested",
           "stop_if_requested"]

_STOP = threading.Event()


class Cancelled(Exception):
    """The work was stopped because the command is being interrupted."""


def requested() -> bool:
    """Whether the command is being interrupted."""
    return _STOP.is_set()


def request() -> None:
    """Ask the work to stop (a signal handler's first step: the KeyboardInterrupt it raises
    next can be swallowed where it lands, in a callback whose exceptions are ignored)."""
    _STOP.set()


def stop_if_requested() -> None:
    """In the main thread, between steps: a stop was asked for whose KeyboardInterrupt was
    lost (an import's lock callback ignored it) is raised again here."""
    if _STOP.is_set():
        raise KeyboardInterrupt


def check() -> None:
    """Raise Cancelled when the command is being interrupted."""
    if _STOP.is_set():
        raise Cancelled("stopped: the command is being interrupted")


@contextlib.contextmanager
def on_interrupt() -> Iterator[None]:
    """Within the block, an exception escaping it (a Ctrl-C, a failure) asks the work other
    threads do to stop, until the block has been left."""
    try:
        yield
    except BaseException:
        _STOP.set()
        raise


def clear() -> None:
    """Forget a stop request once every thread that polls it has ended."""
    _STOP.clear()
