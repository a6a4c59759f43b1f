"""Which kind an output is, from ``--metric`` flags or from what it really outputs.

The observed fp32 outputs decide (their shape, dtype and values on the held-out samples); the
graph's declared shape and the op that computed the output (``TensorSpec.last_op``, read at
intake) are hints. Auto-detection only picks a kind when that is sound:

* integers from ArgMax/ArgMin/TopK, and any integer or boolean output (ids, counts, masks),
  are ``exact`` (every value must stay the same);
* floats that barely vary over the samples (spread across them below ``kinds.FLAT``, 1e-7, of
  their values: wrong preprocessing, an untrained model) are ``values`` scaled by their
  values: a task judged on their noise would mean nothing;
* values in [0, 1] computed by a Sigmoid are ``probs`` (decisions at 0.5), whatever the shape;
* time-first class scores [T, 1, C], as PyTorch's CTC writes them, are ``ctc`` (with
  ``layout=tnc``) when one class, 0 or C - 1, is the arg-max on most frames (the blank,
  recorded as ``blank=``); [N, T, C] or [T, 1, C] scores named ctc are ``ctc``; [N, T, C]
  rows that are distributions (softmax, log-softmax) are a ``sequence`` (a blank there is only
  pointed out in the reason: per-anchor detector scores have a background class too);
* rows along the last axis that are distributions, [N, K], are ``classes``;
* [1, K] scores when the data carries labels (the first such output), or named like logits;
* one vector per sample ([D], [1, D], D >= 16) of length 1, pooled (GlobalAveragePool,
  ReduceMean, LpNormalization, ...) or named like an embedding is an ``embedding``;
* [1, K] logits (K >= 16) that sit far below 0 on most labels of every sample (median at most
  -2: sigmoid 0.12), as a sigmoid multi-label head's do, are ``multilabel``;
* a single value in [0, 1] per sample ([1], [1, 1]) or a [1, K] output in [0, 1] named like
  probabilities/scores is ``probs``;
* everything else is ``values``, and its reason says how to name its kind. Raw detector heads
  are never guessed (``yolo``/``ssd`` name the layout), ``regression`` is only ever asked for.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge.core.values import TensorSpec
from edge.core.verify.embed import unit_norm
from edge.core.verify.kinds import KINDS, flat, softmax_rows
from edge.core.verify.spec import Spec

__all__ = ["Picked", "pick_kinds", "warn_flat"]

log = logging.getLogger("edge")

_LOGITS = re.compile(r"logit|class|pred", re.IGNORECASE)
_PROBS = re.compile(r"prob|score|conf|sigmoid", re.IGNORECASE)
_INDEX_OPS = frozenset({"ArgMax", "ArgMin", "TopK"})
_EMBEDDING = re.compile(r"embed|feature|vector|pool|encod|descriptor", re.IGNORECASE)
_POOLING = frozenset({"GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax",
                      "LpNormalization", "AVERAGE_POOL_2D", "MEAN", "L2_NORMALIZATION"})
_EMBEDDING_SIZE = 16  # shorter vectors are more often a handful of regressed values
_LABELS = 16
_ABSENT_LOGIT = -2.0  # sigmoid 0.12: a label that is absent
_BLANK_SHARE = 0.5  # a CTC blank is the arg-max on at least this share of frames
#: a blank and at least two labels: with C = 2 "class 0 or C - 1 on most frames" is merely the
#: majority class of a two-class frame classifier (speech/no speech), which CTC's decoded
#: strings would judge far more loosely than its frames (a shifted boundary decodes the same)
_CTC_CLASSES = 3
#: ops whose [T, 1, H] outputs are hidden states, not class scores (a unit may dominate them)
_RECURRENT = frozenset({"LSTM", "GRU", "RNN"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Picked:
    """An output's kind and why it was picked."""

    spec: Spec
    why: str


