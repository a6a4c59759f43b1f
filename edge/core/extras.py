"""Optional parts of edge and the extra that installs each: one error line when one is missing."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence

from edge.core.errors import UsageError

__all__ = ["hint", "missing", "not_installed", "require"]

#: A plan reason naming a missing extra (``targets.base.missing_modules``).
_HINT = re.compile(r"^cannot convert on this host: .* not installed "
                   r"\(pip install 'edge\[(\w+)\]'\)$")


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


def not_installed(reasons: Sequence[str]) -> tuple[list[str], str | None]:
    """Reasons as a table shows them, each missing extra said once: a candidate skipped because
    its extra is not installed reads ``edge[EXTRA] not installed``, and one line after the table
    names every such extra with the pip command (None when none is missing)."""
    extras: list[str] = []
    shown = []
    for reason in reasons:
        found = _HINT.match(reason)
        if found is None:
            shown.append(reason)
            continue
        extras.append(found.group(1))
        shown.append(f"edge[{found.group(1)}] not installed here (see below)")
    if not extras:
        return shown, None
    names = ",".join(dict.fromkeys(extras))
    return shown, (f"not installed here, so not tried (not a failure; the other runtimes "
                   f"compete): pip install 'edge[{names}]' adds them")
