"""Sizes as edge prints them and as its budgets count them: a megabyte is 2**20 bytes."""

from __future__ import annotations

__all__ = ["KB", "MB", "size_text"]

KB = 2**10
MB = 2**20
_UNITS = (("PB", 2**50), ("TB", 2**40), ("GB", 2**30), ("MB", MB), ("KB", KB))


def size_text(size: float) -> str:
    """``size`` bytes as every table and message prints it: '1.23 MB', '4.5 KB', '12 B'."""
    for unit, scale in _UNITS:
        if size >= scale:
            return f"{size / scale:.{1 if unit == 'KB' else 2}f} {unit}"
    return f"{size:.0f} B"
