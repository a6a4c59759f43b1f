"""A venv with edge and nothing but its base dependencies (`pip install -e .`): where every
optional extra is absent. CI builds it before the tests ($EDGE_BASE_VENV); elsewhere it is built
once per pyproject.toml under the user's cache, under a lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ROOT", "base_venv"]

ROOT = Path(__file__).parents[2]
_READY = "edge-base-ready"
_BUILD_TIMEOUT_S = 1200


def base_venv() -> Path:
    """The base venv's folder, built when it is not there yet."""
    given = os.environ.get("EDGE_BASE_VENV")
    venv = Path(given) if given else _cached_path()
    with _locked(venv.with_name(venv.name + ".lock")):
        if not (venv / _READY).is_file():
            _build(venv)
    return venv


def _cached_path() -> Path:
    """~/.cache/edge-test/base-venv-<this checkout and its pyproject.toml>."""
    key = hashlib.sha256(str(ROOT).encode() + (ROOT / "pyproject.toml").read_bytes())
    return Path.home() / ".cache" / "edge-test" / f"base-venv-{key.hexdigest()[:12]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _build(venv: Path) -> None:
    """`python -m venv` and `pip install -e ROOT` (base dependencies only), then the marker."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=_BUILD_TIMEOUT_S)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)],
                   check=True, timeout=_BUILD_TIMEOUT_S)
    (venv / _READY).write_text("ok\n")
