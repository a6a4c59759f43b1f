"""Each output kind on its own: what it measures, what fails it, how it is auto-detected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.core.errors import UsageError
from edge.core.values import Dataset, Fidelity
from edge.core.verify import Thresholds, check_metrics, judge, measure, parse_metrics
from edge.core.verify.kinds import ctc_greedy

RNG = np.random.default_rng(0)


def _samples(*outputs: np.ndarray) -> list[list[np.ndarray]]:
    """Per-sample output lists from arrays [samples, *shape]."""
    return [list(per) for per in zip(*outputs, strict=True)]


def _fid(ref: list[np.ndarray], got: list[np.ndarray], names: list[str],
         limits: Thresholds | None = None, labels: np.ndarray | None = None) -> Fidelity:
    data = Dataset(feeds=({},) * len(ref[0]), labels=labels)
    return measure(_samples(*ref), _samples(*got), data, limits, names)


# ---------------------------------------------------------------- values


def test_values_error_is_relative_to_the_spread_across_samples() -> None:
    # an offset output that hardly varies: cosine stays ~1 while the variation is lost
    ref = 5.0 + 0.01 * RNG.normal(size=(20, 1, 8))
    got = np.full_like(ref, 5.0)
    fid = _fid([ref], [got], ["depth"])
    out = fid.outputs[0]
    assert out.kind == "values" and out.cosine is not None and out.cosine > 0.9999
    assert out.rel_rms is not None and 0.9 < out.rel_rms < 1.1
    assert "RMS error 1.0" in (judge(fid, Thresholds()) or "")
    assert judge(_fid([ref], [ref + 1e-4 * RNG.normal(size=ref.shape)], ["depth"]),
                 Thresholds()) is None


def test_zero_spread_is_guarded() -> None:
    const = np.ones((5, 1, 4))
    assert judge(_fid([const], [const], ["c"]), Thresholds()) is None
    zeros = np.zeros((5, 1, 4))
    fid = _fid([zeros], [zeros + 0.5], ["z"])
    assert fid.outputs[0].rel_rms == float("inf") and judge(fid, Thresholds()) is not None


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_in_a_candidate_fails(bad: float) -> None:
    ref = RNG.normal(size=(10, 1, 6))
    got = ref.copy()
    got[3, 0, 2] = bad
    fid = _fid([ref], [got], ["y"])
    out = fid.outputs[0]
    assert not out.passed and out.nonfinite == 1
    assert judge(fid, Thresholds(min_cosine=-1.0, max_drop=100.0)) == (
        "output 'y': 1 of 60 values are NaN or Inf")
    assert fid.cosine == 0.0


def test_a_nan_cosine_in_an_old_fidelity_fails() -> None:
    assert judge(Fidelity(samples=3, cosine=float("nan"), max_abs=0.0), Thresholds()) is not None


# ---------------------------------------------------------------- classes, probs


def test_softmax_rows_are_classes_and_labels_give_accuracy() -> None:
    logits = RNG.normal(size=(20, 1, 5)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    broken = probs.copy()
    broken[:2] = np.roll(broken[:2], 1, axis=-1)
    labels = probs.argmax(-1)[:, 0]
    fid = _fid([probs], [broken], ["softmax"], labels=labels)
    out = fid.outputs[0]
    assert out.kind == "classes" and "softmax over K=5" in out.why
    assert out.accuracy == 0.9 and out.reference_accuracy == 1.0 and fid.accuracy == 0.9
    assert "10.0 points below" in (judge(fid, Thresholds()) or "")
    assert judge(fid, Thresholds(max_drop=10.0)) is None


def test_sigmoid_decisions_crossing_half() -> None:
    ref = np.full((10, 1, 1), 0.7)
    got = ref.copy()
    got[:2] = 0.3
    fid = _fid([ref], [got], ["scores"])
    assert fid.outputs[0].kind == "probs" and "[0, 1]" in fid.outputs[0].why
    assert judge(fid, Thresholds()) == (
        "output 'scores': 2 of 10 probabilities cross 0.5 (20.0% > --max-drop 1.0)")
    custom = Thresholds(metrics=(("scores", "probs:threshold=0.2"),))
    assert judge(_fid([ref], [got], ["scores"], custom), custom) is None


def test_unlabelled_scores_are_values_unless_named_or_labelled() -> None:
    emb = RNG.normal(size=(10, 1, 16))
    assert _fid([emb], [emb], ["y"]).outputs[0].kind == "values"
    assert _fid([emb], [emb], ["embedding"]).outputs[0].kind == "embedding"
    assert _fid([emb], [emb], ["logits"]).outputs[0].kind == "classes"
    labelled = _fid([emb], [emb], ["y"], labels=emb.argmax(-1)[:, 0])
    assert labelled.outputs[0].kind == "classes" and "labels" in labelled.outputs[0].why


# ---------------------------------------------------------------- sequences


def test_ctc_greedy_decoding() -> None:
    path = [0, 3, 3, 0, 3, 5, 5, 0]
    scores = np.eye(6)[path]
    assert ctc_greedy(scores) == (3, 3, 5)
    assert ctc_greedy(scores, blank=5) == (0, 3, 0, 3, 0)


def test_sequence_and_ctc_count_what_changes() -> None:
    """One frame of one sample changes. Its own generator: drawn from the module's RNG (whose
    state depends on the random test order) the change sometimes left the decoded string
    alone (a class before a repeat of itself turned blank: "2 2" and "_ 2" both decode "2")."""
    classes = np.random.default_rng(7).integers(0, 4, size=(10, 1, 12))
    classes[0, 0, :2] = (0, 1)  # decodes "0 1 ..."; with frame 0 turned to 1 below, "1 ..."
    frames = np.eye(4)[classes] * 0.9 + 0.025
    got = frames.copy()
    got[0, 0, 0] = np.roll(got[0, 0, 0], 1)  # one position of one sample changes
    as_seq = _fid([frames], [got], ["frames"])
    assert as_seq.outputs[0].kind == "sequence"
    assert as_seq.outputs[0].drop == pytest.approx(100 / 120)
    ctc = Thresholds(metrics=(("frames", "ctc:blank=3"),))
    as_ctc = _fid([frames], [got], ["frames"], ctc)
    assert as_ctc.outputs[0].kind == "ctc" and as_ctc.outputs[0].drop == 10.0
    assert "1 of 10 decoded strings differ (blank 3)" in (judge(as_ctc, ctc) or "")


def test_log_softmax_sequences_are_detected() -> None:
    logp = np.log(np.eye(4)[RNG.integers(0, 4, size=(6, 1, 9))] * 0.96 + 0.01)
    assert "log-softmax" in _fid([logp], [logp], ["ctc_out"]).outputs[0].why
    assert _fid([logp], [logp], ["ctc_out"]).outputs[0].kind == "ctc"


# ---------------------------------------------------------------- detectors, regression


def _yolo_rows(boxes: int = 5, classes: int = 2) -> np.ndarray:
    rows = np.zeros((1, 40, 4 + classes))
    rows[0, :, :2] = RNG.uniform(20, 300, size=(40, 2))
    rows[0, :, 2:4] = RNG.uniform(10, 40, size=(40, 2))
    # the first rows are confident detections of class 0, on a diagonal 60 px apart and 20 px wide:
    # none overlaps another (NMS keeps all), nor does one moved 100 px (whatever the test order)
    rows[0, :boxes, :2] = 30.0 + 60.0 * np.arange(boxes)[:, None]
    rows[0, :boxes, 2:4] = 20.0
    rows[0, :boxes, 4 + 0] = 0.9
    return rows


def test_yolo_matches_boxes_of_the_same_class() -> None:
    ref = np.stack([_yolo_rows() for _ in range(4)])
    limits = Thresholds(metrics=(("out", "yolo"),))
    same = _fid([ref], [ref.copy()], ["out"], limits)
    assert same.outputs[0].passed and same.outputs[0].numbers["map50"] == 1.0
    moved = ref.copy()
    moved[:, 0, :2, :2] += 100.0  # two detections per sample move away
    fid = _fid([ref], [moved], ["out"], limits)
    assert fid.outputs[0].numbers["matched"] == 12 and fid.outputs[0].numbers["detections"] == 20
    assert "12 of 20 fp32 detections matched" in (judge(fid, limits) or "")
    transposed = Thresholds(metrics=(("out", "yolo:score=0.5"),))
    t_ref, t_got = ref.transpose(0, 1, 3, 2), moved.transpose(0, 1, 3, 2)  # [1, 4 + C, N]
    assert _fid([t_ref], [t_got], ["out"], transposed).outputs[0].numbers["matched"] == 12


def test_ssd_pairs_boxes_with_a_scores_output() -> None:
    # ten disjoint boxes (none suppressed by NMS), whatever order the tests run in
    low = np.arange(10)[:, None] * 0.1 * np.ones(2)
    corners = np.broadcast_to(np.concatenate([low, low + 0.05], axis=1), (3, 1, 10, 4)).copy()
    scores = np.zeros((3, 1, 10, 3))
    scores[:, :, :4, 1] = 0.8
    limits = Thresholds(metrics=(("boxes", "ssd:scores=scores"),))
    fid = _fid([corners, scores], [corners, scores * 0.2], ["boxes", "scores"], limits)
    boxes = fid.outputs[0]
    assert boxes.kind == "ssd" and boxes.numbers["detections"] == 12
    assert boxes.numbers["matched"] == 0 and not boxes.passed


def test_regression_relative_error() -> None:
    ref = RNG.uniform(1, 2, size=(8, 1, 3))
    limits = Thresholds(metrics=(("*", "regression"),))
    assert judge(_fid([ref], [ref * 1.05], ["age"], limits), limits) is None
    fid = _fid([ref], [ref * 1.5], ["age"], limits)
    assert fid.outputs[0].rel_error == pytest.approx(0.5)
    assert "relative error 0.5000 > 0.1000 (--max-error 0.1)" in (judge(fid, limits) or "")


def test_values_error_is_bounded_by_max_error_or_by_the_cosine_when_that_is_tighter() -> None:
    # landmarks-like output: large offset, small spread; an error of 15% of the spread keeps
    # the cosine ~1.0 (iris landmarks at int8: 0.8 px off on a 7 px iris)
    ref = 100 + RNG.normal(0, 1, size=(40, 1, 30))
    got = [ref + RNG.normal(0, 0.15, size=ref.shape)]
    limits = Thresholds()
    fid = _fid([ref], got, ["iris"], limits)
    assert fid.outputs[0].cosine > 0.9999 and 0.12 < fid.outputs[0].rel_rms < 0.18
    assert "of its spread across samples > 0.100 (--max-error 0.1)" in (judge(fid, limits) or "")
    assert judge(fid, Thresholds(max_error=0.2)) is None
    strict = Thresholds(min_cosine=0.999, max_error=0.2)
    assert "> 0.045 (from --min-cosine 0.999)" in (judge(fid, strict) or "")


# ---------------------------------------------------------------- flags and custom metrics


@pytest.mark.parametrize(("flag", "words"), [
    ("out=boxes", "unknown kind 'boxes'"), ("out=ctc:blnk=1", "ctc takes no option 'blnk'"),
    ("out=ctc:blank=x", "is not a number"), ("yolo", "name the output, as OUTPUT=yolo"),
    ("nosuchmodule_xyz:fn", "cannot import nosuchmodule_xyz"),
    ("values", "name the output"), ("justtext", "give OUTPUT=KIND or module:function"),
])
def test_bad_metric_flags_are_usage_errors(flag: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        parse_metrics([flag])


def test_metric_for_an_unknown_output_names_the_outputs() -> None:
    pairs, _ = parse_metrics(["scroes=probs"])
    with pytest.raises(UsageError, match=r"no output 'scroes' \(outputs: boxes, scores\)"):
        check_metrics(Thresholds(metrics=pairs), ["boxes", "scores"])
    check_metrics(Thresholds(metrics=(("*", "values"), ("Identity:0", "probs"))),
                  ["Identity:0"])
    assert parse_metrics(["Identity:0=probs"]) == ((("Identity:0", "probs"),), ())


def test_custom_metric_gets_stacked_outputs_and_labels(tmp_path: Path) -> None:
    module = tmp_path / "my_check.py"
    module.write_text(
        "import numpy as np\n"
        "def close(reference, candidate, labels):\n"
        "    err = float(np.max(np.abs(reference['y'] - candidate['y'])))\n"
        "    assert reference['y'].shape == (6, 1, 3) and labels.shape == (6,)\n"
        "    return err < 0.1, err, f'max error {err:.2f}'\n"
        "def broken(reference, candidate, labels):\n"
        "    return 'yes'\n")
    ref = RNG.normal(size=(6, 1, 3))
    _, custom = parse_metrics([f"{module}:close"])
    limits = Thresholds(custom=custom)
    fid = _fid([ref], [ref + 0.5], ["y"], limits, labels=np.arange(6) % 3)
    mine = fid.outputs[-1]
    assert mine.kind == "custom" and mine.numbers["value"] == pytest.approx(0.5)
    assert judge(fid, Thresholds(min_cosine=-1, custom=custom)) == (
        f"--metric {module}:close: max error 0.50")
    bad = Thresholds(custom=parse_metrics([f"{module}:broken"])[1])
    with pytest.raises(UsageError, match="expected \\(passed: bool, value: float"):
        _fid([ref], [ref], ["y"], bad)
    with pytest.raises(UsageError, match="has no function nothere"):
        parse_metrics([f"{module}:nothere"])


def test_fidelity_round_trips_with_its_outputs() -> None:
    ref = RNG.normal(size=(4, 1, 3))
    fid = _fid([ref], [ref], ["y"])
    again = Fidelity.from_json(fid.to_json())
    assert again == fid and again.outputs[0].why.startswith("default")


def test_probs_on_softmax_rows_counts_arg_max_flips() -> None:
    rows = np.array([[0.7, 0.2, 0.1]] * 10)[:, None, :]
    got = rows.copy()
    got[0, 0] = [0.2, 0.7, 0.1]
    limits = Thresholds(metrics=(("p", "probs"),))
    assert judge(_fid([rows], [got], ["p"], limits), limits) == (
        "output 'p': arg-max flips on 1 of 10 probability rows (10.0% > --max-drop 1.0)")


def test_integer_boolean_and_half_outputs_are_compared() -> None:
    ids = RNG.integers(0, 50, size=(6, 1, 4))
    mask = ids > 25
    half = RNG.normal(size=(6, 1, 4)).astype(np.float16)
    fid = _fid([ids, mask, half], [ids, ~mask, half], ["ids", "mask", "half"])
    assert [o.passed for o in fid.outputs] == [True, False, True]
    assert judge(fid, Thresholds()) is not None and "'mask'" in (judge(fid, Thresholds()) or "")


def test_offset_outputs_keep_their_spread_exactly() -> None:
    from edge.core.verify.kinds import spread

    ref = [1e6 + np.array([[0.0, 1.0]]), 1e6 + np.array([[2.0, 3.0]])]
    assert spread(ref) == pytest.approx(1.0)
    assert spread([np.array([[3.0, 5.0]])]) == pytest.approx(1.0)  # one sample: its own std
