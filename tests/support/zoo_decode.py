"""Decoders that turn detector heads into boxes, for the zoo's ``boxes`` metric.

- mediapipe's SSD-style detectors (face, pose, palm): anchors on a grid per stride (2 anchors
  per location for each repeat of a stride), regressors in input pixels around the anchor
  centre, scores as logits;
- YOLOX heads (ddddocr's detector): per-stride grids, (x, y) offsets and log (w, h) in grid
  cells, objectness and class scores already through a sigmoid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tests.support.zoo_metrics import nms


def ssd_anchors(side: int, strides: Sequence[int]) -> np.ndarray:
    """Anchor centres [A, 2] (x, y in 0..1) in mediapipe's order."""
    rows, i = [], 0
    while i < len(strides):
        stride, repeats = strides[i], 0
        while i < len(strides) and strides[i] == stride:
            repeats, i = repeats + 2, i + 1
        cells = side // stride
        yy, xx = np.mgrid[0:cells, 0:cells]
        centres = np.stack([(xx + 0.5) / cells, (yy + 0.5) / cells], -1).reshape(-1, 2)
        rows.append(np.repeat(centres, repeats, axis=0))
    return np.concatenate(rows)


def ssd(side: int, strides: Sequence[int], threshold: float = 0.5
        ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A decoder of one sample's (regressors [.., A, R], logits [.., A, 1]) to [K, 5] boxes."""
    centres = ssd_anchors(side, strides)

    def decode(regressors: np.ndarray, logits: np.ndarray) -> np.ndarray:
        reg = regressors.reshape(len(centres), -1)[:, :4] / side
        score = 1.0 / (1.0 + np.exp(-np.clip(logits.reshape(-1), -60, 60)))
        keep = score >= threshold
        cx, cy = reg[keep, 0] + centres[keep, 0], reg[keep, 1] + centres[keep, 1]
        w, h = reg[keep, 2], reg[keep, 3]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, score[keep]], -1)
        return nms(boxes, 0.3)

    return decode


def yolox(side: int, threshold: float = 0.25, strides: Sequence[int] = (8, 16, 32)
          ) -> Callable[[np.ndarray], np.ndarray]:
    """A decoder of one sample's raw YOLOX output [.., A, 5 + classes] to [K, 6] boxes."""
    grids, scales = [], []
    for stride in strides:
        cells = side // stride
        yy, xx = np.mgrid[0:cells, 0:cells]
        grids.append(np.stack([xx, yy], -1).reshape(-1, 2))
        scales.append(np.full((cells * cells, 1), stride))
    grid, scale = np.concatenate(grids), np.concatenate(scales)

    def decode(raw: np.ndarray) -> np.ndarray:
        out = raw.reshape(len(grid), -1).astype(np.float64)
        xy = (out[:, :2] + grid) * scale
        wh = np.exp(np.clip(out[:, 2:4], -10, 10)) * scale
        cls = out[:, 5:]
        score = out[:, 4] * cls.max(-1)
        keep = score >= threshold
        boxes = np.concatenate([xy - wh / 2, xy + wh / 2], -1)[keep]
        dets = np.concatenate([boxes, score[keep, None], cls.argmax(-1)[keep, None]], -1)
        return nms(dets, 0.45)

    return decode
