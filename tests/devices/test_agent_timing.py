"""THE timing method (devices/agent/timing.py): interleaving, reversal, idle gap, warm-up, the
time budget, medians -- on a deterministic fake clock -- and that every timing in edge, on the
host and in the agent, goes through it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from devices.agent import timing

DIGITS = Path(__file__).parents[2] / "edge" / "samples" / "digits.onnx"


class FakeClock:
    """A clock that only moves when a fake call runs (``cost`` s) or the method sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.log.append(f"idle {seconds}")
        self.now += seconds

    def call(self, name: str, cost: float):
        def run() -> None:
            self.log.append(name)
            self.now += cost
        return run


def _time(clock: FakeClock, costs: dict[str, float], **plan) -> timing.Timed:
    calls = {name: clock.call(name, cost) for name, cost in costs.items()}
    return timing.interleaved(calls, clock=clock, sleep=clock.sleep, **plan)


def test_rounds_interleave_and_reverse_every_other_round() -> None:
    clock = FakeClock()
    timed = _time(clock, {"a": 0.001, "b": 0.002, "c": 0.003}, rounds=4, runs=8, warmup=0,
                  idle_s=0.0)
    assert timed.order == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]
    assert clock.log == ["a", "a", "b", "b", "c", "c", "c", "c", "b", "b", "a", "a"] * 2
    assert timed.rounds == 4


def test_each_block_is_an_idle_gap_then_warm_up_then_timed_calls() -> None:
    clock = FakeClock()
    timed = _time(clock, {"a": 0.001, "b": 0.004}, rounds=2, runs=3, warmup=2, idle_s=0.05)
    # runs spread over the rounds: 2 then 1; every block: idle, 2 warm-ups, its timed calls
    assert clock.log == ["idle 0.05", "a", "a", "a", "a", "idle 0.05", "b", "b", "b", "b",
                         "idle 0.05", "b", "b", "b", "idle 0.05", "a", "a", "a"]
    assert timed.samples["a"] == pytest.approx([1.0, 1.0, 1.0])  # ms; warm-ups not counted
    assert timed.samples["b"] == pytest.approx([4.0, 4.0, 4.0])


def test_a_budget_lowers_the_rounds_after_the_first_but_not_below_the_minimum() -> None:
    clock = FakeClock()  # a round: 2 candidates x (0.1 s idle + 1 call of 0.15 s) = 0.5 s
    timed = _time(clock, {"a": 0.15, "b": 0.15}, rounds=10, runs=10, warmup=0, idle_s=0.1,
                  budget_s=1.6)
    assert timed.rounds == 3 and len(timed.order) == 3  # 3 rounds of 0.5 s fit 1.6 s
    assert [len(timed.samples[k]) for k in "ab"] == [3, 3]
    clock = FakeClock()
    timed = _time(clock, {"a": 0.15, "b": 0.15}, rounds=10, runs=10, warmup=0, idle_s=0.1,
                  budget_s=0.01, min_rounds=2)
    assert timed.rounds == 2 and [len(timed.samples[k]) for k in "ab"] == [2, 2]
    clock = FakeClock()
    timed = _time(clock, {"a": 0.15}, rounds=4, runs=4, warmup=0, idle_s=0.0, budget_s=100)
    assert timed.rounds == 4  # within budget: as asked, never more


def test_fewer_runs_than_rounds_is_fewer_rounds_and_bad_plans_are_refused() -> None:
    clock = FakeClock()
    timed = _time(clock, {"a": 0.001}, rounds=5, runs=3, warmup=0, idle_s=0.0)
    assert timed.rounds == 3 and len(timed.samples["a"]) == 3
    assert timing.spread(7, 3) == [3, 2, 2] and timing.spread(100, 5) == [20] * 5
    for bad in ({"rounds": 0}, {"runs": 0}, {"warmup": -1}, {"idle_s": -1.0},
                {"min_rounds": 0}):
        plan = dict({"rounds": 2, "runs": 2, "warmup": 0, "idle_s": 0.0}, **bad)
        with pytest.raises(ValueError):
            _time(FakeClock(), {"a": 0.001}, **plan)
    with pytest.raises(ValueError):
        timing.interleaved({}, rounds=1, runs=1, warmup=0, idle_s=0.0)


def test_a_bad_host_plan_is_a_usage_error() -> None:
    from devices.measure import Rounds
    from edge.core.errors import UsageError

    for bad in ({"calls": 0}, {"rounds": 0}, {"warmup": -1}, {"idle_s": -0.1},
                {"budget_s": 0.0}, {"min_rounds": 0}):
        with pytest.raises(UsageError, match="cannot time with"):
            Rounds(**bad)
    assert Rounds(calls=7, warmup=2).options() == [
        "--runs", "7", "--warmup", "2", "--rounds", "5", "--idle-s", "0.02", "--min-rounds", "1"]


def test_medians_and_percentiles_of_the_samples() -> None:
    times = list(np.random.default_rng(1).exponential(size=57))
    summary = timing.summary(times)
    assert summary["p50_ms"] == pytest.approx(np.median(times))
    assert summary["p90_ms"] == pytest.approx(np.percentile(times, 90))
    assert summary["p99_ms"] == pytest.approx(np.percentile(times, 99))
    assert summary["mean_ms"] == pytest.approx(np.mean(times))


