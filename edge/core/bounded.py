"""A user's model runs first in a bounded child: a deadline, a memory limit, nothing left running.

``run_bounded`` starts a Python module of edge's in its own session with the limits in its
environment; the child calls ``apply_limits`` first thing (an address-space limit set by the
child itself: no ``preexec_fn`` in a process that may hold threads). Past the deadline the
child's whole process group is killed; a child that ran out of memory says so. Either is one
``UsageError`` line naming the limit and how to raise it.

The limits: ``EDGE_MODEL_DEADLINE_S`` (default 600 s) and ``EDGE_MODEL_MEMORY_MB`` (default
4096 MB, plus three times the model file's size).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.core.errors import UsageError

__all__ = ["DEADLINE_ENV", "MEMORY_ENV", "OUT_OF_MEMORY", "Bounds", "apply_limits", "bounds",
           "out_of_memory", "run_bounded"]

DEADLINE_ENV = "EDGE_MODEL_DEADLINE_S"
MEMORY_ENV = "EDGE_MODEL_MEMORY_MB"
#: The child's own copy of its memory limit (bytes), set by run_bounded.
_CHILD_ENV = "EDGE_BOUNDED_MEMORY"
#: A child's exit status when it ran out of memory (apply_limits' children say so with it).
OUT_OF_MEMORY = 86


@dataclass(frozen=True, kw_only=True, slots=True)
class Bounds:
    """How long and how much memory a model's first run may take."""

    deadline_s: float
    memory_bytes: int


def bounds(model: Path | None = None) -> Bounds:
    """The limits for a first run of ``model`` (the environment's, else the defaults)."""
    size = model.stat().st_size if model is not None and model.is_file() else 0
    return Bounds(deadline_s=_number(DEADLINE_ENV, 600.0),
                  memory_bytes=int(_number(MEMORY_ENV, 4096.0) * 2**20) + 3 * size)


def _number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        raise UsageError(f"{name}={os.environ[name]!r}: give a number") from None
    if not 0 < value < 1e9:
        raise UsageError(f"{name}={os.environ[name]!r}: give a positive number")
    return value


def run_bounded(module: str, args: list[str], *, what: str, limits: Bounds) -> Any:
    """``python -m module args`` within ``limits``: the JSON it prints on its last line (a
    ``{"error": LINE}`` is that UsageError), or a UsageError saying which limit ``what``
    (e.g. "m.pt: listing its TorchScript graph") reached."""
    # the child imports what this process imports: this edge, and a trusted pickle's classes
    path = os.pathsep.join(p for p in sys.path if p)
    env = {**os.environ, _CHILD_ENV: str(limits.memory_bytes), "PYTHONPATH": path}
    with subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env,
                          start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=limits.deadline_s)
        except subprocess.TimeoutExpired:
            _kill(child)
            raise UsageError(f"{what}: still running after {limits.deadline_s:g} s, the "
                             f"deadline of a model's first run (stopped; {DEADLINE_ENV} raises "
                             "it)") from None
        except BaseException:
            _kill(child)
            raise
        _kill(child)  # anything the child left behind in its group
    return _reply(child.returncode, out, err, what, limits)


def _kill(child: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _reply(code: int, out: str, err: str, what: str, limits: Bounds) -> Any:
    if code == OUT_OF_MEMORY or (code < 0 and "MemoryError" in err):
        raise UsageError(f"{what}: needed more than {limits.memory_bytes >> 20} MB, the memory "
                         f"limit of a model's first run (stopped; {MEMORY_ENV} raises it)")
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        tail = (err.strip().splitlines() or [f"exit status {code}"])[-1]
        raise UsageError(f"{what}: failed ({tail[:200]})")
    try:
        reply = json.loads(lines[-1])
    except ValueError:
        raise UsageError(f"{what}: the child answered {lines[-1][:80]!r}, not JSON") from None
    if isinstance(reply, dict) and isinstance(reply.get("error"), str):
        raise UsageError(reply["error"])  # the child's own refusal, one line
    return reply


def apply_limits() -> None:
    """In a child of run_bounded: the address-space limit it was given."""
    limit = int(os.environ.get(_CHILD_ENV) or 0)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out (Python's MemoryError, or a C++ allocator's)."""
    return isinstance(exc, MemoryError) or "allocate memory" in str(exc) or "bad_alloc" in str(
        exc)
