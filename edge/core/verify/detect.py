"""Detector outputs (``yolo``, ``ssd``): the candidate's detections matched to fp32's.

Layouts, one row per anchor (an output [1, A, N] with A < N is read transposed, as YOLOv8
writes it):

* ``yolo``      cx, cy, w, h, class scores...           (``yolo:obj``: cx, cy, w, h,
  objectness, class scores..., score = objectness x class score)
* ``ssd``       corner boxes (x1, y1, x2, y2 or y1, x1, y2, x2), class scores...; with
  ``ssd:scores=OUTPUT`` the boxes output is paired with another output holding the scores

A detection is a row whose best score is >= ``score`` (default 0.25), after greedy
per-class non-maximum suppression at IoU 0.5. fp32's detections are the ground truth: one is
matched by a candidate detection of the same class with IoU >= ``iou`` (default 0.5). The
judged drop is the larger of the share of fp32 detections lost and 100 x (1 - mAP50 of the
candidate against fp32's detections).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edge.core.verify.spec import Spec

__all__ = ["Found", "detections", "measure_detections"]

_MAX_ROWS = 300  # best rows kept before suppression


@dataclass(frozen=True, kw_only=True, slots=True)
class Found:
    """Detections compared: the judged drop, its counts, mAP50 and the match rate."""

    drop: float
    detail: str
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Dets:
    """One sample's detections: corner boxes [D, 4], scores [D], classes [D]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


def detections(output: np.ndarray, spec: Spec) -> _Dets:
    """The detections of one sample's output under ``spec``'s layout."""
    rows = _rows(output, 4 + (1 if "obj" in spec.options else 0) + 1)
    boxes = rows[:, :4] if spec.kind == "ssd" else _corners(rows[:, :4])
    if "obj" in spec.options:
        scores_all = rows[:, 4:5] * rows[:, 5:]
    else:
        scores_all = rows[:, 4:]
    classes = scores_all.argmax(-1)
    scores = scores_all.max(-1)
    keep = scores >= float(spec.options.get("score", 0.25))
    order = np.argsort(-scores[keep], kind="stable")[:_MAX_ROWS]
    picked = _Dets(boxes[keep][order], scores[keep][order], classes[keep][order])
    return _suppressed(picked, float(spec.options.get("nms", 0.5)))


def _rows(output: np.ndarray, least: int) -> np.ndarray:
    """[anchors, attributes] from [1, anchors, attributes] or [1, attributes, anchors]."""
    table = output.reshape(-1, output.shape[-1]) if output.ndim != 3 else output[0]
    if output.ndim == 3 and table.shape[0] < table.shape[1]:
        table = table.T
    if table.shape[-1] < least:
        raise ValueError(f"a detector row needs at least {least} values, got shape "
                         f"{list(output.shape)}")
    return table


def _corners(cxcywh: np.ndarray) -> np.ndarray:
    half = cxcywh[:, 2:4] / 2
    return np.concatenate([cxcywh[:, :2] - half, cxcywh[:, :2] + half], axis=1)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one corner box with many (corner order within a box pair does not matter)."""
    lo = np.maximum(np.minimum(box[:2], box[2:]), np.minimum(boxes[:, :2], boxes[:, 2:]))
    hi = np.minimum(np.maximum(box[:2], box[2:]), np.maximum(boxes[:, :2], boxes[:, 2:]))
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = np.prod(np.abs(box[2:] - box[:2]))
    areas = np.prod(np.abs(boxes[:, 2:] - boxes[:, :2]), axis=1)
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _suppressed(dets: _Dets, iou: float) -> _Dets:
    """Greedy per-class non-maximum suppression (input sorted by score)."""
    kept: list[int] = []
    for i in range(len(dets.scores)):
        same = [k for k in kept if dets.classes[k] == dets.classes[i]]
        if not same or np.max(_iou(dets.boxes[i], dets.boxes[same])) < iou:
            kept.append(i)
    return _Dets(dets.boxes[kept], dets.scores[kept], dets.classes[kept])


def _matches(truth: _Dets, found: _Dets, iou: float) -> list[bool]:
    """For each found detection (in order), whether it matches a not yet matched truth."""
    used = np.zeros(len(truth.scores), dtype=bool)
    hits = []
    for box, cls in zip(found.boxes, found.classes, strict=True):
        free = np.flatnonzero(~used & (truth.classes == cls))
        overlap = _iou(box, truth.boxes[free]) if free.size else np.zeros(0)
        best = int(np.argmax(overlap)) if overlap.size else -1
        hit = best >= 0 and overlap[best] >= iou
        if hit:
            used[free[best]] = True
        hits.append(bool(hit))
    return hits


def _average_precision(hits: list[bool], scores: list[float], truths: int) -> float:
    """All-point interpolated AP of ranked hits against ``truths`` ground-truth boxes."""
    if truths == 0:
        return 1.0 if not hits else 0.0
    order = np.argsort(-np.asarray(scores), kind="stable")
    tp = np.cumsum(np.asarray(hits, dtype=float)[order]) if hits else np.zeros(0)
    precision = tp / np.arange(1, len(tp) + 1) if hits else np.zeros(0)
    recall = tp / truths
    envelope = np.maximum.accumulate(precision[::-1])[::-1] if hits else np.zeros(0)
    steps = np.diff(np.concatenate([[0.0], recall]))
    return float(np.sum(steps * envelope))


def measure_detections(ref: Sequence[np.ndarray], got: Sequence[np.ndarray],
                       spec: Spec) -> Found:
    """Matched share of fp32's detections and the candidate's mAP50 against them."""
    iou = float(spec.options.get("iou", 0.5))
    per_class: dict[int, tuple[list[bool], list[float], int]] = {}
    total = matched = 0
    for r, g in zip(ref, got, strict=True):
        truth, found = detections(r, spec), detections(g, spec)
        hits = _matches(truth, found, iou)
        total += len(truth.scores)
        matched += sum(hits)
        for cls in set(truth.classes.tolist()) | set(found.classes.tolist()):
            mask = found.classes == cls
            entry = per_class.setdefault(int(cls), ([], [], 0))
            entry[0].extend(h for h, m in zip(hits, mask, strict=True) if m)
            entry[1].extend(found.scores[mask].tolist())
            per_class[int(cls)] = (entry[0], entry[1], entry[2] + int(np.sum(truth.classes == cls)))
    ap = float(np.mean([_average_precision(*v) for v in per_class.values()])) if per_class \
        else 1.0
    lost = 100.0 * (total - matched) / total if total else 0.0
    detail = (f"{matched} of {total} fp32 detections matched (IoU >= {iou:g}, same class), "
              f"mAP50 vs fp32 {ap:.3f}")
    return Found(drop=max(lost, 100.0 * (1.0 - ap)), detail=detail,
                 numbers={"matched": matched, "detections": total, "map50": ap})
