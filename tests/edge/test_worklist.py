"""Issue 38: optimize converts what can win: the work order, the candidates skipped because
they cannot be chosen (with the reason), --exhaustive, --time-budget, and the latency estimate
with its kept corrections. The logic on given results here; end to end in
tests/test_convert_what_wins.py."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from edge.core import estimate as est
from edge.core.plan import MIXED, Planned, runs_faster
from edge.core.profile import load_profile
from edge.core.select import TIE
from edge.core.values import ORIGINAL, Artifact, Candidate, CandidateResult, Fidelity
from edge.flows.worklist import Policy, cannot_win, work_order

RPI4 = ("tflite", "onnxruntime", "ncnn", "executorch", "ncnn-vulkan")


def _planned(target: str, precision: str, keep: bool = True, variant: str = "") -> Planned:
    return Planned(candidate=Candidate(target=target, precision=precision, variant=variant),
                   keep=keep, reason="")


def _result(target: str, precision: str, status: str = "passed",
            runtime: str | None = None) -> CandidateResult:
    cand = Candidate(target=target, precision=precision)
    artifact = Artifact(candidate=cand, file=f"artifacts/{cand.id}",
                        sha256=hashlib.sha256(cand.id.encode()).hexdigest(), size_bytes=1,
                        runtime=runtime or target)
    return CandidateResult(candidate=cand, status=status, reason="", artifact=artifact)


PLAN = (_planned(ORIGINAL, "fp32"), _planned("tflite", "int8"),
        _planned("tflite", "int8-dynamic"), _planned("tflite", "fp16", keep=False),
        _planned("tflite", "fp32"), _planned("onnxruntime", "int8"),
        _planned("onnxruntime", "fp32"), _planned("onnxruntime", "int8", variant=MIXED),
        _planned("ncnn", "fp32"), _planned("executorch", "int8"))
ORIG = _result(ORIGINAL, "fp32", runtime="onnxruntime")


def _policy(**kw: object) -> Policy:
    return Policy(runtimes=RPI4, profile="rpi4", **{"by_order": True, **kw})  # type: ignore[arg-type]


def _ids(order: list[int]) -> list[str]:
    return [PLAN[i].candidate.id for i in order if PLAN[i].keep]


def test_by_order_the_original_first_then_the_profiles_order_lower_precision_first() -> None:
    assert _ids(work_order(PLAN, _policy())) == [
        "original", "tflite-int8", "tflite-int8-dynamic", "tflite-fp32", "onnxruntime-int8",
        "onnxruntime-fp32", "ncnn-fp32", "executorch-int8", "onnxruntime-int8-mixed"]


def test_a_faithful_candidate_makes_every_one_ranking_after_it_unchoosable() -> None:
    policy = _policy()
    done = [ORIG, _result("tflite", "int8")]
    for planned in PLAN[2:]:
        why = cannot_win(planned, done, policy)
        if planned.keep:
            assert why is not None and why.startswith("cannot be chosen: tflite-int8 keeps "
                                                      "fidelity and ranks before it")
            assert "--exhaustive converts it" in why
        else:
            assert why is None  # the plan's own reason stands
    assert cannot_win(PLAN[0], done, policy) is None  # the original is always tried


def test_a_rejected_candidate_settles_nothing() -> None:
    done = [ORIG, _result("tflite", "int8", status="rejected")]
    assert cannot_win(PLAN[2], done, _policy()) is None  # tflite-int8-dynamic is next


def test_on_the_originals_runtime_a_faithful_candidate_does_not_settle() -> None:
    """The chooser sets aside a candidate on the original's runtime that this host times
    slower than the original: it cannot settle the order until timed, so the next ones run
    until the original (which settles) or a candidate on another runtime."""
    dynamic = _planned("onnxruntime", "int8-dynamic")
    done = [ORIG, _result("tflite", "int8", status="rejected"),
            _result("tflite", "int8-dynamic", status="rejected"),
            _result("tflite", "fp32", status="rejected"), _result("onnxruntime", "int8")]
    assert cannot_win(dynamic, done, _policy()) is None  # ranks before the original: tried
    for planned in (PLAN[6], PLAN[8]):  # onnxruntime-fp32, ncnn-fp32: after the original
        assert (cannot_win(planned, done, _policy()) or "").startswith(
            "cannot be chosen: original keeps fidelity")


def test_exhaustive_tries_everything() -> None:
    done = [ORIG, _result("tflite", "int8")]
    assert all(cannot_win(p, done, _policy(exhaustive=True)) is None for p in PLAN)


def test_a_spent_time_budget_leaves_the_rest_out_saying_what_was_found() -> None:
    policy = _policy(budget_s=1.0, started=time.monotonic() - 5, exhaustive=True)
    why = cannot_win(PLAN[4], [ORIG], policy)
    assert why == ("not tried: the --time-budget of 1 s was spent (candidates are tried "
                   "likely winners first); faithful so far: original")


def _estimates(low: dict[str, float], high: dict[str, float]) -> dict[str, est.Estimate]:
    return {k: est.Estimate(ms=low[k], low_ms=low[k], high_ms=high.get(k, math.inf),
                            basis="test") for k in low}


def test_measured_nothing_is_skipped_while_the_estimates_are_open() -> None:
    estimates = _estimates({"tflite-int8": 1.0, "tflite-fp32": 50.0}, {})
    policy = _policy(by_order=False, estimates=estimates)
    assert cannot_win(PLAN[4], [ORIG, _result("tflite", "int8")], policy) is None


def test_measured_a_candidate_whose_best_case_cannot_win_is_skipped() -> None:
    estimates = _estimates({"tflite-int8": 1.0, "tflite-fp32": 2.0, "onnxruntime-int8": 1.4},
                           {"tflite-int8": 1.5, "tflite-fp32": 4.0, "onnxruntime-int8": 2.0})
    policy = _policy(by_order=False, estimates=estimates)
    exact = Fidelity(samples=20, cosine=1.0, max_abs=0.0, allowance_used=0.0)
    done = [ORIG, replace(_result("tflite", "int8"), fidelity=exact)]
    why = cannot_win(PLAN[4], done, policy)  # tflite-fp32: best 2.0 > 1.5 * 1.1
    assert why is not None and "cannot win by the 10% tie margin" in why
    # onnxruntime-int8 could tie with it (1.4 < 1.5 * 1.1) but ranks after it (as faithful at
    # best, the same precision, a later runtime), and cannot beat it by the margin
    # (1.4 * 1.1 >= 1.5): no win either
    assert cannot_win(PLAN[5], done, policy) is not None
    # a tie goes to the more faithful: against a lossy tflite-int8, it may still win
    lossy = replace(exact, allowance_used=0.6)
    assert cannot_win(PLAN[5], [ORIG, replace(done[1], fidelity=lossy)], policy) is None
    # by the estimates' order, the likely faster are tried first
    assert _ids(work_order(PLAN, policy))[:3] == ["original", "tflite-int8", "onnxruntime-int8"]


@pytest.fixture
def sample_model() -> Path:
    import edge

    return Path(edge.__file__).parent / "samples" / "digits.onnx"


def test_the_roofline_costs_int8_less_than_fp32_on_a_device_with_int8_peaks(
        sample_model: Path) -> None:
    work = est.work(sample_model)
    rpi4 = load_profile("rpi4")
    assert work.macs > 0 and work.nodes > 0
    int8, fp32 = est.roofline(work, rpi4, "int8"), est.roofline(work, rpi4, "fp32")
    assert int8.compute_ms == pytest.approx(fp32.compute_ms / 2)  # 96 vs 48 GOPS
    assert int8.memory_ms < fp32.memory_ms
    open_ = est.estimate(fp32, [])
    assert math.isinf(open_.high_ms) and open_.low_ms == fp32.compute_ms


def test_kept_timings_correct_the_estimate_and_bound_it(tmp_path: Path) -> None:
    kept = est.Corrections(tmp_path / "estimates.json")
    kept.add({"rpi4|tflite|int8": 10.0}, "a" * 64)
    kept.add({"rpi4|tflite|int8": 20.0}, "b" * 64)
    kept.add({"rpi4|tflite|int8": 12.0}, "b" * 64)  # the same model again: its latest counts
    assert sorted(kept.ratios("rpi4|tflite|int8")) == [10.0, 12.0]
    line = est.Roofline(compute_ms=1.0, memory_ms=0.0, nodes=0)
    assert math.isinf(est.estimate(line, kept.ratios("rpi4|tflite|int8")).high_ms)
    kept.add({"rpi4|tflite|int8": 15.0}, "c" * 64)
    found = est.estimate(line, kept.ratios("rpi4|tflite|int8"))
    assert found.ms == 12.0
    assert found.low_ms == pytest.approx(10.0 / est.MARGIN)
    assert found.high_ms == pytest.approx(15.0 * est.MARGIN)
    assert "kept timings of 3 models" in found.basis


def test_a_torn_corrections_file_reads_as_nothing_kept(tmp_path: Path) -> None:
    path = tmp_path / "estimates.json"
    path.write_text('{"rpi4|tflite|int8": {"a": 1.0, "b": "x", "c": -2, ')
    assert est.Corrections(path).ratios("rpi4|tflite|int8") == []
    path.write_text('[1, 2]')
    assert est.Corrections(path).ratios("rpi4|tflite|int8") == []
    path.write_text('{"k": {"a": "x", "b": -1, "c": 2.0}, "j": [1.0]}')
    assert est.Corrections(path).ratios("k") == [2.0] and est.Corrections(path).ratios("j") == []
    est.Corrections(path).add({"k": float("nan"), "j": 2.0}, "m" * 64)
    assert est.Corrections(path).ratios("k") == [2.0]
    assert est.Corrections(path).ratios("j") == [2.0]


def test_by_order_a_precision_the_profile_gives_no_gain_comes_after_fp32() -> None:
    # a profile whose int8 peak is fp32's: fp32 is tried (and ranks) before int8, so a
    # faithful int8 does not make fp32 unchoosable
    rpi4 = load_profile("rpi4")
    flat = rpi4.model_copy(update={"compute": rpi4.compute.model_copy(
        update={"peak_gops": {"fp32": 48.0, "int8": 48.0}})})
    policy = _policy(faster=runs_faster(flat, TIE))
    order = _ids(work_order(PLAN, policy))
    assert order.index("tflite-fp32") < order.index("tflite-int8")
    assert cannot_win(PLAN[4], [ORIG, _result("tflite", "int8")], policy) is None