@dataclass(frozen=True, kw_only=True, slots=True)
class _Seen:
    """One output as observed, with the graph's hints: what a reason cites."""

    name: str
    ref: list[np.ndarray]
    declared: tuple[int | str, ...] | None
    last_op: str

    @property
    def dims(self) -> list[int]:
        return list(self.ref[0].shape)

    def text(self) -> str:
        """'observed [T, 1, C] (declared [1, seqlen]), last op Sigmoid'."""
        shown = f"observed {self.dims}"
        if self.declared is not None and not _fits(self.declared, self.dims):
            shown += f" (declared [{', '.join(str(d) for d in self.declared)}])"
        return shown + (f", last op {self.last_op}" if self.last_op else "")


def pick_kinds(names: Sequence[str], reference: Sequence[Sequence[np.ndarray]],
               flags: dict[str, Spec], labelled: bool,
               declared: Sequence[TensorSpec] = ()) -> list[Picked]:
    """Each output's kind: its ``--metric`` flag, the ``*`` flag, else auto-detected from its
    fp32 values (``declared``: the graph's outputs, whose shapes and last ops are hints)."""
    hints = {spec.name: spec for spec in declared}
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
        guess = _detect(name, ref, labelled and not labels_taken, hints.get(name))
        labels_taken = labels_taken or (guess.spec.kind == "classes" and "labels" in guess.why)
        picked.append(guess)
    return picked


def warn_flat(names: Sequence[str], reference: Sequence[Sequence[np.ndarray]]) -> None:
    """A warning for each float output of the original that barely varies over the samples."""
    for index, name in enumerate(names):
        words = _flat_words(name, [np.asarray(sample[index]) for sample in reference])
        if words:
            log.warning("%s", words)


def _detect(name: str, ref: list[np.ndarray], labels_free: bool,
            hint: TensorSpec | None) -> Picked:
    """The auto-detected kind of one output (fp32 values, one array per sample)."""
    shape = ref[0].shape if ref else ()
    if not ref or any(r.shape != shape for r in ref) or not all(np.isfinite(r).all() for r in ref):
        return _unknown(name, "default (shapes vary or values not finite)")
    seen = _Seen(name=name, ref=ref, declared=hint.shape if hint else None,
                 last_op=hint.last_op if hint else "")
    return (_indices(seen) or _integers(seen) or _flat(seen) or _sigmoid(seen)
            or _sequence(seen) or _classes(seen) or _scores(seen, labels_free))


def _flat(seen: _Seen) -> Picked | None:
    """Floats that barely vary over the samples: no task can be judged on their noise."""
    words = _flat_words(seen.name, seen.ref)
    return Picked(spec=Spec(kind="values"), why=f"{seen.text()}: {words}") if words else None


def _flat_words(name: str, ref: list[np.ndarray]) -> str:
    """What an output that barely varies is told (the kind's reason, optimize's warning), or
    '' for one that varies."""
    share = flat(ref) if ref and all(r.dtype.kind == "f" for r in ref) else None
    if share is None:
        return ""
    return (f"output {name!r} of the original barely varies over these {len(ref)} samples "
            f"(its spread across them is {share:.1e} of its values): wrong preprocessing, or "
            "an untrained model?; it is judged by cosine and RMS error against its values, not "
            "by a task")


def _indices(seen: _Seen) -> Picked | None:
    """Integers an ArgMax/ArgMin/TopK computed: every one must stay the same."""
    if seen.last_op not in _INDEX_OPS or not all(_integral(r) for r in seen.ref):
        return None
    return Picked(spec=Spec(kind="exact"), why=f"{seen.text()}: integer indices, judged by "
                                               "exact match")


def _integers(seen: _Seen) -> Picked | None:
    """An integer or boolean output (ids, counts, masks): no cosine tells whether an id still
    names the same thing, so its values must stay the same."""
    if not all(r.dtype.kind in "iub" for r in seen.ref):
        return None
    return Picked(spec=Spec(kind="exact"), why=f"{seen.text()}: {seen.ref[0].dtype} values "
                                               "(ids, counts or flags), judged by exact match")


