"""Files written atomically (a reader sees the old file or the new one, never half of one), and
files named by a document kept inside the document's folder."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from edge.core.errors import UsageError

T = TypeVar("T")

__all__ = ["NO_SPACE", "NoSpace", "check_space", "current_umask", "filled", "free_bytes", "inside",
           "is_no_space", "no_space", "no_space_as", "scratch_file", "staged", "staged_dir",
           "write_atomic"]

#: The errnos of a full file system: no space left, or the user's quota used up.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def current_umask() -> int:
    """The process umask (reading it means setting it: set straight back)."""
    current = os.umask(0)
    os.umask(current)
    return current


class NoSpace(UsageError):
    """The user's disk (or quota) is full: theirs to free, so bad input (exit 2), not a bug."""


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is an OSError of a full file system or a used-up quota."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


def _is_full(exc: BaseException) -> bool:
    return is_no_space(exc) or isinstance(exc, NoSpace)


#: How a library that turns an OSError into text (an exporter, a converter's log) says ENOSPC.
_FULL_TEXT = ("[Errno 28]", "[Errno 122]", "No space left on device", "Disk quota exceeded")


def filled(exc: BaseException | None, text: str = "") -> bool:
    """Whether ``exc`` (or an exception it was raised from or during), or ``text``, is a full
    disk or used-up quota: libraries wrap an ENOSPC into their own types and messages."""
    seen = 0
    while exc is not None and seen < 32:
        if _is_full(exc) or any(t in str(exc) for t in _FULL_TEXT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return any(t in text for t in _FULL_TEXT)


@contextlib.contextmanager
def no_space_as(path: Path, size: int = 0) -> Iterator[None]:
    """A full disk met anywhere in the block (however a library wrapped it) becomes one
    NoSpace naming ``path``, the cache entry or output being written."""
    try:
        yield
    except NoSpace:
        raise
    except Exception as exc:
        if filled(exc):
            raise no_space(Path(path), max(size, 4096)) from None
        raise


@contextlib.contextmanager
def scratch_file(path: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary file name beside ``path`` (same file system) for a library to write and
    edge to read back; removed when the block ends, whatever happens. A full disk is one
    NoSpace naming ``path``."""
    path = Path(path)
    tmp = _made(path, lambda: Path(_temp_file(path, suffix)))
    try:
        with no_space_as(path):
            yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def mount_of(path: Path) -> Path:
    """The mount point of the file system ``path`` is (or would be) on."""
    path = _existing(Path(path).absolute())
    device = path.stat().st_dev
    while path.parent != path and path.parent.stat().st_dev == device:
        path = path.parent
    return path


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s file system."""
    stat = os.statvfs(_existing(Path(path).absolute()))
    return stat.f_bavail * stat.f_frsize


def _mb(size: int) -> str:
    """Megabytes: one decimal from 1 MB, else three (whole kilobytes, rounded up)."""
    return f"{size / 1e6:.1f}" if size >= 1e6 else f"{math.ceil(size / 1e3) / 1e3:.3f}"


def no_space(path: Path, needed: int) -> NoSpace:
    """The one-line error of a write to ``path`` that needs ``needed`` bytes and found no room."""
    return NoSpace(f"no space left on {mount_of(path)} writing {path}: needs about "
                   f"{_mb(max(needed, 1))} MB, {_mb(free_bytes(path))} MB free; free some space "
                   "or write elsewhere")


def check_space(path: Path, needed: int) -> None:
    """Refuse, before writing, ``needed`` bytes for ``path`` that its file system cannot hold."""
    if needed > free_bytes(path):
        raise no_space(path, needed)


def size_of(path: Path) -> int:
    """The bytes of a file, or of every file under a folder (0 when absent)."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@contextlib.contextmanager
def staged(path: Path, suffix: str = ".tmp", size: int = 0) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; renamed over ``path`` when the block ends
    without an error, removed otherwise. Its mode follows the umask, as a new file's would.
    A full disk is one NoSpace error (``size``: the bytes the whole file needs, when known)."""
    path = Path(path)
    with _parents(path):
        tmp = _made(path, lambda: Path(_temp_file(path, suffix)))
        try:
            yield tmp
            tmp.chmod(0o666 & ~current_umask())
            os.replace(tmp, path)
        except (OSError, NoSpace) as exc:
            if _is_full(exc):
                raise _full(path, size, tmp) from None
            raise
        finally:
            tmp.unlink(missing_ok=True)


def _temp_file(path: Path, suffix: str) -> str:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    return name


@contextlib.contextmanager
def staged_dir(path: Path, size: int = 0) -> Iterator[Path]:
    """A new folder beside ``path`` to fill; it takes ``path``'s place (an earlier one there is
    removed after the swap) when the block ends without an error, and is removed otherwise.
    A full disk is one NoSpace error naming ``path`` (``size``: the bytes needed, if known)."""
    path = Path(path)
    with _parents(path):
        staging = _made(path, lambda: Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-",
                                                             dir=path.parent)))
        try:
            staging.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700
            yield staging
            _swap_in(staging, path)
        except (OSError, NoSpace) as exc:
            if _is_full(exc):  # a writer inside that met it first: the destination is named
                raise _full(path, size, staging) from None
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _parents(path: Path) -> Iterator[None]:
    """The missing folders above ``path`` made; removed again if the block fails."""
    missing = [p for p in reversed(path.absolute().parents) if not p.exists()]
    try:
        for folder in missing:
            _made(path, folder.mkdir)
        yield
    except BaseException:
        for folder in reversed(missing):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _made(path: Path, make: Callable[[], T]) -> T:
    """The staging ``make()`` creates; no room even for that is NoSpace naming ``path``."""
    try:
        return make()
    except OSError as exc:
        if is_no_space(exc):
            raise no_space(path, 4096) from None
        raise


def _full(path: Path, size: int, staging: Path) -> NoSpace:
    """NoSpace for ``path`` once ``staging`` (what was written of it) is removed."""
    written = size_of(staging)
    if staging.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
    staging.unlink(missing_ok=True)
    return no_space(path, max(size, written + 4096))


def _swap_in(staging: Path, out: Path) -> None:
    """Rename ``staging`` to ``out``; an earlier ``out`` is put back if that fails."""
    if not out.exists():
        staging.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    out.rename(old)
    try:
        staging.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_atomic(path: Path, data: str | bytes | Callable[[Path], object]) -> Path:
    """Write text, bytes, or whatever ``data(tmp_path)`` writes, to ``path`` atomically; the
    size of text or bytes is checked against the free space first."""
    size = len(data.encode("utf-8") if isinstance(data, str) else data) \
        if isinstance(data, str | bytes) else 0
    if size:
        check_space(Path(path), size)
    with staged(path, size=size) as tmp:
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
