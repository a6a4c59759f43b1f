"""``--shape NAME=DIMS[:DTYPE]`` flags."""

from __future__ import annotations

from collections.abc import Sequence

from edge.core.errors import UsageError
from edge.core.intake.common import DTYPES, Shapes


def parse_shapes(texts: Sequence[str]) -> Shapes:
    """``--shape NAME=1,3,224,224`` flags (repeatable) as {name: dims}."""
    return parse_shape_flags(texts)[0]


def parse_shape_flags(texts: Sequence[str]) -> tuple[Shapes, dict[str, str]]:
    """``--shape NAME=DIMS[:DTYPE]`` flags as ({name: dims}, {name: dtype}); dtype is optional."""
    shapes: Shapes = {}
    dtypes: dict[str, str] = {}
    for text in texts:
        name, dims, dtype = _parse_one(text)
        if name in shapes:
            raise UsageError(f"--shape {text}: input '{name}' is given twice")
        shapes[name] = dims
        if dtype is not None:
            dtypes[name] = dtype
    return shapes, dtypes


def _parse_one(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """One flag: NAME=DIMS[:DTYPE]; the last '=' splits, so names may contain '='."""
    name, eq, rest = text.rpartition("=")
    if not eq or not name.strip():
        raise UsageError(f"--shape {text!r}: expected NAME=DIMS, e.g. --shape input=1,3,224,224")
    body, colon, dtype = rest.partition(":")
    if colon and dtype.strip() not in DTYPES:
        raise UsageError(f"--shape {text}: unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    parts = [p.strip() for p in body.replace("x", ",").split(",")]
    if not body.strip() or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UsageError(f"--shape {text}: dims must be positive integers separated by commas, "
                         "e.g. --shape input=1,3,224,224")
    return name.strip(), tuple(int(p) for p in parts), (dtype.strip() if colon else None)
