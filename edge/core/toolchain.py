"""Toolchain environments: a vendor converter whose pins clash with edge's runs in its own venv.

A target declares its converter's distributions in a ``Toolchain``: every distribution of the
environment, each pinned (``name==version``), so the set is a lock. edge builds a virtual
environment for it once, when asked (``edge toolchains install``: a plan whose candidate needs
an unbuilt one skips it saying so), with the pip and the package index the user's pip uses
(``python -m venv``, then ``pip install`` under the inherited pip configuration), checks it
with ``pip check``, and runs the converter there as a bounded child process (``run``).

Environments live under ``EDGE_TOOLCHAIN_DIR`` (default ``<cache root>/toolchains``), one
directory per toolchain, Python version and requirement set (``Toolchain.dirname``). One is
built only once its record (``edge-toolchain.json``, written last and atomically) exists: a
half-built environment is never used, and the next build wipes it. Builds, removals and uses
of one environment are serialized by a lock file beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.core.cache import cache_root
from edge.core.errors import UsageError, first_line
from edge.core.files import write_atomic

__all__ = ["RECORD", "BuiltToolchain", "Toolchain", "ToolchainError", "build", "built",
           "disk_bytes", "location", "remove", "require_built", "run", "toolchain_root",
           "unbuilt"]

RECORD = "edge-toolchain.json"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
#: variables of edge's own interpreter that must not reach the toolchain's
_REAP_S = 5.0  # how long a killed child may take to close its pipes
_DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONEXECUTABLE")


class ToolchainError(UsageError):
    """A toolchain environment could not be built or its command failed (one line)."""


def canonical(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _python() -> str:
    """This interpreter's version as environments are keyed by it: ``3.11``."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Toolchain:
    """A converter's own environment, declared: every distribution in it, pinned."""

    name: str
    requirements: tuple[str, ...]  # every distribution of the environment, ``name==version``
    records: tuple[str, ...] = ()  # key distributions recorded in cache keys and manifests
    build_timeout_s: int = 3600  # the whole build (download, install, check)
    #: what building it costs a new machine, measured by bench/toolchains.py (0: not measured):
    #: the pinned wheels downloaded and the environment on disk, in MB
    wheels_mb: int = 0
    installed_mb: int = 0

    def __post_init__(self) -> None:
        loose = [r for r in self.requirements if not _PIN.match(r)]
        if loose or not self.requirements:
            raise ValueError(f"toolchain {self.name}: every requirement must be pinned "
                             f"name==version, not {loose or 'nothing'}")
        if bool(self.wheels_mb) != bool(self.installed_mb):
            raise ValueError(f"toolchain {self.name}: wheels_mb and installed_mb are measured "
                             "together (bench/toolchains.py), or not at all")
        unknown = sorted({canonical(r) for r in self.records} - set(self.pins))
        if unknown:
            raise ValueError(f"toolchain {self.name}: records {unknown} are not requirements")

    @property
    def pins(self) -> dict[str, str]:
        """Each requirement's canonical name and pinned version."""
        found = (_PIN.match(r) for r in self.requirements)
        return {canonical(m.group(1)): m.group(2) for m in found if m}

    @property
    def key(self) -> str:
        """12 hex digits over the requirement set, the Python version and the machine."""
        text = json.dumps([sorted(self.pins.items()), _python(), sys.implementation.name,
                           platform.machine()])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def dirname(self) -> str:
        """The environment's directory name: ``NAME-py311-KEY``."""
        return f"{self.name}-py{_python().replace('.', '')}-{self.key}"

    def versions(self) -> dict[str, str]:
        """What cache keys and manifests record: the Python version, the environment's key and
        each key distribution's version (all of them pinned, so known before a build)."""
        names = [canonical(r) for r in self.records] or list(self.pins)
        return {"python": _python(), "toolchain": self.key} | {n: self.pins[n] for n in names}


@dataclass(frozen=True, kw_only=True, slots=True)
class BuiltToolchain:
    """A built environment, as its record says."""

    toolchain: Toolchain
    path: Path
    python_version: str  # the interpreter's full version, e.g. 3.11.7
    installed: dict[str, str] = field(default_factory=dict)  # every distribution (pip list)
    seconds: float = 0.0  # how long the build took
    built_at: str = ""

    @property
    def python(self) -> Path:
        """The environment's interpreter."""
        return self.path / "bin" / "python"


