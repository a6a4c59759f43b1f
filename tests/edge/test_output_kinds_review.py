"""Review of issue 29's output kinds: a two-class frame classifier is not CTC."""

from __future__ import annotations

import numpy as np

from edge.core.values import Dataset, TensorSpec
from edge.core.verify import Thresholds, measure


def test_time_first_two_class_frames_stay_a_sequence_not_ctc() -> None:
    """[T, 1, 2] softmax frames (a voice-activity head: class 0 'silence' on most frames) are
    judged frame by frame: as CTC a boundary moved by one frame decodes to the same string and
    would pass unnoticed."""
    rng = np.random.default_rng(0)
    frames = np.zeros((4, 50), np.int64)
    for sample, start in enumerate((10, 15, 20, 25)):
        frames[sample, start:start + 12] = 1  # one speech segment per sample
    ref = [np.eye(2)[f][:, None, :] * 0.8 + 0.1 for f in frames]
    shifted = frames.copy()
    shifted[:, [22, 27, 32, 37]] = 1  # each segment one frame longer: same decoded string
    got = [np.eye(2)[f][:, None, :] * 0.8 + 0.1 + rng.normal(0, 1e-4, (50, 1, 2))
           for f in shifted]
    spec = TensorSpec(name="speech", shape=(50, 1, 2), dtype="float32", last_op="Softmax")
    data = Dataset(feeds=tuple({"x": np.zeros(1, np.float32)} for _ in ref))
    fid = measure([[r.astype(np.float32)] for r in ref], [[g.astype(np.float32)] for g in got],
                  data, Thresholds(), ["speech"], declared=(spec,))
    (out,) = fid.outputs
    assert out.kind == "sequence", out.why
    assert out.drop is not None and out.drop > 0  # 4 of 200 frames changed


def test_time_first_hidden_states_of_an_lstm_are_not_ctc() -> None:
    """[T, 1, H] straight from an LSTM (PyTorch's time-first layout) whose first unit is the
    largest on most frames: hidden states, judged as values, not CTC frames with a blank."""
    rng = np.random.default_rng(1)
    ref = []
    for _ in range(3):
        states = np.tanh(rng.normal(0, 0.3, (40, 1, 16)))
        states[:30, 0, 0] = 0.95  # one unit saturated on most frames
        ref.append(states.astype(np.float32))
    spec = TensorSpec(name="hidden", shape=(40, 1, 16), dtype="float32", last_op="LSTM")
    data = Dataset(feeds=tuple({"x": np.zeros(1, np.float32)} for _ in ref))
    (out,) = measure([[r] for r in ref], [[r] for r in ref], data, Thresholds(), ["hidden"],
                     declared=(spec,)).outputs
    assert out.kind == "values", out.why


def test_integer_ids_not_from_an_argmax_must_stay_the_same() -> None:
    """Class ids an integer output carries (a Cast, a Gather of labels: no ArgMax behind it) are
    judged by exact match: one id in ten changed is a different answer, whatever the cosine."""
    ref = [np.arange(10, dtype=np.int64) + 100 * i for i in range(4)]
    got = [r.copy() for r in ref]
    got[0][3] += 1  # one id of forty, near the others: cosine stays ~1
    spec = TensorSpec(name="ids", shape=(10,), dtype="int64", last_op="Cast")
    data = Dataset(feeds=tuple({"x": np.zeros(1, np.float32)} for _ in ref))
    fid = measure([[r] for r in ref], [[g] for g in got], data, Thresholds(), ["ids"],
                  declared=(spec,))
    (out,) = fid.outputs
    assert out.kind == "exact", out.why
    assert "int64" in out.why
    assert out.cosine is not None and out.cosine > 0.98  # as values it would have passed
    assert out.rel_rms is not None and out.rel_rms < 0.1
    assert not out.passed and "1 of 40 values differ" in out.reason


def test_a_sparse_sigmoid_map_losing_its_events_is_rejected() -> None:
    """A piano-roll-like map (one note in a hundred cells on): a candidate that loses half of
    the notes flips only 0.5 % of the cells, but the F1 of its positive decisions is 0.67
    (basic-pitch's notes through OpenVINO int8 lost this way while passing by flips)."""
    rng = np.random.default_rng(2)
    ref = [np.where(rng.random((1, 100, 88)) < 0.01, 0.9, 0.05).astype(np.float32)
           for _ in range(4)]
    got = []
    for r in ref:
        g = r.copy()
        on = np.argwhere(g > 0.5)
        for index in on[::2]:  # every other note falls below 0.5
            g[tuple(index)] = 0.3
        got.append(g)
    spec = TensorSpec(name="notes", shape=(1, 100, 88), dtype="float32", last_op="Sigmoid")
    data = Dataset(feeds=tuple({"x": np.zeros(1, np.float32)} for _ in ref))
    (out,) = measure([[r] for r in ref], [[g] for g in got], data, Thresholds(), ["notes"],
                     declared=(spec,)).outputs
    assert out.kind == "probs", out.why
    flips = sum(int(np.sum((r >= 0.5) != (g >= 0.5))) for r, g in zip(ref, got, strict=True))
    assert flips / sum(r.size for r in ref) < 0.01  # by the share of flips it would pass
    assert not out.passed and "F1 0.6" in out.reason, out.reason
