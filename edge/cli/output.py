"""What a command shows, and where (docs/cli.md): the one JSON object of ``--json`` with the
command's warnings in it, ``warning: ...`` lines on stderr, progress lines on a terminal, and
nothing else on stdout under ``--json``.

A warning is a Python warning or a WARNING (or worse) record of the ``edge`` logger, from any
thread, while ``session`` is open; each distinct message is kept and shown once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import click

from edge.core import progress

__all__ = ["emit", "session", "stdout_to_stderr", "warned"]

_LOGGER = "edge"


class _Warnings:
    """The distinct warnings of the running command, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def add(self, text: str) -> bool:
        """Keep ``text`` (made one line); False when it was already kept."""
        line = " ".join(str(text).split())
        with self.lock:
            if line in self.lines:
                return False
            self.lines.append(line)
            return True

    def clear(self) -> None:
        with self.lock:
            self.lines.clear()


_warnings = _Warnings()


def warned() -> list[str]:
    """The warnings of the running command so far."""
    with _warnings.lock:
        return list(_warnings.lines)


def emit(as_json: bool, document: dict[str, Any], text: str) -> None:
    """Print the result: ``document`` plus its ``"warnings"`` as JSON, or ``text``."""
    if as_json:
        click.echo(json.dumps(document | {"warnings": warned()}, indent=2))
    else:
        click.echo(text)


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """Under --json, anything libraries print goes to stderr so stdout stays one document."""
    if not active:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


class _WarningHandler(progress.LogHandler):
    """WARNING records: kept for the document and printed once as ``warning: ...`` (above
    any progress bar)."""

    def emit(self, record: logging.LogRecord) -> None:
        if _warnings.add(record.getMessage()):
            super().emit(record)


class _Below(logging.Filter):
    """Only records below WARNING (the warning handler shows the rest)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


class _Heartbeat(_Below):
    """Only the lines of a long step that says it still runs (``extra={"heartbeat": True}``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return super().filter(record) and bool(getattr(record, "heartbeat", False))


def _handlers(terminal: bool) -> list[logging.Handler]:
    """The warning handler; on a terminal also ``edge: ...`` progress lines, elsewhere only
    the heartbeat lines of long steps (an onnx2tf run)."""
    warn = _WarningHandler(sys.stderr)
    warn.setLevel(logging.WARNING)
    warn.setFormatter(logging.Formatter("warning: %(message)s"))
    lines = progress.LogHandler(sys.stderr)
    lines.addFilter(_Below() if terminal else _Heartbeat())
    lines.setFormatter(logging.Formatter("edge: %(message)s"))
    return [lines, warn]


def _show_warning(message: Any, category: type, filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A Python warning goes the way of the logger's warnings."""
    logging.getLogger(_LOGGER).warning("%s", message)


@contextlib.contextmanager
def session(*, as_json: bool) -> Iterator[None]:
    """While a command runs: collect its warnings and show them; progress bars and lines on a
    terminal's stderr, one plain line per step elsewhere, nothing under --json. Restores the
    logger and warnings after."""
    terminal = not as_json and sys.stderr.isatty()
    logger = logging.getLogger(_LOGGER)
    saved = logger.handlers[:], logger.level, logger.propagate
    _warnings.clear()
    logger.handlers[:] = _handlers(terminal)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if terminal:
        progress.enable(sys.stderr)
    elif not as_json:
        progress.enable(sys.stderr, plain=True)  # a CI log, nohup: one line per step
    try:
        with warnings.catch_warnings():  # entering it shows each warning again, once per run
            warnings.showwarning = _show_warning
            yield
    finally:
        progress.disable()
        _warnings.clear()
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
