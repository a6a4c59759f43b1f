"""Files written atomically (a reader sees the old file or the new one, never half of one), and
files named by a document kept inside the document's folder."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from edge.core.errors import UsageError

__all__ = ["current_umask", "inside", "staged", "write_atomic"]


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


def inside(root: Path, name: object, document: Path | str) -> Path:
    """``root / name`` for a file a document names, refused (UsageError naming the document)
    when ``name`` is not a relative path string or leads out of ``root``: absolute, ``..``, or a
    symlink anywhere on the way that points outside. Every reader of a manifest, split.yaml,
    profile or inventory takes its files through this."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise UsageError(f"{document}: {name!r} is not a file name")
    path = root / name
    if Path(name).is_absolute() or not path.resolve().is_relative_to(root.resolve()):
        raise UsageError(f"{document}: {name!r} is outside {root} (absolute, '..' or a symlink "
                         "leading out); files a document names must stay in its folder")
    return path


def only_regular_files(root: Path, what: str, limit: int = 100_000) -> None:
    """Refuse (UsageError naming it) a FIFO, socket or device at ``root`` or anywhere in the
    folder ``root``, before anything opens it: opening a FIFO waits for a writer forever.
    Links are followed to what they name (folders are not entered through them); a link to
    nothing is left to the reader that names it; after ``limit`` entries the walk stops."""
    if not _is_regular_or_folder(Path(root)):
        raise UsageError(f"{what} {root} is not a regular file or folder (a FIFO, socket or "
                         "device?); refusing to open it")
    folders, seen = [Path(root)] if Path(root).is_dir() else [], 0
    while folders and seen < limit:
        for entry in _entries(folders.pop()):
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
            elif not _is_regular_or_folder(Path(entry.path)):
                raise UsageError(f"{what}: {entry.path} is not a regular file (a FIFO, "
                                 "socket or device?); refusing to open it")


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    """A folder's entries ([] when it cannot be listed: its readers will say why)."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []


def _is_regular_or_folder(path: Path) -> bool:
    """Whether ``path`` (after links) is a regular file or a folder, or names nothing."""
    return path.is_file() or path.is_dir() or not path.exists()