def test_hold_wraps_every_timed_block_and_before_runs_outside_it() -> None:
    clock, events = FakeClock(), []

    @contextmanager
    def hold() -> Iterator[None]:
        events.append("hold")
        yield
        events.append("release")

    def before(index: int, rounds: int, name: str) -> None:
        events.append(f"before {index}/{rounds} {name}")

    calls = {name: clock.call(name, 0.001) for name in "ab"}
    timing.interleaved(calls, rounds=2, runs=2, warmup=1, idle_s=0.0, hold=hold,
                       before=before, clock=clock, sleep=clock.sleep)
    assert events == ["before 0/2 a", "hold", "release", "before 0/2 b", "hold", "release",
                      "before 1/2 b", "hold", "release", "before 1/2 a", "hold", "release"]


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The candidates of every call of the one timing function, whoever calls it."""
    seen: list[list[str]] = []
    real = timing.interleaved

    def spy(calls, **kwargs):
        seen.append([str(name) for name in calls])
        return real(calls, **kwargs)

    monkeypatch.setattr(timing, "interleaved", spy)
    return seen


def test_host_timing_and_the_agent_bench_share_the_one_method(
        spied: list[list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    from devices.agent import cli
    from devices.measure import Rounds, time_files_here, time_here

    rounds = Rounds(rounds=2, calls=4, warmup=1, idle_s=0.0)
    host = time_here({"x": lambda: None, "y": lambda: None}, rounds, threads=1,
                     runtime="python")
    assert set(host) == {"x", "y"} and host["x"].runs == 4
    assert host["x"].where.startswith("host ") and host["x"].device["interleaved_rounds"] == 2
    files = time_files_here({"m": DIGITS}, rounds, threads=1)
    assert files["m"].runs == 4 and files["m"].runtime == "onnxruntime"
    assert cli.main(["bench", str(DIGITS), str(DIGITS), "--runs", "2", "--rounds", "2",
                     "--idle-s", "0", "--threads", "1"]) == 0
    assert '"order": [[0, 1], [1, 0]]' in capsys.readouterr().out
    assert spied == [["x", "y"], ["0"], ["0", "1"]]


def test_per_node_and_counter_profiles_time_the_whole_model_with_it(
        spied: list[list[str]], tmp_path: Path) -> None:
    import openvino as ov

    from targets.onnxruntime.profiling import node_profile
    from targets.openvino.profiling import openvino_counters

    profile = node_profile(DIGITS, threads=1, runs=3)
    assert profile.whole_ms > 0 and profile.nodes and profile.where.startswith("host ")
    ir = tmp_path / "digits.xml"
    ov.save_model(ov.convert_model(str(DIGITS)), str(ir), compress_to_fp16=False)
    counters = openvino_counters(ir, threads=1, runs=3)
    assert counters["whole_ms"] > 0 and counters["nodes"]
    assert spied == [["whole"], ["plain", "profiled"]]


#: Clock readers outside timing.py, and why they are not timings of a model.
NOT_TIMINGS = {
    "edge/flows/recover.py": "how long a recovery attempt took, for the log",
    "targets/openvino/target.py": "how long a conversion took, noted beside the artifact",
    "targets/tflite/onnx2tf_run.py": "how long the onnx2tf child process ran",
    "partition/client.py": "the live split client's per-request latency (run-split telemetry)",
    "partition/client_grpc.py": "the same over gRPC",
    "partition/client_http.py": "the same over REST, and each request's deadline",
    "edge/flows/cloud/tensors.py": "the server's Server-Timing header; a tail's run time at load",
    "edge/flows/prune_distill.py": "the distillation's time budget; its seconds in the manifest",
}


def test_only_the_timing_module_reads_the_clock_around_a_timed_call() -> None:
    root = Path(__file__).parents[2]
    readers = {str(path.relative_to(root))
               for folder in ("devices", "edge", "partition", "targets")
               for path in (root / folder).rglob("*.py")
               if "perf_counter" in path.read_text() and path.name != "timing.py"}
    assert readers == set(NOT_TIMINGS), readers


class _PacedClock:
    """A clock the paced calls advance: a call takes ``cost`` s, a sleep what it asks."""

    def __init__(self, cost: float) -> None:
        self.now, self.cost = 0.0, cost

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def call(self) -> None:
        self.now += self.cost


def test_paced_calls_come_on_the_clock_and_late_ones_are_dropped() -> None:
    quick = _PacedClock(0.01)
    latencies, service, dropped, due = timing.paced(quick.call, 0.0, 10.0, 1.0, 0.5,
                                                    clock=quick, sleep=quick.sleep)
    assert (due, dropped, len(latencies)) == (10, 0, 10)
    assert all(abs(ms - 10.0) < 1e-6 for ms in latencies + service)  # none waited
    slow = _PacedClock(0.25)  # each call takes 2.5 periods: the queue grows, stale ones go
    latencies, _, dropped, due = timing.paced(slow.call, 0.0, 10.0, 1.0, 0.3,
                                              clock=slow, sleep=slow.sleep)
    assert due == 10 and dropped > 0 and len(latencies) + dropped == due
    assert max(latencies) <= (0.3 + 0.25) * 1e3 + 1e-6  # never older than max_wait + a call
