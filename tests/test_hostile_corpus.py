"""The generated corpus of hostile inputs (tests/support/hostile.py, issues 14 and 27), against
every command, in this process: each case ends in one ``error:`` line with its exit status (2,
or 3 for a device or transport), no traceback and no "internal error", within 30 s; nothing is
written in the case's folder or the working directory; the local device's tree is unchanged. A
command that only describes its input (``inspect``) may exit 0 with a warning. An ``isolated``
case runs as a child process limited to 3 GB of data (RLIMIT_DATA), so runaway memory fails it;
an in-process case may raise the test process's peak memory by at most 2 GB.
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.support.cli import Result, result_of, run_cli
from tests.support.hostile import Case, cases

CASES = list(cases())
#: No case may take longer (a hang), nor an isolated one use more memory (runaway growth).
SECONDS = 30
DATA_BYTES = 3 << 30
#: How far one in-process case may raise this process's peak memory.
PEAK_GROWTH_KB = 2 << 20
#: Files up to this size are hashed whole to see that a case left them as they were.
WHOLE = 64 << 20


def test_the_corpus_is_large_and_names_are_unique() -> None:
    assert len(CASES) >= 600
    assert len({c.name for c in CASES}) == len(CASES)
    kinds = {c.name.split()[0] for c in CASES}
    assert kinds == {"model", "data", "images", "profile", "manifest", "split", "inventory",
                     "cli",  # issue 14
                     "code", "home", "sizes", "report", "gate", "client", "fifo", "disk",
                     "release", "graph",  # issue 27: one or more kinds per class
                     "toolchain", "arg", "loop"}  # issue 39 (its model code is in "code")


def _tree(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` with a digest of its content (or target)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = _digest(path)
        else:
            found[key] = "dir"
    return found


def _digest(path: Path) -> str:
    """The file's sha256; of a file over WHOLE bytes (a sparse 3 GB record), its inode, size,
    change time (which no process can set back, as it can the modification time) and the sha256
    of its first and last MiB: a write or a swap changes one of them, and hashing 3 GB twice took
    20 s of a case's time."""
    stat = path.stat()
    size = stat.st_size
    if size <= WHOLE:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(size - (1 << 20))
        digest.update(handle.read())
    return f"{stat.st_ino}:{size}:{stat.st_ctime_ns}:{digest.hexdigest()}"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The case's folder; the working directory is an empty folder beside it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (tmp_path / "case").mkdir()
    yield tmp_path / "case"
    assert list(cwd.iterdir()) == [], "a refused command wrote in the working directory"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_one_clear_line(case: Case, folder: Path) -> None:
    case.make(folder)
    device = Path(os.environ["EDGE_LOCAL_DEVICE"])
    before, device_before = _tree(folder), _tree(device)
    with case.around(folder) as places:
        argv = [_place(a, {"d": str(folder), **places}) for a in case.argv]
        result = _run_isolated(argv) if case.isolated else _run_bounded(argv)
    # its status; no traceback; exit 0 (a description) warns that edge cannot run it, else
    # one error line saying what the case must
    assert case.faults(result.status, result.stderr) == [], result.stderr[-2000:]
    assert _tree(folder) == before, "a refused command wrote or changed files"
    assert _tree(device) == device_before, "a refused command changed the device"


def _place(arg: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


class Hang(BaseException):
    """The case ran past SECONDS. Not an OSError (as TimeoutError is) nor any Exception, so
    no reader's ``except`` can turn a hang into a clean refusal."""


def _too_long(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"the case ran past {SECONDS} s (a hang)")


def _run_bounded(argv: list[str]) -> Result:
    """The command in this process; past SECONDS it is interrupted and the case fails, and
    it may not raise the process's peak memory by more than PEAK_GROWTH_KB."""
    previous = signal.signal(signal.SIGALRM, _too_long)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    signal.alarm(SECONDS)
    try:
        result = run_cli(*argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < SECONDS, "the case ran past its time (a hang)"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown < PEAK_GROWTH_KB, f"the case raised peak memory by {grown >> 10} MB"
    return result


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_BYTES, DATA_BYTES))


def _run_isolated(argv: list[str]) -> Result:
    """``python -m edge`` in a child limited to DATA_BYTES and SECONDS."""
    done = subprocess.run([sys.executable, "-m", "edge", *argv], capture_output=True,
                          text=True, timeout=SECONDS, check=False, preexec_fn=_limit_memory)
    return result_of(done.returncode, done.stdout, done.stderr)
