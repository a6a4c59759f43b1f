"""The user's original file in the one chooser: replaced only by a clear, measured win.

The choice logic is checked on given timings (no machine's noise decides these tests); the
end-to-end presence and verification of the original is in tests/test_original.py.
"""

from __future__ import annotations

import hashlib

from edge.core.select import TIE, choose_candidate, label
from edge.core.values import ORIGINAL, Artifact, Candidate, CandidateResult

RPI4 = ("tflite", "onnxruntime")
#: Bytes on disk by precision (a quantizer that did its work shrinks the file).
SIZE = {"fp32": 4000, "fp16": 2000, "int8": 1000, "int8-dynamic": 1000}


def _result(target: str, precision: str, runtime: str | None = None,
            status: str = "passed", sha256: str = "", size: int = 0) -> CandidateResult:
    cand = Candidate(target=target, precision=precision)
    digest = sha256 or hashlib.sha256(f"{cand.id} {runtime}".encode()).hexdigest()
    artifact = Artifact(candidate=cand, file=f"artifacts/{cand.id}", sha256=digest,
                        size_bytes=size or SIZE[precision], runtime=runtime or target)
    return CandidateResult(candidate=cand, status=status, reason="keeps fidelity",
                           artifact=artifact)


ORIG_ONNX = _result(ORIGINAL, "fp32", "onnxruntime")
ORIG_TFLITE = _result(ORIGINAL, "fp32", "tflite")
TFL_INT8 = _result("tflite", "int8")
ORT_FP32 = _result("onnxruntime", "fp32")
ORT_INT8 = _result("onnxruntime", "int8")


def test_the_original_is_labelled_by_its_runtime_and_own_precision() -> None:
    assert ORIG_ONNX.candidate.id == "original"
    assert label(ORIG_ONNX) == "original (onnxruntime, fp32)"
    assert label(_result(ORIGINAL, "int8-dynamic", "onnxruntime")) == \
        "original (onnxruntime, int8-dynamic)"
    assert label(TFL_INT8) == "tflite-int8"


def test_nothing_faster_keeps_the_original_and_names_the_comparison() -> None:
    ms = {"original": 2.0, "tflite-int8": 2.6, "onnxruntime-int8": 3.1}
    choice = choose_candidate([ORIG_ONNX, TFL_INT8, ORT_INT8], RPI4, ms=ms)
    assert choice.id == ORIGINAL and choice.basis == "measured"
    assert "the original (onnxruntime, fp32) kept" in choice.reason
    assert "median 2.000 ms" in choice.reason
    assert "nothing converted is faster" in choice.reason
    assert "tflite-int8 2.600 ms" in choice.reason and "0.77x" in choice.reason


def test_a_converted_candidate_within_the_tie_band_does_not_replace_the_original() -> None:
    # tflite-int8 is 5% faster: noise on a shared machine; the original stays
    ms = {"original": 2.0, "tflite-int8": 2.0 / 1.05}
    choice = choose_candidate([ORIG_ONNX, TFL_INT8], RPI4, ms=ms)
    assert choice.id == ORIGINAL
    assert f"faster by more than {TIE:.0%} (noise)" in choice.reason
    assert "the original kept" in choice.reason


def test_a_clearly_faster_artifact_wins_with_its_ratio_to_the_original() -> None:
    ms = {"original": 3.0, "tflite-int8": 1.5, "onnxruntime-fp32": 2.9}
    choice = choose_candidate([ORIG_ONNX, TFL_INT8, ORT_FP32], RPI4, ms=ms)
    assert choice.id == "tflite-int8" and choice.basis == "measured"
    assert "2.00x the speed of the original (onnxruntime, fp32) (3.000 ms)" in choice.reason


def test_just_outside_the_tie_band_the_faster_one_wins() -> None:
    ms = {"original": 2.0, "onnxruntime-int8": 2.0 / (1 + TIE) * 0.99}
    choice = choose_candidate([ORIG_ONNX, ORT_INT8], RPI4, ms=ms)
    assert choice.id == "onnxruntime-int8"
    assert "the speed of the original" in choice.reason


def test_a_rejected_original_takes_no_part() -> None:
    rejected = _result(ORIGINAL, "fp32", "onnxruntime", status="rejected")
    ms = {"original": 1.0, "tflite-int8": 3.0}
    choice = choose_candidate([rejected, TFL_INT8], RPI4, ms=ms)
    assert choice.id == "tflite-int8"
    assert "original" not in choice.reason


