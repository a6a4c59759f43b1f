"""Run the edge CLI in-process (fast) or as a real subprocess (stdout exactly as a user sees)."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from edge.core.progress import STEP_LINE

#: A plain progress line (stderr not a terminal): ``edge: [m:ss] step``.
STEP = STEP_LINE


@dataclass(frozen=True, slots=True)
class Result:
    """Exit status and captured streams of one edge invocation: ``stderr`` is what the command
    said (errors, warnings, notes), its plain progress lines apart in ``steps``."""

    status: int
    stdout: str
    stderr: str
    steps: tuple[str, ...] = ()

    def json(self) -> Any:
        """stdout parsed as the one JSON document --json promises."""
        return json.loads(self.stdout)

    @property
    def error_lines(self) -> list[str]:
        """stderr lines that start with 'error:'."""
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def run_cli(*args: str) -> Result:
    """edge's main() in this process, streams captured."""
    from edge.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return result_of(status, out.getvalue(), err.getvalue())


def run_edge(*args: str, timeout: float = 600) -> Result:
    """``python -m edge ARGS`` in a child process."""
    done = subprocess.run([sys.executable, "-m", "edge", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
    return result_of(done.returncode, done.stdout, done.stderr)


def result_of(status: int, stdout: str, stderr: str) -> Result:
    """A result with stderr's step lines moved to ``steps``."""
    lines = stderr.splitlines(keepends=True)
    steps = tuple(line.rstrip("\n") for line in lines if STEP.match(line))
    said = "".join(line for line in lines if not STEP.match(line))
    return Result(status, stdout, said, steps)


def as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT, as Ctrl-C does to a
    terminal's foreground process: SIGINT at its default, unblocked. A child inherits an ignored
    or blocked SIGINT from its parent (a shell's background job: a CI launcher), and a program
    rightly keeps ignoring it then; these tests are about the foreground user."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
