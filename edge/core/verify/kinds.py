"""What each output kind measures: numbers that ``judge`` compares with the thresholds.

Every kind gets one output's per-sample arrays (fp32 reference and candidate, float32 or
float64, all finite) and returns a :class:`Measured`: ``drop`` in percentage points with the
counts behind it, or (values, regression) only the numbers common to every output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge.core.verify.detect import measure_detections
from edge.core.verify.embed import embedding, multilabel
from edge.core.verify.spec import Spec

__all__ = ["FLAT", "KINDS", "Measured", "Spec", "common", "flat", "frames", "measure_kind",
           "softmax_rows"]

Arrays = Sequence[np.ndarray]


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """A kind's numbers for one output."""

    drop: float | None = None
    detail: str = ""
    accuracy: float | None = None
    reference_accuracy: float | None = None
    rel_error: float | None = None
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Common:
    """What every output gets: its own cosine, RMS error over its spread, largest error (also
    over the spread: one element far off in a large output hardly moves the RMS)."""

    cosine: float
    rel_rms: float
    max_abs: float
    rel_max: float


def common(ref: Arrays, got: Arrays) -> Common:
    """Mean per-sample cosine, RMS error relative to the spread across samples, max error
    (float64 one sample at a time: a large output is never copied whole). An output of one
    number per sample (a score, a flag) gets the cosine over the samples instead: per sample it
    would be 1 whenever the signs agree, and 0 when either side is exactly 0."""
    cosines, err2, max_abs = [], [], 0.0
    for r, g in zip(ref, got, strict=True):
        r64, g64 = _f64(r).ravel(), _f64(g).ravel()
        cosines.append(_cosine(r64, g64))
        err2.append(float(np.mean((g64 - r64) ** 2)) if r64.size else 0.0)
        max_abs = max(max_abs, float(np.max(np.abs(g64 - r64))) if r64.size else 0.0)
    if ref and all(r.size == 1 for r in ref):  # one number's cosine is only its sign
        cosines = [_cosine(np.array([r.ravel()[0] for r in ref], np.float64),
                           np.array([g.ravel()[0] for g in got], np.float64))]
    scale = spread(ref)
    return Common(cosine=float(np.mean(cosines)) if cosines else 1.0,
                  rel_rms=_relative(float(np.mean(err2)) if err2 else 0.0, scale),
                  max_abs=max_abs, rel_max=_relative(max_abs * max_abs, scale))


def _f64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)


#: An output whose spread across samples is below this share of its values' RMS barely varies
#: (wrong preprocessing, an untrained model): its spread would be noise, so its values scale it.
#: Float32 resolves about 1e-7 of a value: a variation below that is round-off, not signal (an
#: offset output such as a timestamp varies by far more).
FLAT = 1e-7


def spread(ref: Arrays) -> float:
    """RMS over elements of the std across samples; with one sample (or an output that does
    not vary across samples, or barely: ``flat``) the std of its values, then their RMS, so it
    still has a scale."""
    if len(ref) > 1 and len({r.shape for r in ref}) == 1:
        across = _across(ref)
        if across > 0.0 and _flat_share(across, ref) is None:
            return across
    count = sum(r.size for r in ref)
    if count == 0:
        return 0.0
    shift = float(_f64(ref[0]).ravel()[0]) if ref[0].size else 0.0
    total = sum(float(np.sum(_f64(r) - shift)) for r in ref)
    squares = sum(float(np.sum((_f64(r) - shift) ** 2)) for r in ref)
    std = float(np.sqrt(max(0.0, squares / count - (total / count) ** 2)))
    return std or _rms(ref)


def flat(ref: Arrays) -> float | None:
    """An output's spread across samples as a share of its values' RMS when below ``FLAT``
    (it barely varies over these samples), else None; samples that are all exactly equal are
    left to the kinds as before (a test's repeated sample, a constant output)."""
    if len(ref) < 2 or len({r.shape for r in ref}) != 1:
        return None
    return _flat_share(_across(ref), ref)


def _flat_share(across: float, ref: Arrays) -> float | None:
    """``across`` (the spread across samples) over the values' RMS when it is below ``FLAT``
    and above 0 (exactly equal samples are left as they were), else None."""
    scale = _rms(ref)
    share = across / scale if scale > 0.0 else 0.0
    return share if 0.0 < share < FLAT else None


def _rms(ref: Arrays) -> float:
    count = sum(r.size for r in ref)
    return float(np.sqrt(sum(float(np.sum(_f64(r) ** 2)) for r in ref) / count)) if count else 0.0


