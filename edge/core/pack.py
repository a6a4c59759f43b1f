"""A pack: several models on one device, planned together. Pure: no I/O.

Each model has options: one of its candidates on one unit (the CPU with a number of threads,
one core of an accelerator) with its latency alone, its peak memory and where those figures
come from. A plan picks one option per model and places CPU threads on cores.

The planner's model of sharing (a guide: the co-run on the device is the proof):

- a model's utilization ``u`` is its rate times its latency alone;
- a CPU model with ``t`` threads over its cores adds ``u * t / len(cores)`` to each of them; an
  accelerator core (one NPU core, a GPU) is time-sliced: each model on it adds its ``u``;
- a model is slowed by what the others add to its own cores, summed over them (its threads
  meet at every operator, so it waits for the slowest: each core it spans exposes it), and by
  ``SHARED`` of everything else the device runs (memory bandwidth: models on separate units
  still slow each other);
- it keeps up while its own busy share (``u`` times its slowdown) stays under ``MAX_BUSY``;
  its p99 under load is its p99 alone times the slowdown, stretched by the wait behind its own
  late frames (``1 / (1 - busy / 2)``).

A plan's headroom is the largest factor every rate can grow by with every objective holding;
the plan chosen holds every objective at the asked rates, fits the memory budget and has the
largest headroom (ties, within edge's one tie band ``select.TIE``: fewer models sharing an
accelerator core, whose switches between models the planner does not count; then fewer CPU
threads; then the order given).
Up to ``EXHAUSTIVE`` combinations every one is judged; beyond, a beam search (``BEAM`` partial
plans, models taken by priority) finds one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from edge.core.select import TIE

__all__ = ["BEAM", "CPU", "EXHAUSTIVE", "MAX_BUSY", "SHARED", "Objective", "Option", "PackPlan",
           "Placed", "Unit", "naive", "pareto", "refusal", "solve"]

#: The unit name of the CPU.
CPU = "cpu"
#: Busy share a model may reach and still keep up (frames come on a clock, not when ready).
MAX_BUSY = 0.9
#: Slowdown per unit of utilization run elsewhere on the device (shared memory bandwidth).
SHARED = 0.1
#: Combinations judged one by one; beyond, the beam search.
EXHAUSTIVE = 4096
#: Partial plans the beam search keeps.
BEAM = 64
#: The most a plan's headroom is searched up to.
MAX_HEADROOM = 1000.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Objective:
    """What one model of a pack must do: a rate (inferences per second), optionally a p99
    latency (ms), and a priority (1 first)."""

    rate: float
    p99_ms: float | None = None
    priority: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Unit:
    """A place models run: the CPU (``cores``) or one core of an accelerator (time-sliced)."""

    name: str
    kind: str
    cores: int = 1
    runtime: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One way to run a model: a candidate on a unit with CPU threads, its figures alone."""

    model: str
    candidate: str
    unit: str
    threads: int
    p50_ms: float
    p99_ms: float
    peak_mb: float
    source: str  # "measured on <device>", "this host", "estimate: ..."
    file: str | None = None  # the artifact on the device, once known


@dataclass(frozen=True, kw_only=True, slots=True)
class Placed:
    """An option in a plan: the CPU cores it is given and what the planner expects of it."""

    option: Option
    cores: tuple[int, ...]
    pinned: bool
    busy: float
    p99_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PackPlan:
    """One option per model, placed: its headroom, memory and whether it meets everything."""

    placed: tuple[Placed, ...]
    headroom: float
    memory_mb: float
    meets: bool
    how: str  # "every one of N combinations" or "beam search over N combinations"

    def throughput(self, objectives: Mapping[str, Objective]) -> float:
        """Inferences per second at the objectives: the rates times the headroom."""
        return self.headroom * sum(objectives[p.option.model].rate for p in self.placed)


def pareto(options: Sequence[Option]) -> tuple[Option, ...]:
    """The options no other on the same unit with the same threads beats on both latency and
    memory (a slower, larger candidate never helps a plan)."""
    kept = []
    for option in options:
        rivals = [o for o in options if o is not option and (o.unit, o.threads)
                  == (option.unit, option.threads)]
        if not any(_beats(o, option) for o in rivals):
            kept.append(option)
    return tuple(kept)


def _beats(a: Option, b: Option) -> bool:
    no_worse = a.p99_ms <= b.p99_ms and a.peak_mb <= b.peak_mb
    better = a.p99_ms < b.p99_ms or a.peak_mb < b.peak_mb
    return no_worse and (better or options_order(a) < options_order(b))


def options_order(option: Option) -> tuple[str, int]:
    """A fixed order between equal options (their candidate, then threads)."""
    return option.candidate, option.threads


