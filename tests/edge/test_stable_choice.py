"""A measured choice that a passing load spike cannot flip (``edge.core.select.settle``).

Deterministic: the round medians come from an injected timing source (the issue's MobileNetV2
figures for a one-thread x86-64 profile: OpenVINO int8 about 2.7 ms, ONNX Runtime int8 3.45 ms),
with a CPU-bound process slowing chosen blocks; no machine's noise decides these tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from edge.core.select import choose_candidate
from edge.core.settle import MAX_EXTRA_ROUNDS, paired, settle
from edge.core.values import Artifact, Candidate, CandidateResult, Contest

X86 = ("onnxruntime", "openvino", "tflite")
#: Each candidate's true median ms and a fixed per-round wobble (under 2 %).
TRUE_MS = {"onnxruntime-fp32": 6.10, "onnxruntime-int8": 3.45, "openvino-fp32": 5.20,
           "openvino-int8": 2.72}
WOBBLE = (1.00, 1.012, 0.991, 1.017, 0.995, 1.006, 0.988, 1.01)


def _result(target: str, precision: str) -> CandidateResult:
    cand = Candidate(target=target, precision=precision)
    digest = hashlib.sha256(cand.id.encode()).hexdigest()
    artifact = Artifact(candidate=cand, file=f"artifacts/{cand.id}", sha256=digest,
                        size_bytes=1, runtime=target)
    return CandidateResult(candidate=cand, status="passed", reason="keeps fidelity",
                           artifact=artifact)


RESULTS = [_result(*cid.split("-")) for cid in TRUE_MS]


class Timer:
    """An injected timing source: round medians of the asked candidates, a CPU-bound process
    slowing ``spiked`` (round number -> candidate ids) by ``factor``; it counts its calls."""

    def __init__(self, spiked: dict[int, set[str]] | None = None, factor: float = 1.45):
        self.spiked, self.factor, self.done = spiked or {}, factor, 0
        self.calls: list[tuple[tuple[str, ...], int]] = []

    def __call__(self, ids: Sequence[str], rounds: int) -> dict[str, list[float]]:
        self.calls.append((tuple(ids), rounds))
        out: dict[str, list[float]] = {k: [] for k in ids}
        for _ in range(rounds):
            for k in ids:
                slow = self.factor if k in self.spiked.get(self.done, ()) else 1.0
                out[k].append(TRUE_MS[k] * WOBBLE[self.done % len(WOBBLE)] * slow)
            self.done += 1
        return out


def _settled(timer: Timer) -> tuple[str | None, Contest | None, str]:
    first = timer(list(TRUE_MS), 5)
    timer.calls.clear()
    choice, contest, _ = settle(RESULTS, X86, first, timer, where="this host")
    return choice.id, contest, choice.reason


def test_a_clear_winner_gets_no_extra_rounds() -> None:
    timer = Timer()
    chosen, contest, reason = _settled(timer)
    assert chosen == "openvino-int8"
    assert timer.calls == []  # nothing more was timed
    assert contest is not None and contest.clear and contest.extra_rounds == 0
    assert contest.rounds == 5 and set(contest.round_winners) == {"openvino-int8"}
    assert "clear in 5 interleaved rounds" in reason


def test_a_spike_on_the_winner_gets_extra_rounds_of_just_the_contenders() -> None:
    # a CPU-bound process slows OpenVINO int8's blocks in three of the five rounds: by plain
    # medians ONNX Runtime int8 wins (the flip the issue saw)
    timer = Timer(spiked={1: {"openvino-int8"}, 2: {"openvino-int8"}, 3: {"openvino-int8"}})
    first = Timer(spiked=timer.spiked)(list(TRUE_MS), 5)
    plain = {k: sorted(v)[2] for k, v in first.items()}
    assert choose_candidate(RESULTS, X86, ms=plain).id == "onnxruntime-int8"

    chosen, contest, reason = _settled(timer)
    assert chosen == "openvino-int8"
    assert contest is not None and contest.extra_rounds == 5 and contest.clear
    assert timer.calls == [(("onnxruntime-int8", "openvino-int8"), 5)]
    assert contest.contenders == ("onnxruntime-int8", "openvino-int8")
    standing = {s.candidate: s for s in contest.standings}
    assert len(standing["openvino-int8"].round_ms) == 10
    assert len(standing["openvino-fp32"].round_ms) == 5  # not a contender: not re-timed
    assert standing["openvino-int8"].high_ms > standing["onnxruntime-int8"].low_ms  # overlap
    assert standing["openvino-int8"].paired_ms < standing["onnxruntime-int8"].paired_ms
    assert "5 more of onnxruntime-int8, openvino-int8: then clear" in reason


def test_a_spike_over_whole_rounds_cancels_in_the_paired_ratios() -> None:
    timer = Timer(spiked={r: set(TRUE_MS) for r in (0, 1, 2)}, factor=1.8)
    chosen, contest, _ = _settled(timer)
    assert chosen == "openvino-int8" and contest is not None and contest.extra_rounds == 0
    ms = paired([{k: v[i] for k, v in timer(list(TRUE_MS), 5).items()} for i in range(5)])
    assert abs(ms["onnxruntime-int8"] / ms["openvino-int8"] - 3.45 / 2.72) < 0.03


def test_a_winner_never_clear_stops_at_the_bound_and_says_so() -> None:
    spiked = {r: {"openvino-int8"} for r in range(1, 40, 3)}  # every third round, forever
    timer = Timer(spiked=spiked)
    chosen, contest, reason = _settled(timer)
    assert contest is not None and contest.extra_rounds == MAX_EXTRA_ROUNDS
    assert not contest.clear and sum(r for _, r in timer.calls) == MAX_EXTRA_ROUNDS
    assert chosen == "openvino-int8"  # the paired medians: the spiked rounds are a minority
    assert "still not clear" in reason


def test_the_contest_round_trips_through_the_manifest_json() -> None:
    _, contest, _ = _settled(Timer(spiked={2: {"openvino-int8"}}))
    assert contest is not None
    assert Contest.from_json(contest.to_json()) == contest
