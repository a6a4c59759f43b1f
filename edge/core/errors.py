"""Errors that map to the CLI's exit statuses (see docs/cli.md)."""

from __future__ import annotations

import enum

__all__ = ["CheckFailed", "DeviceError", "EdgeError", "ExitStatus", "PruneError", "UsageError",
           "first_line"]


#: How long a one-line reason may be; a longer one keeps its start and its end.
REASON_CHARS = 240


def first_line(exc: BaseException) -> str:
    """An exception's reason on one line (its type name if it has none).

    Its first non-empty line, continued while a line ends mid-sentence (",", ":", "("); a
    reason longer than ``REASON_CHARS`` keeps its start and its end, where runtimes put the
    actual error (ONNX Runtime: "... In Node, (...) : ..., Error Unrecognized attribute ...").
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0]
    for line in lines[1:]:
        if not text.endswith((",", ":", "(", "[", "{")):
            break
        text = f"{text} {line}"
    return _shortened(text, REASON_CHARS)


def _shortened(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its start ... its end."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} ... {text[len(text) - (limit - head - 5):]}"


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


class PruneError(Exception):
    """The model cannot be pruned here; the message says why (one line)."""
