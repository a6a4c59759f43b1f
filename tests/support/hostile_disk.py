"""Hostile corpus cases of issue 27 (hostile_disk); see tests/support/hostile.py."""

from __future__ import annotations

from collections.abc import Iterator

from tests.support.hostile import Case


def cases() -> Iterator[Case]:
    yield from ()
