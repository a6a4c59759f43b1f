"""Embeddings and multi-label scores, judged by the decisions people make with them.

An **embedding** (one vector per sample) is used by comparing vectors: a search returns the
nearest ones, a verifier says "same" when two are similar enough. Its per-sample cosine says
little about either: near-duplicates a few degrees apart swap places long before the cosine
moves. So the held-out samples are compared with each other, under fp32 and under the
candidate:

* nearest neighbour: each sample's most similar other sample must stay the same;
* pairwise decisions: every pair's "similar" decision at a cosine threshold must stay
  (``threshold=``; by default where fp32's pair similarities split best into a similar and a
  dissimilar group, Otsu's threshold over their histogram);
* self-retrieval: each candidate vector must still find its own fp32 vector first.

What fp32 itself cannot tell apart is no change: a neighbour, a pair or a vector whose fp32
similarity is within 1 % of the spread of fp32's pair similarities of the best one (or of the
threshold) — fp32 ranks them as good (fp32 and an exact fp32 rebuild disagree there only by
rounding).

The drop is the largest share of the three that changed. With fewer than three samples
there are no neighbours: the output is judged by cosine and RMS error, and says so; of more
than ``MAX_SAMPLES``, the first ones are compared (the detail says how many).

**Multi-label** scores ([1, K] logits read through a sigmoid, or probabilities) carry a
decision per label: the labels at or above ``threshold`` (0.5, on the sigmoid) and the top
``k`` labels (1) must stay. The drop is the larger of 1 - F1 of the positive decisions and
the share of top-k labels lost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MAX_SAMPLES", "Found", "embedding", "multilabel", "unit_norm"]

Arrays = Sequence[np.ndarray]

#: as a share of the spread of fp32's pair similarities: what fp32 ranks as good as the best
_TIE_SHARE = 0.01
_BINS = 256
#: Samples compared with each other at most (similarity matrices of MAX_SAMPLES squared).
MAX_SAMPLES = 2000
_TIE = 1e-6  # top-k labels: a label fp32 scores equal to its k-th is as good
_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True, kw_only=True, slots=True)
class Found:
    """What one of these kinds measured: the drop (None: not measurable), in words, numbers."""

    drop: float | None
    detail: str
    numbers: dict[str, float] = field(default_factory=dict)


def _rows(arrays: Arrays) -> np.ndarray:
    """Every sample's vector as a float64 row of unit length (a zero vector stays zero)."""
    rows = np.stack([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0.0, 1.0, norms)


def unit_norm(arrays: Arrays) -> bool:
    """Whether every sample's vector has length 1 (an L2-normalized embedding)."""
    norms = [float(np.linalg.norm(np.asarray(a, dtype=np.float64))) for a in arrays]
    return bool(norms) and all(abs(n - 1.0) <= _NORM_TOLERANCE for n in norms)


def _percent(count: int, total: int) -> float:
    return 100.0 * count / total if total else 0.0


# ---------------------------------------------------------------- embeddings


def embedding(ref: Arrays, got: Arrays, threshold: float | None) -> Found:
    """Neighbours, pair decisions and self-retrieval of the candidate against fp32."""
    if len(ref) < 3:
        return Found(drop=None, detail=f"{len(ref)} samples have no neighbours: judged by "
                                       "cosine and RMS error")
    a, b = _rows(ref[:MAX_SAMPLES]), _rows(got[:MAX_SAMPLES])
    sim_ref, sim_got = a @ a.T, b @ b.T
    pairs_ref = _pairs(sim_ref)
    tie = _TIE_SHARE * float(np.std(pairs_ref))
    moved = _neighbours_moved(sim_ref, sim_got, tie)
    cut = _split(pairs_ref) if threshold is None else threshold
    flips, pairs = _pair_flips(pairs_ref, _pairs(sim_got), cut, tie)
    lost = _self_missed(sim_ref, b @ a.T, tie)
    count = len(a)
    drop = max(_percent(moved, count), _percent(flips, pairs), _percent(lost, count))
    said = "fp32's similar/dissimilar split" if threshold is None else "threshold="
    first = f" (the first {count} of {len(ref)})" if count < len(ref) else ""
    return Found(drop=drop, detail=(
        f"nearest neighbour changes on {moved} of {count} samples{first}, {flips} of {pairs} "
        f"pair decisions flip at cosine {cut:.3f} ({said}), {count - lost} of {count} find "
        "their own fp32 vector first"),
        numbers={"neighbours_kept": 1.0 - moved / count, "pairs_kept": 1.0 - flips / pairs,
                 "self_retrieval": 1.0 - lost / count, "pair_threshold": cut})


def _pairs(sim: np.ndarray) -> np.ndarray:
    """The similarities of every pair of distinct samples (upper triangle)."""
    return sim[np.triu_indices(len(sim), k=1)]


def _split(pairs: np.ndarray) -> float:
    """Otsu's threshold over the pair similarities: the cut that leaves the two groups the
    largest variance between them (the middle of the range when all are equal)."""
    counts, edges = np.histogram(pairs, bins=_BINS)
    centres = (edges[:-1] + edges[1:]) / 2.0
    below = np.cumsum(counts).astype(np.float64)
    above = below[-1] - below
    sums = np.cumsum(counts * centres)
    low = sums / np.maximum(below, 1.0)
    high = (sums[-1] - sums) / np.maximum(above, 1.0)
    return float(edges[1:][np.argmax(below * above * (low - high) ** 2)])


def _neighbours_moved(sim_ref: np.ndarray, sim_got: np.ndarray, tie: float) -> int:
    """Samples whose candidate nearest neighbour fp32 ranks worse than its own nearest (by
    more than ``tie``)."""
    ref, got = sim_ref.copy(), sim_got.copy()
    np.fill_diagonal(ref, -np.inf)
    np.fill_diagonal(got, -np.inf)
    rows = np.arange(len(ref))
    best = ref[rows, ref.argmax(1)]
    chosen = ref[rows, got.argmax(1)]
    return int(np.sum(chosen < best - tie))


def _pair_flips(ref: np.ndarray, got: np.ndarray, cut: float, tie: float) -> tuple[int, int]:
    """Pairs whose "similar" decision (cosine >= cut) differs, fp32 deciding them by more
    than ``tie``, and the number of pairs (``ref``, ``got``: the pairs' similarities)."""
    decided = np.abs(ref - cut) > tie
    return int(np.sum(((ref >= cut) != (got >= cut)) & decided)), int(ref.size)


def _self_missed(sim_ref: np.ndarray, cross: np.ndarray, tie: float) -> int:
    """Candidate vectors whose most similar fp32 vector (``cross``: candidate x fp32
    similarities) is not their own, nor one that fp32 finds as similar to it (within
    ``tie``)."""
    rows = np.arange(len(sim_ref))
    return int(np.sum(sim_ref[rows, cross.argmax(1)] < 1.0 - tie))


# ---------------------------------------------------------------- multi-label


def multilabel(ref: Arrays, got: Arrays, threshold: float, k: int) -> Found:
    """Positive decisions' F1 and top-k labels of every row, logits or probabilities."""
    probabilities = all(np.all((r >= 0.0) & (r <= 1.0)) for r in ref)
    cut = threshold if probabilities else math.log(threshold / (1.0 - threshold))
    a, b = _label_rows(ref), _label_rows(got)
    k = max(1, min(k, a.shape[1]))
    f1, positives = _decisions_f1(a >= cut, b >= cut)
    kept = _top_k_kept(a, b, k)
    drop = max(100.0 * (1.0 - f1), 100.0 * (1.0 - kept))
    scale = "probabilities" if probabilities else f"logits (sigmoid {threshold:g})"
    return Found(drop=drop, detail=(
        f"positive decisions' F1 {f1:.3f} over {positives} fp32 positives at {scale}, "
        f"top-{k} labels kept {100 * kept:.1f}% of {len(a)} rows"),
        numbers={"positives_f1": f1, "top_k_kept": kept, "k": float(k)})


def _label_rows(arrays: Arrays) -> np.ndarray:
    """All rows of label scores, [rows, K] (a sample may hold several rows)."""
    return np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
                           for x in arrays])


def _decisions_f1(ref: np.ndarray, got: np.ndarray) -> tuple[float, int]:
    """F1 of the candidate's positive decisions against fp32's (1 when neither has any)."""
    hits = int(np.sum(ref & got))
    total = int(np.sum(ref)) + int(np.sum(got))
    return (2.0 * hits / total if total else 1.0), int(np.sum(ref))


def _top_k_kept(ref: np.ndarray, got: np.ndarray, k: int) -> float:
    """Share of fp32's top-k labels (per row) that the candidate's top-k holds, a label that
    fp32 scores equal to its k-th best counting as kept."""
    kth = np.sort(ref, axis=1)[:, -k][:, None]
    top_got = np.argsort(-got, axis=1)[:, :k]
    chosen = np.take_along_axis(ref, top_got, axis=1)
    return float(np.mean(np.sum(chosen >= kth - _TIE, axis=1).clip(max=k) / k))
