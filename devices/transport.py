"""Transports: how edge reaches a device. A local device directory offers the same interface
as an SSH session, so the whole deploy path runs without hardware."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edge.core.errors import DeviceError, UsageError

__all__ = ["Completed", "LocalTransport", "Session", "Transport", "check_device_path",
           "default_local_dir", "expand_home"]


def default_local_dir() -> Path:
    """The embedded default device: a directory on this machine driven through the agent."""
    return Path(os.environ.get("EDGE_LOCAL_DEVICE", "~/.cache/edge/local-device")).expanduser()


@dataclass(frozen=True, kw_only=True, slots=True)
class Completed:
    """A finished remote command."""

    status: int
    stdout: str
    stderr: str


class Session(Protocol):
    """A command left running on the device: its stdout read line by line; ``close`` ends its
    stdin (the command sees end of file) and lets go of it."""

    def readline(self) -> str:
        """The command's next stdout line ("" at its end); a DeviceError past the timeout."""
        ...

    def close(self) -> None:
        """Close the command's stdin and release the channel; never raises."""
        ...


class Transport(Protocol):
    """Run commands on a device and copy files to it."""

    label: str
    is_local: bool

    def home(self) -> str:
        """The device user's home directory."""
        ...

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        """Run a command (each argument quoted, never through a shell's word splitting)."""
        ...

    def start(self, argv: list[str], *, timeout: float = 30.0) -> Session:
        """Start a command that runs until its stdin closes (or this process dies)."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to a remote path (the caller makes it atomic)."""
        ...

    def exists(self, remote: str) -> bool:
        """Whether a remote path exists."""
        ...

    def mkdir(self, remote: str) -> None:
        """Create a remote directory and its parents."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...

    def __enter__(self) -> Transport:
        """The transport itself; it is closed on leaving the ``with`` block."""
        ...

    def __exit__(self, *exc: object) -> None:
        """Release the connection (``close``)."""
        ...


class LocalTransport:
    """A device directory on this machine, run with this python."""

    is_local = True

    def __init__(self, root: Path | None = None, python: str | None = None) -> None:
        self.root = (root or default_local_dir()).expanduser().resolve()
        self.python = python or sys.executable
        self.label = f"local:{self.root}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceError(f"cannot create local device dir {self.root}: {exc.strerror}") \
                from None

    def home(self) -> str:
        """The device directory plays the home directory."""
        return str(self.root)

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        """Run argv directly (no shell)."""
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  cwd=self.root, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeviceError(f"local device: {shlex.join(argv[:2])} failed: {exc}") from None
        return Completed(status=done.returncode, stdout=done.stdout, stderr=done.stderr)

    def start(self, argv: list[str], *, timeout: float = 30.0) -> Session:
        """Start argv with a pipe as its stdin (closed when this process dies)."""
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, cwd=self.root)
        except OSError as exc:
            raise DeviceError(f"local device: {shlex.join(argv[:2])} failed: {exc}") from None
        return _LocalSession(proc)

    def put(self, local: Path, remote: str) -> None:
        """Copy a file."""
        try:
            shutil.copyfile(local, remote)
        except OSError as exc:
            raise DeviceError(f"{self.label}: copy of {local.name} failed "
                              f"({exc.strerror or exc})") from None

    def exists(self, remote: str) -> bool:
        """Whether the path exists."""
        return os.path.lexists(remote)

    def mkdir(self, remote: str) -> None:
        """Create the directory."""
        Path(remote).mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> LocalTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LocalSession:
    """A local command left running (the local device is this machine: no timeouts)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def check_device_path(what: str, text: str) -> None:
    """Paths and commands go to the device quoted; control characters are refused outright."""
    if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError(f"{what} {text!r}: empty or contains control characters (newline, "
                         "tab, ...); give a plain path")
    if text.startswith("~") and not (text == "~" or text.startswith("~/")):
        raise UsageError(f"{what} {text!r}: only ~ and ~/... are expanded; give ~/... or an "
                         "absolute path")


def expand_home(path: str, home: str, *, relative: bool = False) -> str:
    """``~`` is the device user's home; with ``relative``, a relative path is under it too."""
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    if relative and not path.startswith("/"):
        return f"{home.rstrip('/')}/{path}"
    return path
