"""THE timing method of edge, on this host and on the device: interleaved rounds.

Candidates (zero-argument callables) are timed side by side. Every round runs one block of each
candidate; the order is reversed every other round (a b c, then c b a), so neither a drift of
the machine nor the after-effects of a neighbour favour one candidate. A block is an idle gap
(a runtime's spinning thread pool must not slow the next candidate), ``warmup`` untimed calls,
then timed calls. The timed calls of a candidate (``runs``) are spread over the rounds as evenly
as possible. With a time budget, the first round's duration lowers the number of rounds (never
below ``min_rounds``). Results: every candidate's samples in ms, summarized as p50/p90/p99/mean.

The co-run of several models (``paced``) is the other method: calls on a clock, at a rate,
each one's latency from when it was due.

Standard library only, Python 3.8 syntax: the device agent runs this module, and edge imports
the same module on its host (optimize's candidates, per-layer and per-node timings). Nothing
else in edge reads a clock around a timed call.
"""

import contextlib
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Timed:
    """Samples (ms) per candidate, the rounds run, each round's order of candidates and the
    timed calls of each round (``samples`` is their concatenation, round after round)."""

    samples: dict
    rounds: int
    order: list
    counts: tuple = ()

    def round_medians(self, name):
        """``name``'s median ms in each round: what a choice between candidates compares."""
        return by_round(self.samples[name], self.counts)


def interleaved(calls, rounds, runs, warmup, idle_s, budget_s=None, min_rounds=1, hold=None,
                before=None, clock=time.perf_counter, sleep=time.sleep):
    """Time every callable of ``calls`` (name -> callable) in interleaved rounds.

    ``hold``: a context manager factory wrapped around every block (edge's progress display
    does not redraw inside one); ``before(round, rounds, name)``: called before each block,
    outside it. ``clock`` and ``sleep`` are the real ones except in tests.
    """
    names = list(calls)
    if not names or rounds < 1 or runs < 1 or warmup < 0 or idle_s < 0 or min_rounds < 1:
        raise ValueError("interleaved timing needs candidates, rounds >= 1, runs >= 1, "
                         "warmup >= 0, idle_s >= 0 and min_rounds >= 1")
    rounds = min(rounds, runs)
    counts = spread(runs, rounds)
    samples = {name: [] for name in names}
    order = []
    index = 0
    while index < rounds:
        started = clock()
        sequence = names if index % 2 == 0 else names[::-1]
        for name in sequence:
            if before is not None:
                before(index, rounds, name)
            with held(hold):
                samples[name].extend(block(calls[name], counts[index], warmup, idle_s,
                                           clock, sleep))
        order.append(list(sequence))
        if index == 0 and budget_s is not None:
            rounds = within_budget(rounds, min_rounds, budget_s, clock() - started)
        index += 1
    return Timed(samples=samples, rounds=rounds, order=order, counts=tuple(counts[:rounds]))


def held(hold):
    """``hold()``, the context a caller wraps around timed blocks, or none."""
    return hold() if hold is not None else contextlib.nullcontext()


def block(call, count, warmup, idle_s, clock=time.perf_counter, sleep=time.sleep):
    """One candidate's block: idle gap, ``warmup`` untimed calls, ``count`` timed calls (ms)."""
    if idle_s > 0:
        sleep(idle_s)
    for _ in range(warmup):
        call()
    times = []
    for _ in range(count):
        start = clock()
        call()
        times.append((clock() - start) * 1e3)
    return times


def spread(runs, rounds):
    """``runs`` timed calls over ``rounds`` rounds: as even as possible, earlier rounds first."""
    base, extra = divmod(runs, rounds)
    return [base + (1 if index < extra else 0) for index in range(rounds)]


def within_budget(rounds, min_rounds, budget_s, first_round_s):
    """The rounds that fit ``budget_s`` when one takes ``first_round_s`` (>= min_rounds)."""
    fit = int(budget_s / max(first_round_s, 1e-9))
    return min(rounds, max(min_rounds, fit))


def by_round(times, counts):
    """The median of each round's samples (``counts``: the timed calls of each round)."""
    medians, start = [], 0
    for count in counts:
        medians.append(percentile(times[start:start + count], 50))
        start += count
    return medians


def summary(times):
    """p50/p90/p99/mean ms of one candidate's samples (percentiles as numpy's default)."""
    return {"p50_ms": percentile(times, 50), "p90_ms": percentile(times, 90),
            "p99_ms": percentile(times, 99), "mean_ms": sum(times) / len(times)}


def percentile(values, q):
    """Linear-interpolated percentile (as numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def paced(call, start, rate, seconds, max_wait_s, clock=time.monotonic, sleep=time.sleep):
    """Calls due every 1/``rate`` s from ``start`` (on ``clock``, shared by processes: the
    co-run's) for ``seconds``, whether the last one is done or not: each call's latency from
    when it was due and its own time (ms); a call still waiting ``max_wait_s`` after it was due
    is dropped. Returns (latencies, service times, dropped, calls due)."""
    period, end = 1.0 / rate, start + seconds
    latencies, service, dropped, index = [], [], 0, 0
    while start + index * period < end:
        due = start + index * period
        index += 1
        now = clock()
        if now < due:
            sleep(due - now)
        elif now - due > max_wait_s:
            dropped += 1
            continue
        began = clock()
        call()
        done = clock()
        latencies.append((done - due) * 1e3)
        service.append((done - began) * 1e3)
    return latencies, service, dropped, index


def elapsed_ms(call, *args):
    """``call(*args)`` once and its wall ms: a model's load or a health check's single run,
    which are not comparisons (no rounds)."""
    start = time.perf_counter()
    result = call(*args)
    return result, (time.perf_counter() - start) * 1e3
