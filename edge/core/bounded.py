"""A user's model runs first in a bounded child: a deadline, a memory limit, nothing left running.

``run_bounded`` starts a Python module of edge's in its own session (``python -P``: the working
folder is not on its import path, so a ``numpy.py`` beside the model is never imported), with
the limits in its environment; the child calls ``apply_limits`` first thing (an address-space
limit set by the child itself: no ``preexec_fn`` in a process that may hold threads) and
answers with ``reply`` on a pipe of its own. Its stdout and stderr go nowhere (a model that
prints cannot fill edge's memory); the answer is read up to ``MAX_REPLY`` bytes. Past the
deadline the child's whole process group is killed; a child that ran out of memory says so.
Either is one ``UsageError`` line naming the limit and how to raise it.

The limits: ``EDGE_MODEL_DEADLINE_S`` (default 600 s) and ``EDGE_MODEL_MEMORY_MB`` (default
4096 MB, plus three times the model file's size).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.core.errors import UsageError

__all__ = ["DEADLINE_ENV", "MEMORY_ENV", "OUT_OF_MEMORY", "Bounds", "apply_limits", "bounds",
           "limit_env", "out_of_memory", "over_deadline", "over_memory", "reply", "run_bounded"]

DEADLINE_ENV = "EDGE_MODEL_DEADLINE_S"
MEMORY_ENV = "EDGE_MODEL_MEMORY_MB"
#: The child's own copy of its memory limit (bytes) and its answer's pipe, set by run_bounded.
_CHILD_ENV = "EDGE_BOUNDED_MEMORY"
_REPLY_ENV = "EDGE_BOUNDED_REPLY_FD"
#: A child's exit status when it ran out of memory (apply_limits' children say so with it).
OUT_OF_MEMORY = 86
#: The longest answer a child may give (its JSON: op lists, warnings, one error line).
MAX_REPLY = 16 << 20


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
    """``python -P -m module args`` within ``limits``: the JSON it answers with ``reply`` (a
    ``{"error": LINE}`` is that UsageError), or a UsageError saying which limit ``what``
    (e.g. "m.pt: listing its TorchScript graph") reached."""
    read, write = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", module, *args], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(limits, write),
            pass_fds=(write,), start_new_session=True)
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as answer:
        try:
            data = _read(answer.fileno(), time.monotonic() + limits.deadline_s)
        except TimeoutError:
            _kill(child)
            raise over_deadline(what, limits) from None
        except BaseException:
            _kill(child)
            raise
    _kill(child)  # the answer is in (or too long): anything left in its group goes
    return _reply(child.returncode, data, what, limits)


def over_deadline(what: str, limits: Bounds) -> UsageError:
    """The error of a child stopped at the deadline of a model's first run."""
    return UsageError(f"{what}: still running after {limits.deadline_s:g} s, the deadline of a "
                      f"model's first run (stopped; {DEADLINE_ENV} raises it)")


def over_memory(what: str, limits: Bounds) -> UsageError:
    """The error of a child that ran out of the memory a model's first run may take."""
    return UsageError(f"{what}: needed more than {limits.memory_bytes >> 20} MB, the memory "
                      f"limit of a model's first run (stopped; {MEMORY_ENV} raises it)")


def limit_env(limits: Bounds) -> dict[str, str]:
    """What a child that calls ``apply_limits`` needs in its environment (a child edge starts
    itself, with its own deadline)."""
    return {_CHILD_ENV: str(limits.memory_bytes), "MALLOC_ARENA_MAX": "2"}


def _env(limits: Bounds, write: int) -> dict[str, str]:
    """The child's environment: the limits, its answer's pipe, and what this process imports
    (this edge, a trusted pickle's classes); few malloc arenas (each reserves address space)."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, _CHILD_ENV: str(limits.memory_bytes), _REPLY_ENV: str(write),
            "PYTHONPATH": path, "MALLOC_ARENA_MAX": "2"}


def _read(fd: int, deadline: float) -> bytes:
    """The child's answer until it closes its end (EOF) or MAX_REPLY bytes; TimeoutError past
    ``deadline``."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_REPLY:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _kill(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _reply(code: int, data: bytes, what: str, limits: Bounds) -> Any:
    if code == OUT_OF_MEMORY:
        raise over_memory(what, limits)
    if len(data) > MAX_REPLY:
        raise UsageError(f"{what}: the child answered more than {MAX_REPLY >> 20} MB")
    try:
        answer = json.loads(data) if data.strip() else None
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        how = f"was stopped by signal {-code}" if code < 0 else f"failed (exit status {code})"
        raise UsageError(f"{what}: the child {how} without an answer")
    if isinstance(answer.get("error"), str):
        raise UsageError(answer["error"][:2000])  # the child's own refusal, one line
    return answer


def apply_limits() -> None:
    """In a child of run_bounded: the address-space limit it was given."""
    limit = int(os.environ.get(_CHILD_ENV) or 0)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def reply(answer: dict[str, Any]) -> None:
    """In a child of run_bounded: its answer, on the pipe the parent reads."""
    fd = int(os.environ[_REPLY_ENV])
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(answer, out)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out (Python's MemoryError, or a C++ allocator's)."""
    return isinstance(exc, MemoryError) or "allocate memory" in str(exc) or "bad_alloc" in str(
        exc)