def _sigmoid(seen: _Seen) -> Picked | None:
    """Values in [0, 1] that a Sigmoid computed: probabilities with 0.5 decisions."""
    if seen.last_op != "Sigmoid" or not all(np.all((r >= 0) & (r <= 1)) for r in seen.ref):
        return None
    return Picked(spec=Spec(kind="probs"), why=f"{seen.text()}: values in [0, 1] from a "
                                               "Sigmoid, judged by their 0.5 decisions")


def _sequence(seen: _Seen) -> Picked | None:
    """[N, T, C] or [T, 1, C] frames of class scores: ``ctc`` when time first with a blank
    (PyTorch's CTC layout) or named ctc, else ``sequence`` when the rows are distributions
    (a blank in [N, T, C] rows is only pointed out: per-anchor scores have one too)."""
    layout = _layout(seen.dims)
    if layout is None:
        return None
    rows = _distribution(seen.ref)
    blank, share = _blank([_ntc(r, layout) for r in seen.ref])
    named = "ctc" in seen.name.lower()
    ctc = named or (blank is not None and layout == "tnc" and seen.last_op not in _RECURRENT)
    if not ctc and not rows:
        return None
    options = ({"blank": str(blank)} if ctc and blank is not None else {}) | (
        {"layout": layout} if layout == "tnc" else {})
    why = (f"{seen.text()}: {_layout_words(layout, seen.dims)}, "
           + (f"rows are {rows}" if rows else "raw scores")
           + _blank_words(seen.name, blank, share, ctc) + (" and the name says ctc" if named
                                                           else ""))
    return Picked(spec=Spec(kind="ctc" if ctc else "sequence", options=options), why=why)


def _blank_words(name: str, blank: int | None, share: float, ctc: bool) -> str:
    """What the blank says: why ctc, or how to ask for ctc when it was not picked."""
    if blank is None:
        return ""
    if ctc:
        return f"; class {blank} (the blank) is the arg-max on {share:.0%} of frames"
    return (f"; class {blank} is the arg-max on {share:.0%} of frames: if these are CTC "
            f"scores, name them --metric {name}=ctc:blank={blank}")


def _layout(dims: list[int]) -> str | None:
    """'tnc' for [T, 1, C] (T, C > 1), 'ntc' for [N, T, C] (T, C > 1), else None."""
    if len(dims) != 3 or dims[2] < 2:
        return None
    if dims[1] == 1 and dims[0] > 1:
        return "tnc"
    return "ntc" if dims[1] > 1 else None


def _layout_words(layout: str, dims: list[int]) -> str:
    if layout == "tnc":
        return f"T={dims[0]} frames (time first) of C={dims[2]} class scores"
    return f"T={dims[1]} frames of C={dims[2]} class scores"


def _ntc(array: np.ndarray, layout: str) -> np.ndarray:
    return array.transpose(1, 0, 2) if layout == "tnc" else array


def _blank(frames: list[np.ndarray]) -> tuple[int | None, float]:
    """The class (0 or C - 1, C >= 3) that is the arg-max on most frames, with its share, if
    any."""
    best = np.concatenate([f.reshape(-1, f.shape[-1]).argmax(-1) for f in frames])
    counts = np.bincount(best, minlength=frames[0].shape[-1])
    top = int(np.argmax(counts))
    share = float(counts[top]) / best.size
    if (share >= _BLANK_SHARE and top in (0, len(counts) - 1) and share < 1.0
            and len(counts) >= _CTC_CLASSES):
        return top, share
    return None, share


def _classes(seen: _Seen) -> Picked | None:
    """[N, K] rows that are distributions."""
    dims = seen.dims
    rows = _distribution(seen.ref)
    if len(dims) != 2 or dims[1] < 2 or not rows:
        return None
    return Picked(spec=Spec(kind="classes"), why=f"{seen.text()}: rows are {rows} over "
                                                 f"K={dims[1]}")