def _across(ref: Arrays) -> float:
    """sqrt(mean over elements of the variance over samples), summed one sample at a time
    around the first sample (no cancellation for outputs with a large offset)."""
    first = _f64(ref[0])
    total = np.zeros(first.shape)
    squares = np.zeros(first.shape)
    for r in ref:
        diff = _f64(r) - first
        total += diff
        squares += diff * diff
    mean = total / len(ref)
    return float(np.sqrt(np.mean(np.maximum(squares / len(ref) - mean * mean, 0.0))))


def _relative(err2: float, scale: float) -> float:
    if scale > 0.0:
        return float(np.sqrt(err2)) / scale
    return 0.0 if err2 == 0.0 else float("inf")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norm)


def softmax_rows(ref: Arrays, tol: float = 1e-3) -> bool:
    """Whether every row along the last axis (K > 1) is a probability distribution."""
    if not ref or any(r.ndim < 1 or r.shape[-1] < 2 for r in ref):
        return False
    return all(np.all(r >= -tol) and np.allclose(r.sum(-1), 1.0, atol=tol) for r in ref)


def _percent(count: int, total: int) -> float:
    return 100.0 * count / total if total else 0.0


# ---------------------------------------------------------------- kinds


def _values(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    return Measured()


def _top1(arrays: Arrays) -> np.ndarray:
    """Arg-max of every row along the last axis, all samples in one vector."""
    return np.concatenate([a.reshape(-1, a.shape[-1]).argmax(-1) for a in arrays])


def _classes(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """Top-1 of each row ([N, K]); accuracy too when labels go with this output."""
    top_ref, top_got = _top1(ref), _top1(got)
    differ = int(np.sum(top_ref != top_got))
    agreement = {"top1_agreement": 1.0 - differ / len(top_ref)}
    if labels is not None and len(labels) == len(top_ref):
        _check_labels(labels, ref[0].shape[-1])
        acc, ref_acc = float(np.mean(top_got == labels)), float(np.mean(top_ref == labels))
        return Measured(drop=100.0 * (ref_acc - acc), accuracy=acc, reference_accuracy=ref_acc,
                        detail=f"accuracy {100 * acc:.1f}% vs fp32 {100 * ref_acc:.1f}%",
                        numbers=agreement)
    return Measured(drop=_percent(differ, len(top_ref)), numbers=agreement,
                    detail=f"top-1 differs from fp32 on {differ} of {len(top_ref)} rows")


def _check_labels(labels: np.ndarray, classes: int) -> None:
    """Labels name classes of this output: 0 <= id < K (else accuracy means nothing)."""
    outside = int(np.sum((labels < 0) | (labels >= classes)))
    if outside:
        raise ValueError(f"{outside} of {len(labels)} labels are not class ids 0..{classes - 1} "
                         f"(e.g. {labels[(labels < 0) | (labels >= classes)][0]}); "
                         "fix the 'labels' in --eval")


def _probs(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """Softmax rows: arg-max flips; otherwise (sigmoids) decisions crossing the threshold."""
    if softmax_rows(ref):
        top_ref, top_got = _top1(ref), _top1(got)
        flips = int(np.sum(top_ref != top_got))
        return Measured(drop=_percent(flips, len(top_ref)),
                        detail=f"arg-max flips on {flips} of {len(top_ref)} probability rows")
    threshold = float(spec.options.get("threshold", 0.5))
    flips = sum(int(np.sum((r >= threshold) != (g >= threshold)))
                for r, g in zip(ref, got, strict=True))
    total = sum(r.size for r in ref)
    detail = f"{flips} of {total} probabilities cross {threshold:g}"
    if ref and ref[0].size > 1:  # a map: its decisions are the positives, however sparse
        return _positives(ref, got, threshold, flips, total, detail)
    return Measured(drop=_percent(flips, total), detail=detail)


def _positives(ref: Arrays, got: Arrays, threshold: float, flips: int, total: int,
               detail: str) -> Measured:
    """A probability map (multi-label, per frame or pixel): the flips over all its cells, and
    the F1 of its positive decisions against fp32's, since a sparse map (notes in a piano
    roll) can lose most of its events in a small share of cells. The drop is the larger."""
    hits = sum(int(np.sum((r >= threshold) & (g >= threshold)))
               for r, g in zip(ref, got, strict=True))
    positives = sum(int(np.sum(r >= threshold)) + int(np.sum(g >= threshold))
                    for r, g in zip(ref, got, strict=True))
    if positives == 0:
        return Measured(drop=_percent(flips, total), detail=detail)
    f1 = 2 * hits / positives
    drop = max(_percent(flips, total), 100.0 * (1.0 - f1))
    return Measured(drop=drop, detail=f"{detail}; positive decisions' F1 {f1:.3f}",
                    numbers={"positives_f1": f1})


def _exact(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """Indices, ids, flags: every value must equal fp32's."""
    differ = sum(int(np.sum(r != g)) for r, g in zip(ref, got, strict=True))
    total = sum(r.size for r in ref)
    return Measured(drop=_percent(differ, total),
                    detail=f"{differ} of {total} values differ from fp32's")


def frames(array: np.ndarray, spec: Spec) -> np.ndarray:
    """One sample's class scores as [N, T, C]: ``layout=tnc`` reads [T, N, C] (time first, as
    PyTorch's CTC writes them); otherwise the last two axes are T and C."""
    layout = spec.options.get("layout", "ntc")
    if layout == "tnc":
        if array.ndim != 3:
            raise ValueError(f"layout=tnc needs [T, N, C] outputs, got {list(array.shape)}")
        return array.transpose(1, 0, 2)
    if layout != "ntc":
        raise ValueError(f"layout={layout!r} is not one of ntc, tnc")
    return array.reshape(-1, *array.shape[-2:])


def _sequence(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """[N, T, C] (or [T, N, C] with ``layout=tnc``): arg-max over C at every position."""
    differ = sum(int(np.sum(r.argmax(-1) != g.argmax(-1))) for r, g in zip(ref, got, strict=True))
    total = sum(r.size // r.shape[-1] for r in ref)
    return Measured(drop=_percent(differ, total),
                    detail=f"arg-max differs on {differ} of {total} positions")


def ctc_greedy(scores: np.ndarray, blank: int = 0) -> tuple[int, ...]:
    """Greedy CTC decoding of one [T, C] row: arg-max, repeats merged, blanks dropped."""
    best = scores.argmax(-1)
    keep = np.ones(best.shape, dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    return tuple(int(c) for c in best[keep] if c != blank)


def _ctc(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """[N, T, C] (or [T, N, C] with ``layout=tnc``): greedy-decoded label strings equal,
    string by string (one string per batch item)."""
    blank = int(spec.options.get("blank", 0))
    pairs = [(r2, g2) for r, g in zip(ref, got, strict=True)
             for r2, g2 in zip(frames(r, spec), frames(g, spec), strict=True)]
    differ = sum(ctc_greedy(r, blank) != ctc_greedy(g, blank) for r, g in pairs)
    return Measured(drop=_percent(differ, len(pairs)),
                    detail=f"{differ} of {len(pairs)} decoded strings differ (blank {blank})")


def _regression(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    """Relative error |candidate - fp32| / |fp32| per sample (norms), averaged."""
    errors = [_relative(float(np.sum((_f64(g) - _f64(r)) ** 2)), float(np.linalg.norm(_f64(r))))
              for r, g in zip(ref, got, strict=True)]
    return Measured(rel_error=float(np.mean(errors)) if errors else 0.0)


def _detector(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    found = measure_detections(ref, got, spec)
    return Measured(drop=found.drop, detail=found.detail, numbers=found.numbers)


def _embedding(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    threshold = spec.options.get("threshold")
    found = embedding(ref, got, None if threshold is None else float(threshold))
    return Measured(drop=found.drop, detail=found.detail, numbers=found.numbers)


def _multilabel(ref: Arrays, got: Arrays, spec: Spec, labels: Any) -> Measured:
    threshold = float(spec.options.get("threshold", 0.5))
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold={threshold:g} is not a probability between 0 and 1")
    found = multilabel(ref, got, threshold, int(spec.options.get("k", 1)))
    return Measured(drop=found.drop, detail=found.detail, numbers=found.numbers)


Kind = Callable[[Arrays, Arrays, Spec, Any], Measured]

#: the built-in kinds, by the name ``--metric OUTPUT=KIND`` uses
KINDS: dict[str, Kind] = {
    "values": _values, "classes": _classes, "probs": _probs, "sequence": _sequence,
    "ctc": _ctc, "exact": _exact, "yolo": _detector, "ssd": _detector, "regression": _regression,
    "embedding": _embedding, "multilabel": _multilabel,
}


def measure_kind(spec: Spec, ref: Arrays, got: Arrays, labels: Any) -> Measured:
    """Run ``spec``'s kind on one output."""
    return KINDS[spec.kind](ref, got, spec, labels)
