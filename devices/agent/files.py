"""Files on the device: sha256, fsync, atomic JSON writes."""

import hashlib
import json
import os

from .errors import AgentError


def sha256_file(path):
    """Hex sha256 of a file (unreadable: exit 2)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise AgentError(f"cannot read {path}: {exc.strerror}", status=2) from None
    return digest.hexdigest()


def fsync(path):
    """Flush a file or a directory entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path, document):
    """Write JSON to a fresh temporary file, fsync it, rename it over ``path``."""
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync(os.path.dirname(path) or ".")


def unlink_quietly(path):
    """Remove a file if it is there."""
    try:
        os.unlink(path)
    except OSError:
        pass