def solve(options: Mapping[str, Sequence[Option]], objectives: Mapping[str, Objective],
          units: Sequence[Unit], budget_mb: float, keep: int = 3) -> tuple[PackPlan, ...]:
    """The best plans (at most ``keep``), best first; the first meets every objective and the
    budget when any plan does."""
    kept = {m: pareto(options[m]) for m in objectives}
    count = math.prod(len(v) for v in kept.values())
    combos: Iterable[tuple[Option, ...]]
    if count <= EXHAUSTIVE:
        combos = itertools.product(*(kept[m] for m in objectives))
        how = f"every one of {count} combinations"
    else:
        combos = iter(_beam(kept, objectives, units, budget_mb))
        how = f"beam search ({BEAM} kept) over {count} combinations"
    plans = [replace(_plan(c, objectives, units, budget_mb), how=how) for c in combos]
    plans.sort(key=_rank)
    return tuple(plans[:keep])


def _rank(plan: PackPlan) -> tuple[bool, float, int, int]:
    threads = sum(p.option.threads for p in plan.placed if p.option.unit == CPU)
    accel = [p.option.unit for p in plan.placed if p.option.unit != CPU]
    return (not plan.meets, -_bucket(plan.headroom), len(accel) - len(set(accel)), threads)


def _bucket(headroom: float) -> float:
    """Headroom on a scale where ratios within edge's one tie band (select.TIE) fall
    together."""
    return math.floor(math.log(max(headroom, 1e-9)) / math.log(1.0 + TIE))


def _beam(kept: Mapping[str, Sequence[Option]], objectives: Mapping[str, Objective],
          units: Sequence[Unit], budget_mb: float) -> list[tuple[Option, ...]]:
    order = sorted(objectives, key=lambda m: objectives[m].priority)
    beam: list[tuple[Option, ...]] = [()]
    for model in order:
        grown = [(*partial, o) for partial in beam for o in kept[model]]
        grown.sort(key=lambda c: _rank(_plan(c, _only(objectives, c), units, budget_mb)))
        beam = grown[:BEAM]
    position = {m: i for i, m in enumerate(objectives)}
    return [tuple(sorted(c, key=lambda o: position[o.model])) for c in beam]


def _only(objectives: Mapping[str, Objective], combo: Sequence[Option]) -> dict[str, Objective]:
    return {o.model: objectives[o.model] for o in combo}


def naive(options: Mapping[str, Sequence[Option]], objectives: Mapping[str, Objective],
          units: Sequence[Unit], budget_mb: float, threads: int) -> PackPlan:
    """What running each model as if alone does: its fastest option at ``threads`` (the
    device's default) or on an accelerator, every CPU model over every core, unpinned."""
    chosen = tuple(min((o for o in options[m] if o.unit != CPU or o.threads == threads),
                       key=lambda o: (o.p50_ms, options_order(o))) for m in objectives)
    return replace(_plan(chosen, objectives, units, budget_mb, pin=False),
                   how="each model's fastest option alone, every CPU model on every core")


def _plan(combo: Sequence[Option], objectives: Mapping[str, Objective], units: Sequence[Unit],
          budget_mb: float, pin: bool = True) -> PackPlan:
    cores = _cores(combo, objectives, _cpu_cores(units), pin)
    memory = sum(o.peak_mb for o in combo)
    headroom = _headroom(combo, cores, objectives)
    placed = _placed(combo, cores, objectives, 1.0, pin)
    meets = memory <= budget_mb and all(_holds(p, objectives) for p in placed)
    return PackPlan(placed=placed, headroom=headroom, memory_mb=memory, meets=meets, how="")


def _cpu_cores(units: Sequence[Unit]) -> int:
    return next((u.cores for u in units if u.name == CPU), 1)


def _cores(combo: Sequence[Option], objectives: Mapping[str, Objective], count: int,
           pin: bool) -> list[tuple[int, ...]]:
    """Each option's CPU cores: pinned, the least loaded first (the busiest models placed
    first); unpinned, every core."""
    every = tuple(range(count))
    if not pin:
        return [every if o.unit == CPU else () for o in combo]
    load = [0.0] * count
    given: dict[int, tuple[int, ...]] = {}
    busiest = sorted(range(len(combo)), key=lambda i: -_use(combo[i], objectives, 1.0)
                     * combo[i].threads)
    for i in busiest:
        if combo[i].unit != CPU:
            given[i] = ()
            continue
        picked = tuple(sorted(sorted(every, key=lambda c: (load[c], c))[:combo[i].threads]))
        for core in picked:
            load[core] += _use(combo[i], objectives, 1.0)
        given[i] = picked
    return [given[i] for i in range(len(combo))]


