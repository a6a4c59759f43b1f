"""A failed conversion is remembered beside the reference it would have made.

The reference's cache path holds the source's content, the options and every converter's
version, so the marker is asked again only after an upgrade of a converter (or another source):
a model no converter reads fails at once on every rerun, without starting TensorFlow again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from edge.core.errors import UsageError
from edge.core.files import NoSpace, filled, no_space_as
from edge.core.intake.common import STOPPED, NoOnnxReference

__all__ = ["failure_marker", "remembered_failure"]


def failure_marker(out: Path) -> Path:
    """Where the failure of the conversion that would write ``out`` is kept."""
    return out.with_suffix(".failed.txt")


@contextlib.contextmanager
def remembered_failure(out: Path, source: Path) -> Iterator[None]:
    """Raise the remembered failure at once; else run the block and remember how it fails.

    Conversion and parity failures are remembered; a timeout is not (the host may be busy),
    nor a converter killed by a signal (an interrupted run, the OOM killer).
    """
    marker = failure_marker(out)
    remembered = _remembered(marker)
    if remembered:
        raise NoOnnxReference(f"{remembered} (remembered from an earlier run: "
                              f"{marker.name}; delete it to retry)")
    try:
        with no_space_as(out):  # a full disk is the host's, not the model's: never remembered
            yield
    except NoSpace:
        raise
    except UsageError as exc:
        if "timed out" in str(exc) or STOPPED in str(exc):  # the host's, not the model's
            raise
        _remember(marker, str(exc))
        raise NoOnnxReference(str(exc)) from None


def _remembered(marker: Path) -> str:
    """The failure a marker keeps; '' (and the marker removed) when there is none, or it is
    unreadable, empty or a full disk's (an earlier run's: the space may be free now)."""
    try:
        text = marker.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    if not text or filled(None, text):
        marker.unlink(missing_ok=True)
        return ""
    return text


def _remember(marker: Path, text: str) -> None:
    """Keep ``text`` in ``marker`` whole or not at all (a full disk keeps nothing)."""
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, marker)
    except OSError:
        tmp.unlink(missing_ok=True)