def test_untrusted_timings_follow_the_profile_and_say_so() -> None:
    # host is not the device: the profile's order decides; int8 on the first runtime ranks
    # before the original ONNX on ONNX Runtime, and the reason says it was not measured
    ms = {"original": 1.0, "tflite-int8": 5.0}
    choice = choose_candidate([ORIG_ONNX, TFL_INT8, ORT_FP32], RPI4, ms=ms, trusted=False,
                              untrusted_why="this host is not an aarch64 device")
    assert choice.id == "tflite-int8" and choice.basis == "order"
    assert "ranks before the original (onnxruntime, fp32) by the profile's order" in choice.reason
    assert "(its runtime tflite comes first), not by a measurement" in choice.reason
    assert "this host is not an aarch64 device" in choice.reason


def test_by_order_the_original_beats_its_own_runtime_and_precision() -> None:
    # ONNX-only device, only fp32 kept fidelity: the user's file first among equals
    choice = choose_candidate([ORT_FP32, ORIG_ONNX], ("onnxruntime",), trusted=False)
    assert choice.id == ORIGINAL
    assert "the original (onnxruntime, fp32) ranks first by the profile's order" in choice.reason


def test_a_tflite_original_ranks_on_the_tflite_runtime() -> None:
    choice = choose_candidate([ORT_INT8, ORIG_TFLITE], RPI4, trusted=False)
    assert choice.id == ORIGINAL  # tflite ranks before onnxruntime on rpi4


def test_device_measurements_are_judged_the_same_way() -> None:
    ms = {"original": 4.0, "tflite-int8": 4.2}
    choice = choose_candidate([ORIG_TFLITE, TFL_INT8], RPI4, ms=ms,
                              where="pi@raspberrypi (ssh) in one interleaved bench")
    assert choice.id == ORIGINAL
    assert "measured on pi@raspberrypi (ssh)" in choice.reason


def test_off_the_device_the_same_runtime_slower_on_the_host_does_not_replace_the_original() -> None:
    # rpi4 profile on an x86 host: tflite-int8 ranks before the original .tflite by the
    # profile's order, but the host ran it on the original's own runtime 1.4x slower
    ms = {"original": 1.0, "tflite-int8": 1.4, "onnxruntime-int8": 0.5}
    choice = choose_candidate([ORIG_TFLITE, TFL_INT8, ORT_INT8], RPI4, ms=ms, trusted=False,
                              untrusted_why="this host is not an aarch64 device")
    assert choice.id == ORIGINAL and choice.basis == "order"
    assert "the original's own runtime ran tflite-int8 0.71x the speed of the original" \
        in choice.reason
    assert "not preferred to it" in choice.reason


def test_off_the_device_the_same_runtime_within_the_tie_band_keeps_the_profiles_order() -> None:
    ms = {"original": 1.0, "tflite-int8": 1.0 + TIE * 0.9}
    choice = choose_candidate([ORIG_TFLITE, TFL_INT8], RPI4, ms=ms, trusted=False)
    assert choice.id == "tflite-int8"
    assert "not preferred" not in choice.reason
    # another runtime's host timing says nothing about the device: the order stands
    choice = choose_candidate([ORIG_ONNX, TFL_INT8], RPI4, ms={"original": 1.0,
                                                               "tflite-int8": 9.0},
                              trusted=False)
    assert choice.id == "tflite-int8"


def test_a_byte_identical_copy_never_replaces_the_original() -> None:
    # LiteRT's fp32 of a .tflite with nothing to decode is the original file itself: a
    # shared host made it look 13% faster; the original stays, and the reason says why
    copy = _result("litert", "fp32", "tflite", sha256=ORIG_TFLITE.artifact.sha256)
    ms = {"original": 15.5, "litert-fp32": 13.7, "tflite-int8": 16.0}
    choice = choose_candidate([ORIG_TFLITE, copy, TFL_INT8], RPI4, ms=ms)
    assert choice.id == ORIGINAL and choice.basis == "measured"
    assert "litert-fp32 measured faster is the original file, byte for byte" in choice.reason


def test_a_round_that_timed_only_the_originals_copy_still_chooses_the_original() -> None:
    """A round of just the contenders (issue 29's extra rounds) can time onnxruntime-fp32, the
    original byte for byte, without the original: the original is chosen at its copy's time
    (a zoo run once stopped here with KeyError 'original', exit 4)."""
    copy = _result("onnxruntime", "fp32", sha256=ORIG_ONNX.artifact.sha256)
    ms = {"onnxruntime-fp32": 2.0, "tflite-int8": 2.5}
    choice = choose_candidate([ORIG_ONNX, copy, TFL_INT8], RPI4, ms=ms)
    assert choice.id == ORIGINAL and choice.basis == "measured"
    assert "2.000 ms" in choice.reason