def toolchain_root() -> Path:
    """Where toolchain environments live (``EDGE_TOOLCHAIN_DIR`` overrides)."""
    override = os.environ.get("EDGE_TOOLCHAIN_DIR")
    return Path(override).expanduser() if override else cache_root() / "toolchains"


def location(toolchain: Toolchain) -> Path:
    """The directory of the toolchain's environment (built or not)."""
    return toolchain_root() / toolchain.dirname


def built(toolchain: Toolchain) -> BuiltToolchain | None:
    """The built environment, or None while it is not (completely) built: no record, a record
    that is not the one edge writes (not a regular file, over 1 MB, not a JSON object of its
    fields), or an environment folder that is a link (never followed out of the cache)."""
    path = location(toolchain)
    data = _record_of(path)
    if (data is None or data.get("key") != toolchain.key or path.is_symlink()
            or not (path / "bin" / "python").exists()):
        return None
    return BuiltToolchain(toolchain=toolchain, path=path, python_version=data["python"],
                          installed=data["installed"], seconds=data["seconds"],
                          built_at=data["built_at"])


#: The largest record edge reads (its own are a few KB).
_MAX_RECORD = 1 << 20
_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str, "python": str, "installed": dict, "seconds": (int, float), "built_at": str}


def _record_of(path: Path) -> dict[str, Any] | None:
    """The environment's record, read as data: a regular file, not through a link, bounded."""
    try:
        handle = os.open(path / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_RECORD:
        os.close(handle)
        return None
    with os.fdopen(handle, "rb") as record:
        try:
            data = json.loads(record.read(_MAX_RECORD))
        except (OSError, ValueError, RecursionError):
            return None
    fits = isinstance(data, dict) and all(isinstance(data.get(k), kind)
                                          for k, kind in _RECORD_FIELDS.items())
    return data if fits and math.isfinite(data["seconds"]) else None


def unbuilt(toolchain: Toolchain) -> str | None:
    """Why a candidate needing ``toolchain`` is not converted here (None: it is built): edge
    builds an environment only when asked, because building downloads its packages."""
    if built(toolchain) is not None:
        return None
    return (f"its toolchain {toolchain.name} is not built: run edge toolchains install "
            f"{toolchain.name} (it downloads its pinned packages{_cost(toolchain)}; edge "
            "reaches the network only then)")


def _cost(toolchain: Toolchain) -> str:
    """``, 1.98 GB of wheels, 3.97 GB installed`` when measured, else nothing."""
    if not toolchain.wheels_mb:
        return ""
    return f", {_mb(toolchain.wheels_mb)} of wheels, {_mb(toolchain.installed_mb)} installed"


def _mb(mb: int) -> str:
    return f"{mb / 1000:.2f} GB" if mb >= 1000 else f"{mb} MB"


def require_built(toolchain: Toolchain) -> BuiltToolchain:
    """The built environment; ToolchainError (saying how to build it) while it is not."""
    env = built(toolchain)
    if env is None:
        raise ToolchainError(f"toolchain {toolchain.name} is not built: run edge toolchains "
                             f"install {toolchain.name}")
    return env


def build(toolchain: Toolchain) -> BuiltToolchain:
    """Build the environment unless it is built; a failed build leaves nothing behind.

    Raises ToolchainError naming what failed (venv, pip install, pip check, a pin that pip
    did not honour, the time limit).
    """
    path = location(toolchain)
    with _locked(path):
        done = built(toolchain)
        if done is not None:
            return done
        _clear(path)  # what an interrupted build left
        started = time.monotonic()
        try:
            installed = _install(toolchain, path, started + toolchain.build_timeout_s)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return _record(toolchain, path, installed, time.monotonic() - started)


def remove(toolchain: Toolchain) -> bool:
    """Delete the environment (built or half-built); whether there was one."""
    path = location(toolchain)
    if not (path.exists() or path.is_symlink()):
        return False
    with _locked(path):
        _clear(path)
    return True


def _clear(path: Path) -> None:
    """The environment folder gone: a link only unlinked (nothing of its target touched);
    a folder's record first, so it is no longer built even if the rest lingers."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
        return
    with contextlib.suppress(OSError):  # a record that is a folder goes with the rest
        (path / RECORD).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def run(toolchain: Toolchain, args: Sequence[str], *, timeout_s: float,
        cwd: Path | None = None, what: str = "") -> str:
    """Run ``python ARGS`` in the built environment, bounded; its stdout.

    Raises ToolchainError when it is not built, fails (its last line of stderr says why) or
    runs past ``timeout_s`` (it is killed, with every process it started).
    """
    label = what or f"{toolchain.name} {' '.join(args[:1])}"
    with _locked(location(toolchain), shared=True):  # not removed or rebuilt meanwhile
        env = require_built(toolchain)
        return _bounded([str(env.python), *args], label, timeout_s, cwd=cwd)


def disk_bytes(path: Path) -> int:
    """The size of the files under ``path`` (links not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


# ---------------------------------------------------------------- building
def _install(toolchain: Toolchain, path: Path, deadline: float) -> dict[str, str]:
    """Make the venv, install the requirements (each pinned, nothing else), check it; every
    distribution installed."""
    name = toolchain.name
    path.parent.mkdir(parents=True, exist_ok=True)
    _bounded([sys.executable, "-m", "venv", str(path)], f"toolchain {name}: python -m venv",
             _left(deadline))
    pip = [str(path / "bin" / "python"), "-m", "pip"]
    _bounded([*pip, "install", "--no-input", "--disable-pip-version-check", "--no-deps",
              "--only-binary=:all:", *toolchain.requirements],
             f"toolchain {name}: pip install", _left(deadline))
    _bounded([*pip, "check"], f"toolchain {name}: pip check", _left(deadline), stdout_why=True)
    listed = _bounded([*pip, "list", "--format=json", "--disable-pip-version-check"],
                      f"toolchain {name}: pip list", _left(deadline))
    installed = {canonical(d["name"]): d["version"] for d in json.loads(listed)}
    wrong = {n: installed.get(n, "absent") for n, v in toolchain.pins.items()
             if installed.get(n) != v}
    if wrong:
        raise ToolchainError(f"toolchain {name}: pip installed other versions than pinned: "
                             + ", ".join(f"{n} {v}" for n, v in sorted(wrong.items())))
    return installed


def _record(toolchain: Toolchain, path: Path, installed: dict[str, str],
            seconds: float) -> BuiltToolchain:
    """Write the record that makes the environment built; what it says."""
    env = BuiltToolchain(toolchain=toolchain, path=path, python_version=platform.python_version(),
                         installed=installed, seconds=round(seconds, 1),
                         built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    document = {"name": toolchain.name, "key": toolchain.key,
                "requirements": list(toolchain.requirements), "python": env.python_version,
                "installed": installed, "seconds": env.seconds, "built_at": env.built_at}
    write_atomic(path / RECORD, json.dumps(document, indent=2) + "\n")
    return env


def _left(deadline: float) -> float:
    """Seconds left before the deadline (at least one, so a late step still fails clearly)."""
    return max(1.0, deadline - time.monotonic())


@contextlib.contextmanager
def _locked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold the environment's lock file (beside it) for the block: exclusive to build or
    remove, shared to run in it."""
    lock = path.with_name(f"{path.name}.lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise ToolchainError(f"cannot use {lock} as a toolchain lock: {exc.strerror} (remove "
                             "it, or set EDGE_TOOLCHAIN_DIR to a writable directory)") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device: never wait on it
            raise ToolchainError(f"{lock} is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------- bounded child processes
def _bounded(command: list[str], what: str, timeout_s: float, *, cwd: Path | None = None,
             stdout_why: bool = False) -> str:
    """Run ``command`` in its own process group, output captured; its stdout. Past the limit
    the whole group is killed; a failure is one line: its last line of stderr (of stdout too
    with ``stdout_why``: pip check reports there)."""
    try:
        child = subprocess.Popen(command, cwd=cwd, env=_child_env(), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
    except OSError as exc:
        raise ToolchainError(f"{what}: cannot start {command[0]}: {exc.strerror}") from None
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(child)
        raise ToolchainError(f"{what}: still running after its {timeout_s:.0f} s limit; "
                             "stopped") from None
    except BaseException:
        _kill(child)
        raise
    if child.returncode != 0:
        why = _why(err + (out if stdout_why else ""))
        raise ToolchainError(f"{what} failed (exit {child.returncode}): {why}")
    return out


def _kill(child: subprocess.Popen[str]) -> None:
    """Kill the child and everything it started; reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    try:  # a grandchild that left the group may still hold the pipes: do not wait for it
        child.communicate(timeout=_REAP_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _why(text: str) -> str:
    """The line of a child's output that says why it failed: its last ``ERROR:`` line (pip),
    else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    chosen = (errors or lines or ["(no output)"])[-1]
    return first_line(RuntimeError(chosen))


def _child_env() -> dict[str, str]:
    """edge's environment without what would point the child at edge's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    return env | {"PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
