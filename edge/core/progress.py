"""Progress bars and live status lines on stderr, drawn with rich (edge.core.progress_view,
imported only when shown).

Off by default, so a library caller sees nothing. ``edge.cli`` turns it on for a terminal's
stderr, never under ``--json``; on a stderr that is not a terminal (a CI log, nohup, a pipe) it
turns on the plain form: one line per step as it starts, with the time since the command began
(``edge: [1:05] tflite-int8: converting``), no bars and no redraws. While a bar is shown,
``edge`` log lines and warnings are printed above it through the same console, so nothing
tears. Safe to use from many threads at once.

    with progress.step("converting", total=9) as bar:
        bar.update("converting 1/9 tflite-int8")
        bar.advance()
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import IO, Any

__all__ = ["STEP_LINE", "LogHandler", "Step", "disable", "enable", "enabled", "hold", "step",
           "transfer"]

#: A line of the plain form, as readers of a captured stderr tell it from what a command said.
STEP_LINE = re.compile(r"^edge: \[\d+:\d\d\] ")
#: Redraws per second (never while a timing block holds the display: see ``hold``).
REFRESH_PER_SECOND = 5
_LOCK = threading.RLock()
#: Held by code that times something on this host: no redraw runs meanwhile.
_HOLD = threading.Lock()


class _State:
    """Where bars go (None: off), the console once rich is loaded, and the live display."""

    stream: IO[str] | None = None
    terminal: bool | None = None
    console: Any = None
    live: Any = None  # rich.progress.Progress while at least one step is shown
    steps = 0
    redraws: Any = None  # the _Redraws thread of ``live``
    plain = False  # one line per step, no bars (a stream that is not a terminal)
    since = 0.0  # when the plain form was enabled (time.monotonic)


_state = _State()


def enable(stream: IO[str], *, terminal: bool | None = None, plain: bool = False) -> None:
    """Show bars on ``stream`` from now on (``terminal`` forces rich's terminal detection), or
    with ``plain`` one line per step as it starts."""
    with _LOCK:
        _state.stream, _state.terminal, _state.console = stream, terminal, None
        _state.plain, _state.since = plain, time.monotonic()


def disable() -> None:
    """Show nothing from now on (the default)."""
    with _LOCK:
        _state.stream = _state.console = None
        _state.plain = False


def enabled() -> bool:
    """Whether bars are shown."""
    return _state.stream is not None


class Step:
    """One shown step; every method does nothing when progress is off."""

    def __init__(self, live: Any = None, task: Any = None) -> None:
        self._live, self._task = live, task

    def advance(self, amount: float = 1) -> None:
        """Count ``amount`` more units done."""
        if self._live is not None:
            with contextlib.suppress(KeyError):  # used after its step ended: nothing to show
                self._live.advance(self._task, amount)

    def update(self, description: str | None = None, *, completed: float | None = None,
               total: float | None = None) -> None:
        """Change the description, the units done or the total."""
        if self._live is not None:
            with contextlib.suppress(KeyError):
                self._live.update(self._task, description=description, completed=completed,
                                  total=total)

    def sent(self, done: int, total: int) -> None:
        """A transfer callback (paramiko's ``callback(bytes_done, bytes_total)``)."""
        self.update(completed=done, total=total)


@contextlib.contextmanager
def step(description: str, total: float | None = None, *, unit: str = "") -> Iterator[Step]:
    """A bar over ``total`` units, or a spinner when the total is unknown (the plain form: one
    line as it starts)."""
    if _state.plain:
        _plain_line(description)
        yield Step()
        return
    with _LOCK:
        live = _start() if _state.stream is not None else None
        task = live.add_task(description, total=total, unit=unit) if live is not None else None
    try:
        yield Step(live, task)
    finally:
        if live is not None:
            _finish(live, task)


def _plain_line(description: str) -> None:
    """``edge: [m:ss] description`` on the stream, when one is set."""
    with _LOCK:
        stream = _state.stream
        if stream is None:
            return
        minutes, seconds = divmod(int(time.monotonic() - _state.since), 60)
        shown = "".join(c if c.isprintable() else "?" for c in description)  # one line, always
        with contextlib.suppress(OSError, ValueError):  # a full log disk, a closed pipe: go on
            stream.write(f"edge: [{minutes}:{seconds:02d}] {shown}\n")
            stream.flush()


def transfer(description: str, size: int) -> contextlib.AbstractContextManager[Step]:
    """A bytes bar with size, speed and time left; feed it with ``Step.sent`` or ``advance``."""
    return step(description, total=size, unit="bytes")


@contextlib.contextmanager
def hold() -> Iterator[None]:
    """Keep the display still while timing on this host: the bars are redrawn by a thread of
    this process, and a redraw inside a timed block would be measured as the model's time."""
    if _state.live is None:
        yield
        return
    with _HOLD:
        yield


class _Redraws(threading.Thread):
    """Redraws the display REFRESH_PER_SECOND times a second, waiting out any ``hold``."""

    def __init__(self, live: Any) -> None:
        super().__init__(name="edge-progress", daemon=True)
        self.live, self.done = live, threading.Event()

    def run(self) -> None:
        while not self.done.wait(1 / REFRESH_PER_SECOND):
            if not _HOLD.acquire(blocking=False):
                continue  # something is being timed: skip this redraw
            try:
                if _LOCK.acquire(blocking=False):  # never wait: stop() may hold it
                    try:
                        if not self.done.is_set():
                            self.live.refresh()
                    finally:
                        _LOCK.release()
            finally:
                _HOLD.release()

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=2)


def _start() -> Any:
    """The live display, started for the first concurrent step (call with _LOCK held)."""
    if _state.live is None:
        _state.live = _progress(_console())
        _state.live.start()
        _state.redraws = _Redraws(_state.live)
        _state.redraws.start()
    _state.steps += 1
    return _state.live


def _finish(live: Any, task: Any) -> None:
    with _LOCK:
        live.refresh()  # its last state is drawn at least once, however short the step
        live.remove_task(task)
        _state.steps -= 1
        if _state.steps == 0 and _state.live is live:
            _state.redraws.stop()  # it never waits for _LOCK, so this cannot deadlock
            live.stop()
            _state.live = _state.redraws = None


def _console() -> Any:
    if _state.console is None:
        _state.console = _view().console(_state.stream, _state.terminal)
    return _state.console


def _progress(console: Any) -> Any:
    return _view().progress(console)


def _view() -> ModuleType:
    """How the bars look: rich, loaded with the first bar shown (--help shows none)."""
    from edge.core import progress_view

    return progress_view


class LogHandler(logging.Handler):
    """Log records as lines on the progress stream, above any bar being shown."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        """Print above the live display when one is shown, else write the line as is."""
        try:
            line = self.format(record)
            with _LOCK:
                if _state.live is not None:
                    _view().print_line(_state.live, line)
                else:
                    self.stream.write(line + "\n")
                    self.stream.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)
