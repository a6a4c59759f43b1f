"""Reading document files: the one reader of every document edge reads on this host (bundle
manifests, split.yaml, result records, profiles). Errors are one line naming the file, and the
line for YAML, never the file's content."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from edge.core.errors import UsageError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "check_depth", "check_version", "loads", "read_data"]

#: Deepest nesting a document may have: deeper input is refused.
MAX_DEPTH = 64
#: Most values (mappings, lists and scalars, aliases expanded) a document may hold.
MAX_VALUES = 1_000_000


def read_data(path: Path, fmt: str | None = None) -> Any:
    """A JSON or YAML file's data (``fmt`` "json" or "yaml"; default by suffix, YAML unless
    ``.json``), its nesting checked."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                         ) from None
    data = loads(text, fmt or ("json" if Path(path).suffix == ".json" else "yaml"), str(path))
    check_depth(data, str(path))
    return data


def loads(text: str, fmt: str, where: str) -> Any:
    """JSON or YAML text parsed; a syntax error is one line (with the YAML line)."""
    try:
        if fmt == "json":
            return json.loads(text)
        return yaml.safe_load(text)
    except RecursionError:
        raise UsageError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # noqa: BLE001 - json and yaml raise their own types
        mark = getattr(exc, "problem_mark", None)  # yaml's position, when it has one
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{where}: not valid {fmt.upper()}{line}") from None


def check_depth(data: Any, where: str) -> None:
    """Refuse data nested deeper than MAX_DEPTH or holding more than MAX_VALUES values
    (iteratively: no recursion; YAML aliases that expand a few lines into billions of values
    are caught after MAX_VALUES steps, not walked for minutes)."""
    stack = [(data, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            raise UsageError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if seen > MAX_VALUES:
            raise UsageError(f"{where}: more than {MAX_VALUES:,} values (YAML aliases "
                             "expanding?); edge's documents are far smaller")
        children = value.values() if isinstance(value, dict) else (
            value if isinstance(value, list) else ())
        stack.extend((child, depth + 1) for child in children)


def check_version(data: dict[str, Any], name: str, key: str, versions: Sequence[int],
                  absent: int | None, where: str) -> int:
    """The document's version; a version this edge does not read is a UsageError."""
    version = data.get(key, absent)
    if not isinstance(version, int) or isinstance(version, bool) or version not in versions:
        raise UsageError(f"{where}: {name} {key} {version!r} is not one this edge reads "
                         f"({', '.join(map(str, versions))}); a newer edge may have written it")
    return version
