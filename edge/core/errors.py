"""Errors that map to the CLI's exit statuses (see docs/cli.md)."""

from __future__ import annotations

import enum

__all__ = ["CheckFailed", "DeviceError", "EdgeError", "ExitStatus", "UsageError", "first_line"]


def first_line(exc: BaseException) -> str:
    """An exception's first non-empty line (or its type name), at most 200 characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


class ExitStatus(enum.IntEnum):
    """Process exit statuses of every ``edge`` command (130: interrupted).

    INTERNAL is an exception that is not an EdgeError: a bug in edge, never a verdict on the
    model or the device, so a CI gate can tell it from CHECK_FAILED.
    """

    OK = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    DEVICE = 3
    INTERNAL = 4


class EdgeError(Exception):
    """An error the user can act on; its message is one line naming what to fix."""

    status = ExitStatus.BAD_INPUT


class UsageError(EdgeError):
    """Bad input or usage: a file, a flag, a profile."""

    status = ExitStatus.BAD_INPUT


class CheckFailed(EdgeError):
    """A check failed: fidelity, budget or regression."""

    status = ExitStatus.CHECK_FAILED


class DeviceError(EdgeError):
    """The device or the transport to it failed."""

    status = ExitStatus.DEVICE
