"""The pack planner (edge.core.pack): pure, so its choices are checked on figures made here."""

from __future__ import annotations

import pytest

from edge.core.pack import (
    BEAM,
    CPU,
    EXHAUSTIVE,
    Objective,
    Option,
    Unit,
    naive,
    pareto,
    refusal,
    solve,
)

TWO_CORES = (Unit(name=CPU, kind=CPU, cores=2),)


def cpu(model: str, threads: int, ms: float, candidate: str = "ort-fp32",
        mb: float = 50.0) -> Option:
    return Option(model=model, candidate=candidate, unit=CPU, threads=threads, p50_ms=ms,
                  p99_ms=ms * 1.2, peak_mb=mb, source="test")


def on(model: str, unit: str, ms: float, mb: float = 50.0) -> Option:
    return Option(model=model, candidate="npu-int8", unit=unit, threads=1, p50_ms=ms,
                  p99_ms=ms * 1.2, peak_mb=mb, source="test")


def scaling(model: str, one: float, two: float) -> list[Option]:
    return [cpu(model, 1, one), cpu(model, 2, two)]


def test_three_models_on_two_cores_get_one_thread_each_not_two() -> None:
    # two threads are a little faster alone, but three models at two threads share two cores
    options = {m: scaling(m, 10.0, 8.0) for m in ("a", "b", "c")}
    objectives = {m: Objective(rate=30.0, p99_ms=30.0) for m in options}
    best = solve(options, objectives, TWO_CORES, 1000.0)[0]
    assert best.meets
    assert [p.option.threads for p in best.placed] == [1, 1, 1]
    assert all(p.pinned for p in best.placed)
    shared = [p.cores for p in best.placed]
    assert sorted(len(set(c)) for c in shared) == [1, 1, 1] and len(set(shared)) == 2
    baseline = naive(options, objectives, TWO_CORES, 1000.0, threads=2)
    assert [p.option.threads for p in baseline.placed] == [2, 2, 2]
    assert best.headroom > baseline.headroom


def test_naive_misses_what_the_plan_meets() -> None:
    options = {m: scaling(m, 10.0, 8.0) for m in ("a", "b", "c")}
    objectives = {m: Objective(rate=40.0, p99_ms=30.0) for m in options}
    best = solve(options, objectives, TWO_CORES, 1000.0)[0]
    baseline = naive(options, objectives, TWO_CORES, 1000.0, threads=2)
    assert best.meets and not baseline.meets


def test_three_detectors_take_the_three_npu_cores_and_the_fourth_model_the_cpu() -> None:
    units = (Unit(name=CPU, kind=CPU, cores=4), *(Unit(name=f"npu{i}", kind="npu")
                                                  for i in range(3)))
    options = {m: [on(m, f"npu{i}", 10.0) for i in range(3)] + [cpu(m, 4, 60.0)]
               for m in ("det1", "det2", "det3")}
    options["cls"] = [on("cls", f"npu{i}", 1.0) for i in range(3)] + [cpu("cls", 1, 3.0)]
    objectives = {m: Objective(rate=30.0, p99_ms=50.0) for m in options}
    best = solve(options, objectives, units, 4000.0)[0]
    placed = {p.option.model: p.option.unit for p in best.placed}
    assert sorted(placed[m] for m in ("det1", "det2", "det3")) == ["npu0", "npu1", "npu2"]
    assert placed["cls"] == CPU


def test_memory_over_the_budget_is_refused_naming_the_largest_model() -> None:
    options = {"a": [cpu("a", 1, 1.0, mb=300.0)], "b": [cpu("b", 1, 1.0, mb=900.0)]}
    objectives = {m: Objective(rate=1.0) for m in options}
    best = solve(options, objectives, TWO_CORES, 1000.0)[0]
    assert not best.meets
    why = refusal(best, objectives, 1000.0, "rpi4")
    assert why is not None and "1200 MB" in why and "b, 900 MB" in why and "rpi4" in why


def test_an_impossible_rate_names_the_model_and_its_rate() -> None:
    options = {"a": scaling("a", 10.0, 6.0), "b": scaling("b", 1.0, 1.0)}
    objectives = {"a": Objective(rate=500.0), "b": Objective(rate=10.0)}
    best = solve(options, objectives, TWO_CORES, 1000.0)[0]
    why = refusal(best, objectives, 1000.0, "x")
    assert why is not None and why.startswith("a cannot keep up with 500/s")


def test_an_impossible_latency_names_the_model_and_its_objective() -> None:
    options = {"a": scaling("a", 10.0, 6.0)}
    objectives = {"a": Objective(rate=1.0, p99_ms=2.0)}
    why = refusal(solve(options, objectives, TWO_CORES, 1000.0)[0], objectives, 1000.0, "x")
    assert why is not None and "a misses its p99 objective of 2 ms" in why


def test_the_higher_priority_model_is_named_first() -> None:
    options = {"low": scaling("low", 10.0, 6.0), "high": scaling("high", 10.0, 6.0)}
    objectives = {"low": Objective(rate=1.0, p99_ms=1.0, priority=2),
                  "high": Objective(rate=1.0, p99_ms=1.0, priority=1)}
    why = refusal(solve(options, objectives, TWO_CORES, 1000.0)[0], objectives, 1000.0, "x")
    assert why is not None and why.startswith("high")


def test_a_slower_larger_candidate_is_never_planned() -> None:
    kept = pareto([cpu("a", 1, 5.0, "fast"), cpu("a", 1, 9.0, "slow", mb=80.0),
                   cpu("a", 2, 4.0, "fast")])
    assert [(o.candidate, o.threads) for o in kept] == [("fast", 1), ("fast", 2)]


def test_many_models_are_planned_by_the_beam_search() -> None:
    models = [f"m{i}" for i in range(8)]
    units = (Unit(name=CPU, kind=CPU, cores=8),)
    options = {m: [cpu(m, t, 8.0 / t ** 0.7) for t in (1, 2, 4)] + [cpu(m, 1, 6.0, "int8")]
               for m in models}
    objectives = {m: Objective(rate=20.0, p99_ms=30.0) for m in models}
    plans = solve(options, objectives, units, 8000.0)
    assert 4 ** 8 > EXHAUSTIVE and "beam search" in plans[0].how and str(BEAM) in plans[0].how
    assert plans[0].meets and [p.option.model for p in plans[0].placed] == models
    assert all(p.option.candidate == "int8" and p.option.threads == 1 for p in plans[0].placed)


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0])
def test_headroom_is_where_the_first_objective_breaks(scale: float) -> None:
    options = {"a": [cpu("a", 1, 10.0 * scale)]}
    objectives = {"a": Objective(rate=10.0)}
    best = solve(options, objectives, TWO_CORES, 1000.0)[0]
    assert best.headroom == pytest.approx(0.9 / (0.1 * scale), rel=1e-3)
    assert best.throughput(objectives) == pytest.approx(10.0 * best.headroom)
