"""Which of a row's outputs is which of the reference's: by name, else by shape, else NHWC.

A peer's runtime may rename, reorder or transpose outputs (onnx2tf writes NHWC tensors and its
own names). Each reference output takes the row's output of the same name (same shape, or its
NHWC transpose), else the first unused one of the same shape (in order), else the first unused
one whose shape is the NHWC transpose of the reference's (transposed back). An output nothing
matches makes the whole row unmatched: ``MatchError`` says which and what the row has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: channels-last transposes onnx2tf applies to a channels-first tensor, by rank
NHWC = {3: (0, 2, 1), 4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}


class MatchError(ValueError):
    """A reference output no output of the row matches."""


@dataclass(frozen=True)
class Pick:
    """Reference output ``name`` is the row's output ``index``, transposed back if ``back``."""

    name: str
    index: int
    how: str  # "name" | "shape" | "NHWC transpose"
    back: tuple[int, ...] | None = None


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    perm = NHWC.get(len(shape))
    return tuple(shape[p] for p in perm) if perm else None


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def _fits(ref: tuple[int, ...], got: tuple[int, ...]) -> tuple[bool, tuple[int, ...] | None]:
    """(matches, axes to transpose ``got`` back by): same shape, or ref's NHWC transpose."""
    if got == ref:
        return True, None
    if got == _nhwc(ref):
        return True, _inverse(NHWC[len(ref)])
    return False, None


def _plain(name: str) -> str:
    """A tensor name without a ``:0`` suffix or a ``serving_default_`` prefix."""
    return name.split(":")[0].removeprefix("serving_default_")


def _by_name(name: str, shape: tuple[int, ...], names: Sequence[str],
             shapes: Sequence[tuple[int, ...]], used: set[int]) -> Pick | None:
    for j, other in enumerate(names[:len(shapes)]):
        ok, back = _fits(shape, shapes[j])
        if j not in used and ok and _plain(other) == _plain(name):
            return Pick(name, j, "name", back)
    return None


def _by_shape(name: str, shape: tuple[int, ...], shapes: Sequence[tuple[int, ...]],
              used: set[int]) -> Pick | None:
    free = [j for j in range(len(shapes)) if j not in used]
    same = [j for j in free if shapes[j] == shape]
    if same:
        return Pick(name, same[0], "shape")
    turned = [j for j in free if _fits(shape, shapes[j])[0]]
    if turned:
        return Pick(name, turned[0], "NHWC transpose", _fits(shape, shapes[turned[0]])[1])
    return None


def match(ref_names: Sequence[str], ref: Sequence[np.ndarray], names: Sequence[str],
          got: Sequence[np.ndarray]) -> list[Pick]:
    """The row's output for each reference output (from one sample's outputs of each)."""
    shapes = [tuple(np.shape(g)) for g in got]
    used: set[int] = set()
    picks = []
    for name, array in zip(ref_names, ref, strict=True):
        shape = tuple(np.shape(array))
        pick = _by_name(name, shape, names, shapes, used) or _by_shape(name, shape, shapes, used)
        if pick is None:
            raise MatchError(f"reference output {name!r} {list(shape)}: no unused output of this "
                             f"row has that shape or its NHWC transpose (row outputs: "
                             f"{_listing(names, shapes)})")
        used.add(pick.index)
        picks.append(pick)
    return picks


def _listing(names: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> str:
    return ", ".join(f"{n} {list(s)}" for n, s in zip(names, shapes, strict=False)) or "none"


def apply(picks: Sequence[Pick], got: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One sample's outputs in the reference's order and layout."""
    out = []
    for pick in picks:
        array = np.asarray(got[pick.index])
        out.append(array.transpose(pick.back) if pick.back else array)
    return out


def describe(picks: Sequence[Pick], names: Sequence[str]) -> list[str]:
    """How each reference output was matched, one line each (for the JSON)."""
    return [f"{p.name} <- {names[p.index] if p.index < len(names) else p.index} (by {p.how}"
            + (f", transposed {list(p.back)})" if p.back else ")") for p in picks]
