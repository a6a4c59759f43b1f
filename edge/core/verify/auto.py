"""Which kind an output is, from ``--metric`` flags or from its shape, name and fp32 values.

Auto-detection only picks a kind when that is sound:

* rows along the last axis that are probability distributions (softmax) or log-probabilities:
  [N, T, C] with T > 1 is a ``sequence`` (``ctc`` when the name says ctc), [N, K] is
  ``classes``;
* [1, K] scores when the data carries labels (the first such output), or named like logits;
* a single value in [0, 1] per sample ([1], [1, 1]) or a [1, K] output in [0, 1] named like
  probabilities/scores is ``probs`` (decisions at 0.5);
* everything else is ``values``. Raw detector heads are never guessed (``yolo``/``ssd`` name
  the layout) and ``regression`` is only ever asked for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge.core.verify.kinds import softmax_rows
from edge.core.verify.spec import Spec

__all__ = ["Picked", "pick_kinds"]

_LOGITS = re.compile(r"logit|class|pred", re.IGNORECASE)
_PROBS = re.compile(r"prob|score|conf|sigmoid", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True, slots=True)
class Picked:
    """An output's kind and why it was picked."""

    spec: Spec
    why: str


def pick_kinds(names: Sequence[str], reference: Sequence[Sequence[np.ndarray]],
               flags: dict[str, Spec], labelled: bool) -> list[Picked]:
    """Each output's kind: its ``--metric`` flag, the ``*`` flag, else auto-detected."""
    picked: list[Picked] = []
    labels_taken = False
    for index, name in enumerate(names):
        if name in flags:
            picked.append(Picked(spec=flags[name], why=f"--metric {name}={flags[name].text()}"))
            continue
        if "*" in flags:
            picked.append(Picked(spec=flags["*"], why=f"--metric *={flags['*'].text()}"))
            continue
        ref = [np.asarray(sample[index]) for sample in reference]
        guess = _detect(name, ref, labelled and not labels_taken)
        labels_taken = labels_taken or (guess.spec.kind == "classes" and "labels" in guess.why)
        picked.append(guess)
    return picked


def _detect(name: str, ref: list[np.ndarray], labels_free: bool) -> Picked:
    """The auto-detected kind of one output (fp32 values, one array per sample)."""
    shape = ref[0].shape if ref else ()
    if not ref or any(r.shape != shape for r in ref) or not all(np.isfinite(r).all() for r in ref):
        return Picked(spec=Spec(kind="values"), why="default (shapes vary or values not finite)")
    dims = list(shape)
    rows = _distribution(ref)
    if len(dims) == 3 and dims[1] > 1 and dims[2] > 1 and rows:
        kind = "ctc" if "ctc" in name.lower() else "sequence"
        return Picked(spec=Spec(kind=kind), why=f"{dims} rows are {rows} over C={dims[2]}"
                      + (" and the name says ctc" if kind == "ctc" else ""))
    if len(dims) == 2 and dims[1] > 1 and rows:
        return Picked(spec=Spec(kind="classes"), why=f"{dims} rows are {rows} over "
                                                     f"K={dims[1]}")
    return _scores(name, dims, ref, labels_free)


def _scores(name: str, dims: list[int], ref: list[np.ndarray], labels_free: bool) -> Picked:
    """Class scores, probabilities or plain values for an output that is not a distribution."""
    single_row = len(dims) == 2 and dims[0] == 1 and dims[1] > 1
    if single_row and labels_free:
        return Picked(spec=Spec(kind="classes"), why=f"{dims} scores and the data has labels")
    if single_row and _LOGITS.search(name):
        return Picked(spec=Spec(kind="classes"), why=f"{dims} scores named '{name}'")
    unit = all(np.all((r >= 0) & (r <= 1)) for r in ref)
    if unit and int(np.prod(dims)) == 1:
        return Picked(spec=Spec(kind="probs"), why=f"one value in [0, 1] per sample {dims}")
    if unit and single_row and _PROBS.search(name):
        return Picked(spec=Spec(kind="probs"), why=f"{dims} values in [0, 1] named '{name}'")
    return Picked(spec=Spec(kind="values"), why="default: no task shape recognised")


def _distribution(ref: list[np.ndarray]) -> str:
    """'softmax' or 'log-softmax' when every last-axis row is one, else ''."""
    if softmax_rows(ref):
        return "softmax"
    if ref[0].ndim and ref[0].shape[-1] > 1 and all(
            np.all(r <= 1e-6) and np.allclose(np.exp(r).sum(-1), 1.0, atol=1e-3) for r in ref):
        return "log-softmax"
    return ""