def _scores(seen: _Seen, labels_free: bool) -> Picked:
    """Class scores, probabilities or plain values for an output that is not a distribution."""
    name, dims, ref = seen.name, seen.dims, seen.ref
    single_row = len(dims) == 2 and dims[0] == 1 and dims[1] > 1
    if single_row and labels_free:
        return Picked(spec=Spec(kind="classes"), why=f"{dims} scores and the data has labels")
    if single_row and _LOGITS.search(name):
        return Picked(spec=Spec(kind="classes"), why=f"{dims} scores named '{name}'")
    found = _embedding(seen) or _multilabel(seen)
    if found is not None:
        return found
    unit = all(np.all((r >= 0) & (r <= 1)) for r in ref)
    if unit and int(np.prod(dims)) == 1:
        return Picked(spec=Spec(kind="probs"), why=f"one value in [0, 1] per sample {dims}")
    if unit and single_row and _PROBS.search(name):
        return Picked(spec=Spec(kind="probs"), why=f"{dims} values in [0, 1] named '{name}'")
    return _unknown(name, f"default: no task shape recognised ({seen.text()})")


def _vector(dims: list[int]) -> int:
    """The length of one vector per sample ([D], [1, D], [1, 1, 1, D], ...), else 0."""
    size = int(np.prod(dims)) if dims else 0
    return size if size > 1 and max(dims) == size else 0


def _embedding(seen: _Seen) -> Picked | None:
    """One vector per sample that is L2-normalized, pooled or named like an embedding."""
    size = _vector(seen.dims)
    if size < _EMBEDDING_SIZE or not all(r.dtype.kind == "f" for r in seen.ref):
        return None
    if unit_norm(seen.ref):
        evidence = "every sample's vector has length 1"
    elif seen.last_op in _POOLING:
        evidence = f"pooled by {seen.last_op}"
    elif _EMBEDDING.search(seen.name):
        evidence = f"named '{seen.name}'"
    else:
        return None
    return Picked(spec=Spec(kind="embedding"), why=(
        f"{seen.text()}: one {size}-vector per sample, {evidence}: an embedding, judged by "
        "nearest neighbours, pair decisions and self-retrieval among the samples"))


def _multilabel(seen: _Seen) -> Picked | None:
    """[1, K] (or [K]) logits (K >= 16, not all equal) whose labels mostly sit far below 0 on
    every sample, as a sigmoid multi-label head's do (a softmax head's logits need not)."""
    size = _vector(seen.dims)
    if (size < _LABELS or len(seen.dims) > 2 or seen.dims[-1] != size
            or not all(r.dtype.kind == "f" and np.ptp(r) > 0 for r in seen.ref)):
        return None  # [K] or [1, K] only: [1, N, 1] is a detector's per-anchor scores
    middle = max(float(np.median(r)) for r in seen.ref)
    if middle > _ABSENT_LOGIT:
        return None
    return Picked(spec=Spec(kind="multilabel"), why=(
        f"{seen.text()}: {size} label logits, most far below 0 on every sample (median at "
        f"most {middle:.1f}, sigmoid {1 / (1 + np.exp(-middle)):.3f}): multi-label, judged "
        "by sigmoid 0.5 decisions and the top label"))


def _unknown(name: str, why: str) -> Picked:
    """``values`` (cosine and RMS error), with how to name the output's kind instead."""
    kinds = ", ".join(k for k in KINDS if k != "values")
    return Picked(spec=Spec(kind="values"),
                  why=f"{why}; judged by cosine and RMS error: if it has a kind, name it with "
                      f"--metric {name}=KIND (KIND: {kinds})")


def _distribution(ref: list[np.ndarray]) -> str:
    """'softmax' or 'log-softmax' when every last-axis row is one, else ''."""
    if softmax_rows(ref):
        return "softmax"
    if ref[0].ndim and ref[0].shape[-1] > 1 and all(
            np.all(r <= 1e-6) and np.allclose(np.exp(r).sum(-1), 1.0, atol=1e-3) for r in ref):
        return "log-softmax"
    return ""


def _integral(array: np.ndarray) -> bool:
    return array.dtype.kind in "iub" or bool(np.all(np.round(array) == array))


def _fits(declared: tuple[int | str, ...], dims: list[int]) -> bool:
    """Whether a declared shape (symbolic dims match anything) describes the observed one."""
    return len(declared) == len(dims) and all(
        not isinstance(d, int) or d <= 0 or d == o for d, o in zip(declared, dims, strict=True))
