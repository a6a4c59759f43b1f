"""Files written atomically: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["current_umask", "staged", "write_atomic"]


def current_umask() -> int:
    """The process umask (reading it means setting it: set straight back)."""
    current = os.umask(0)
    os.umask(current)
    return current


@contextlib.contextmanager
def staged(path: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary file beside ``path`` to write; renamed over ``path`` when the block ends
    without an error, removed otherwise. Its mode follows the umask, as a new file's would."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: str | bytes | Callable[[Path], object]) -> Path:
    """Write text, bytes, or whatever ``data(tmp_path)`` writes, to ``path`` atomically."""
    with staged(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        elif isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            data(tmp)
    return Path(path)
