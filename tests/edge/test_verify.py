"""Fidelity metrics and the pass/fail judgement."""

from __future__ import annotations

import numpy as np

from edge.core.values import Dataset, Fidelity
from edge.core.verify import Thresholds, judge, measure


def _outputs(logits: np.ndarray) -> list[list[np.ndarray]]:
    return [[row[None, :]] for row in logits]


def test_identical_outputs_are_perfect() -> None:
    logits = np.random.default_rng(0).normal(size=(20, 10)).astype(np.float32)
    data = Dataset(feeds=({},) * 20, labels=logits.argmax(1))
    fid = measure(_outputs(logits), _outputs(logits), data)
    assert fid.cosine == 1.0 and fid.max_abs == 0.0 and fid.top1_agreement == 1.0
    assert fid.accuracy == fid.reference_accuracy == 1.0
    assert judge(fid, Thresholds()) is None


def test_flipped_predictions_lower_agreement_and_accuracy() -> None:
    logits = np.eye(10, dtype=np.float32)[np.arange(20) % 10] * 5
    broken = logits.copy()
    broken[:4] = np.roll(broken[:4], 1, axis=1)  # 4 of 20 predictions change
    data = Dataset(feeds=({},) * 20, labels=np.arange(20) % 10)
    fid = measure(_outputs(logits), _outputs(broken), data)
    assert fid.top1_agreement == 0.8 and fid.accuracy == 0.8 and fid.reference_accuracy == 1.0
    assert fid.max_abs == 5.0
    reason = judge(fid, Thresholds(max_drop=1.0))
    assert reason is not None and "20.0 points below" in reason
    assert judge(fid, Thresholds(max_drop=25.0, min_cosine=0.0)) is None


def test_without_labels_top1_agreement_is_judged() -> None:
    fid = Fidelity(samples=100, cosine=0.999, max_abs=0.1, top1_agreement=0.97)
    assert "97.0%" in (judge(fid, Thresholds(max_drop=1.0)) or "")
    assert judge(fid, Thresholds(max_drop=3.0)) is None


def test_low_cosine_fails_even_when_argmax_agrees() -> None:
    fid = Fidelity(samples=10, cosine=0.95, max_abs=2.0, top1_agreement=1.0)
    assert "cosine 0.9500 < 0.98" in (judge(fid, Thresholds()) or "")


def test_non_classifier_outputs_have_no_top1() -> None:
    maps = np.random.default_rng(1).normal(size=(5, 3, 4, 4)).astype(np.float32)
    outs = [[m[None]] for m in maps]
    fid = measure(outs, outs, Dataset(feeds=({},) * 5))
    assert fid.top1_agreement is None and fid.cosine == 1.0
