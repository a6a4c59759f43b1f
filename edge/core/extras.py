"""Optional parts of edge and the extra that installs each: one error line when one is missing."""

from __future__ import annotations

import importlib.util

from edge.core.errors import UsageError

__all__ = ["hint", "missing", "require"]


def missing(*modules: str) -> list[str]:
    """The top-level modules among ``modules`` that are not installed."""
    return [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]


def hint(extra: str) -> str:
    """How to install ``extra``: ``pip install 'edge[EXTRA]'``."""
    return f"pip install 'edge[{extra}]'"


def require(extra: str, *modules: str, why: str) -> None:
    """UsageError (exit 2) naming what ``why`` needs and the extra to install, when any of
    ``modules`` is missing."""
    absent = missing(*modules)
    if absent:
        raise UsageError(f"{why} needs {', '.join(absent)}: {hint(extra)}")
