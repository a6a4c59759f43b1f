"""The ``edge`` command line: the click group, its commands (one module per command group) and
the exit statuses of docs/cli.md:

    0 ok   1 a check failed   2 bad input or usage   3 device or transport
    4 internal error (a bug in edge)   130 interrupted (Ctrl-C)   143 terminated (SIGTERM)

Start-up imports click and the command modules only (each imports click and edge.cli.common
at module level); a command imports what it needs when it runs.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import click

from edge.cli import (
    bench,
    deploy,
    devices,
    export,
    inspect,
    optimize,
    output,
    pack,
    partition,
    profiles,
    releases,
    report,
    toolchains,
)
from edge.core import __version__, cancel, offline
from edge.core.errors import EdgeError, ExitStatus, first_line
from edge.core.files import free_bytes, is_no_space, mount_of, no_space

__all__ = ["cli", "forget_inner_interrupts", "main"]

#: Appended to the one-line message of an internal error.
INTERNAL_ADVICE = "(a bug in edge: re-run with --traceback and report it)"
#: NumPy's message for a write the disk cut short (it sets no errno).
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")
#: Below this many free bytes, an unnamed full-disk error is put down to edge's cache.
CACHE_HEADROOM = 64 << 20


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so cleanup runs as for Ctrl-C."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit status instead of raising."""
    offline.apply()  # before any framework is imported or child started
    args = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in args
    args = [a for a in args if a != "--traceback"]  # accepted anywhere on the line
    main_thread = threading.current_thread() is threading.main_thread()
    before = _own_handlers() if main_thread else {}
    try:
        with output.session(as_json="--json" in args):
            return _run(args, show_traceback)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        cancel.clear()


def _own_handlers() -> dict[int, Any]:
    """SIGTERM raises Terminated, and Ctrl-C (unless it was inherited ignored: a background
    job) KeyboardInterrupt as Python's own handler does; both ask the work in other threads to
    stop first. The handlers they replace, to put back."""
    before: dict[int, Any] = {signal.SIGTERM: signal.signal(signal.SIGTERM, _terminate)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        before[signal.SIGINT] = signal.signal(signal.SIGINT, _interrupt)
    return before


def forget_inner_interrupts() -> None:
    """CPython's ``-m`` runner exits by SIGINT (status -2, not 130) once a Ctrl-C has passed
    through code a C extension ran with ``PyRun_String`` (TensorFlow's import does), even when
    edge caught it and said ``error: interrupted``. Running an empty string the same way resets
    that flag, so ``python -m edge`` exits with the status edge chose, as the ``edge`` script
    does."""
    run = getattr(getattr(ctypes, "pythonapi", None), "PyRun_SimpleString", None)
    if run is not None:
        run(b"")


def _terminate(signum: int, frame: object) -> None:
    cancel.request()
    raise Terminated()


def _interrupt(signum: int, frame: object) -> None:
    cancel.request()
    raise KeyboardInterrupt


def _run(args: list[str], show_traceback: bool) -> int:
    """The command's exit status; every exception becomes one ``error:`` line and a status."""
    try:
        status = cli.main(args=args, prog_name="edge", standalone_mode=False)
    except EdgeError as exc:
        return _fail(str(exc), exc.status, show_traceback)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        return _fail(exc.format_message(), ExitStatus.BAD_INPUT)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:  # click makes Ctrl-C an Abort
        return _stopped(exc)
    except Exception as exc:
        if _interruption(exc) is not None:  # Ctrl-C inside a framework's C code or import
            return _stopped(exc)
        full = _no_space(exc)
        if full:  # a write no staged writer guarded: still the user's full disk (exit 2)
            return _fail(full, ExitStatus.BAD_INPUT, show_traceback)
        return _fail(internal_error(exc), ExitStatus.INTERNAL, show_traceback)
    return int(status or 0)


def _interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) that caused ``exc``, if any: a C extension whose import or call
    it interrupts raises its own error (``ImportError: initialization failed``) from it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _stopped(exc: BaseException) -> int:
    """Exit 143 for SIGTERM, 130 for Ctrl-C."""
    if isinstance(_interruption(exc), Terminated):
        return _fail("terminated", 143)
    return _fail("interrupted", 130)


def internal_error(exc: BaseException) -> str:
    """The message of an exception that is not an EdgeError: a bug, never a verdict."""
    detail = first_line(exc) if str(exc).strip() else "(no message)"
    return f"internal error: {type(exc).__name__}: {detail} {INTERNAL_ADVICE}"


def _no_space(exc: BaseException) -> str | None:
    """The one line of a full disk met outside a staged writer (the cache, a library's own
    write), or None when ``exc`` is no full disk. NumPy reports a short write without errno."""
    short = isinstance(exc, OSError) and exc.errno is None and SHORT_WRITE.match(str(exc))
    if not (is_no_space(exc) or short):
        return None
    name = getattr(exc, "filename2", None) or getattr(exc, "filename", None)
    if name:
        return str(no_space(Path(os.fsdecode(name)), 0))
    if is_no_space(exc):
        return _cache_full() or "no space left on a disk edge was writing to; free some space"
    return _cache_full()


def _cache_full() -> str | None:
    """The line naming edge's cache when its disk is (nearly) full, else None (a bug)."""
    from edge.core.cache import cache_root

    cache = cache_root()
    free = free_bytes(cache)
    if free > CACHE_HEADROOM:
        return None
    return (f"no space left on {mount_of(cache)} writing edge's cache {cache}: "
            f"{free / 1e6:.1f} MB free; free some space there, or set EDGE_CACHE_DIR to a "
            "folder on a disk with room")


def _fail(message: str, status: int, show_traceback: bool = False) -> int:
    """One ``error:`` line (after the stack with --traceback) and the status: --traceback
    never changes the exit status a CI gate reads."""
    if show_traceback:
        traceback.print_exc(file=sys.stderr)
    line = " ".join(str(message).split())
    click.echo(f"error: {line}", err=True)
    return int(status)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edge")
@click.option("--traceback", is_flag=True,
              help="Show the Python stack on errors (accepted anywhere on the line).")
def cli(traceback: bool) -> None:
    """Take a trained model to the devices people own, and prove how fast it runs there.

    Exit status: 0 ok, 1 a check failed, 2 bad input, 3 device or transport, 4 internal
    error (a bug in edge).

    \b
    Example:
      edge deploy model.onnx --profile rpi4 --host pi@raspberrypi.local --calib calib.npy
    """


for _command in (profiles.profiles, inspect.inspect, optimize.optimize, deploy.deploy,
                 bench.bench, releases.releases, releases.rollback, devices.devices,
                 partition.partition, partition.serve_cloud, partition.run_split,
                 report.report, toolchains.toolchains, export.export, pack.pack):
    cli.add_command(_command)