def _use(option: Option, objectives: Mapping[str, Objective], scale: float) -> float:
    return scale * objectives[option.model].rate * option.p50_ms / 1000.0


def _placed(combo: Sequence[Option], cores: Sequence[tuple[int, ...]],
            objectives: Mapping[str, Objective], scale: float,
            pin: bool = True) -> tuple[Placed, ...]:
    uses = [_use(o, objectives, scale) for o in combo]
    placed = []
    for i, option in enumerate(combo):
        slow = _slowdown(i, combo, cores, uses)
        busy = uses[i] * slow
        wait = 1.0 / (1.0 - busy / 2.0) if busy < 2.0 else math.inf
        placed.append(Placed(option=option, cores=cores[i], busy=busy,
                             pinned=pin and option.unit == CPU,
                             p99_ms=option.p99_ms * slow * wait))
    return tuple(placed)


def _slowdown(i: int, combo: Sequence[Option], cores: Sequence[tuple[int, ...]],
              uses: Sequence[float]) -> float:
    """1 + what the others add to model i's cores, summed over them (a model waits for the
    slowest of its threads, so each core it spans exposes it), or to its accelerator core;
    times 1 + SHARED of what runs elsewhere."""
    own, elsewhere = 0.0, 0.0
    for j, other in enumerate(combo):
        if j == i:
            continue
        together = _overlap(combo[i], cores[i], other, cores[j])
        own += together * uses[j]
        elsewhere += 0.0 if together else uses[j]
    return (1.0 + own) * (1.0 + SHARED * elsewhere)


def _overlap(a: Option, a_cores: tuple[int, ...], b: Option, b_cores: tuple[int, ...]) -> float:
    """How much of b's work lands on a's cores: b's threads per core, times the cores they
    share (0: nothing shared); on one accelerator core, all of it."""
    if a.unit != CPU or b.unit != CPU:
        return 1.0 if a.unit == b.unit else 0.0
    shared = set(a_cores) & set(b_cores)
    return b.threads / len(b_cores) * len(shared)


def _holds(placed: Placed, objectives: Mapping[str, Objective]) -> bool:
    objective = objectives[placed.option.model]
    in_time = objective.p99_ms is None or placed.p99_ms <= objective.p99_ms
    return placed.busy <= MAX_BUSY and in_time


def _headroom(combo: Sequence[Option], cores: Sequence[tuple[int, ...]],
              objectives: Mapping[str, Objective]) -> float:
    """The largest factor on every rate with every objective still holding (0: none)."""
    def holds(scale: float) -> bool:
        return all(_holds(p, objectives) for p in _placed(combo, cores, objectives, scale))

    high = min((MAX_BUSY / _use(o, objectives, 1.0) for o in combo
                if _use(o, objectives, 1.0) > 0), default=MAX_HEADROOM)
    low, high = 0.0, min(high, MAX_HEADROOM)
    if holds(high):
        return high
    for _ in range(20):
        middle = (low + high) / 2
        low, high = (middle, high) if holds(middle) else (low, middle)
    return low


def refusal(plan: PackPlan, objectives: Mapping[str, Objective], budget_mb: float,
            budget_of: str) -> str | None:
    """Why the best plan cannot be used (memory first, then the first broken objective by
    priority), naming the model and the constraint; None when it meets everything."""
    if plan.memory_mb > budget_mb:
        big = max(plan.placed, key=lambda p: p.option.peak_mb).option
        return (f"the models need {plan.memory_mb:.0f} MB at peak together, over {budget_of}'s "
                f"model budget of {budget_mb:.0f} MB (the largest: {big.model}, "
                f"{big.peak_mb:.0f} MB as {big.candidate})")
    broken = sorted((p for p in plan.placed if not _holds(p, objectives)),
                    key=lambda p: objectives[p.option.model].priority)
    return _broken(broken[0], objectives[broken[0].option.model]) if broken else None


def _broken(placed: Placed, objective: Objective) -> str:
    option = placed.option
    where = f"as {option.candidate} on {_where(option)}"
    if placed.busy > MAX_BUSY:
        return (f"{option.model} cannot keep up with {objective.rate:g}/s: each inference "
                f"takes {option.p50_ms:.3g} ms alone ({option.source}), busy "
                f"{placed.busy:.0%} of the time {where} in the best plan (at most "
                f"{MAX_BUSY:.0%})")
    return (f"{option.model} misses its p99 objective of {objective.p99_ms:g} ms: "
            f"{placed.p99_ms:.3g} ms expected {where} in the best plan ({option.p99_ms:.3g} ms "
            f"alone, {option.source})")


def _where(option: Option) -> str:
    if option.unit == CPU:
        return f"the CPU with {option.threads} thread{'s' if option.threads > 1 else ''}"
    return option.unit
