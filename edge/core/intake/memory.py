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
from edge.core.intake.common import NoOnnxReference

__all__ = ["failure_marker", "remembered_failure"]


def failure_marker(out: Path) -> Path:
    """Where the failure of the conversion that would write ``out`` is kept."""
    return out.with_suffix(".failed.txt")


@contextlib.contextmanager
def remembered_failure(out: Path, source: Path) -> Iterator[None]:
    """Raise the remembered failure at once; else run the block and remember how it fails.

    Conversion and parity failures are remembered; a timeout is not (the host may be busy).
    """
    marker = failure_marker(out)
    if marker.is_file():
        raise NoOnnxReference(f"{marker.read_text().strip()} (remembered from an earlier run: "
                              f"{marker.name}; delete it to retry)")
    try:
        yield
    except UsageError as exc:
        if "timed out" in str(exc):
            raise
        tmp = marker.with_name(f"{marker.name}.{os.getpid()}")
        tmp.write_text(str(exc))
        os.replace(tmp, marker)
        raise NoOnnxReference(str(exc)) from None
