"""Settling a measured choice (``edge.core.select`` chooses; this decides when the timings are
enough to choose on).

From interleaved rounds, each candidate's figure is the median of its round medians paired with
the leader's in the same rounds (a load spike that slows a whole round slows both sides of the
ratio), and while the winner is not clear (a round alone chooses another, or its spread of round
medians overlaps that of a candidate outside the tie band) more interleaved rounds of just the
contenders are run, a bounded number. ``Contest`` records the rounds and spreads behind the
choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from statistics import median

from edge.core.select import TIE, Choice, choose_candidate
from edge.core.values import ORIGINAL, CandidateResult, Contest, Standing

__all__ = ["EXTRA_ROUNDS", "MAX_EXTRA_ROUNDS", "PAIRED_NOTE", "Timer", "contest_note", "paired",
           "settle"]

#: Interleaved rounds of the contenders run at a time while the winner is not clear ...
EXTRA_ROUNDS = 5
#: ... and at most this many in all (then the paired medians decide, marked not clear).
MAX_EXTRA_ROUNDS = 10

#: More interleaved rounds: (candidate ids, rounds) -> id -> the median ms of each new round.
Timer = Callable[[Sequence[str], int], Mapping[str, Sequence[float]]]


def settle(results: Sequence[CandidateResult], runtimes: Sequence[str],
           round_ms: Mapping[str, Sequence[float]], more: Timer | None, *,
           where: str = "this host", tie: float = TIE, extra: int = EXTRA_ROUNDS,
           most: int = MAX_EXTRA_ROUNDS) -> tuple[Choice, Contest | None, dict[str, float]]:
    """The measured choice among ``results`` from each candidate's round medians
    (``round_ms``), with more interleaved rounds of just the contenders (``more``, ``extra`` at
    a time, ``most`` in all) while the winner is not clear; the choice, its ``Contest`` (None:
    fewer than two candidates timed, nothing to settle) and the figures (id -> ms) compared."""
    table = [dict(r) for r in _rounds_table({k: v for k, v in round_ms.items() if v})]
    if len(_by_candidate(table)) < 2:
        ms = {k: median(v) for k, v in _by_candidate(table).items()}
        return choose_candidate(results, runtimes, ms=ms, where=where, tie=tie), None, ms
    first, ran, contenders = len(table), 0, set()
    while True:
        ms = paired(table)
        choice = choose_candidate(results, runtimes, ms=ms, where=where, tie=tie)
        window = table[first:] if ran else table
        rivals = _open(results, runtimes, window, choice, tie)
        if not rivals or more is None or ran >= most or choice.id is None:
            break
        contenders |= rivals | {choice.id}
        batch = min(extra, most - ran)
        new = _new_rounds(more(sorted(contenders), batch), batch)
        if not new:  # the timer could not run them (a warning said why): not clear
            break
        table += new
        ran += len(new)
    contest = _contest(results, runtimes, table, ms, first, ran, contenders, not rivals, tie)
    return replace(choice, reason=choice.reason + contest_note(contest)), contest, ms


#: Under a table of paired figures: what they are, and where the pooled p50 is.
PAIRED_NOTE = ("ms, paired: the figure the choice compared, each candidate's median ratio to "
               "the leader over the interleaved rounds both ran, times the leader's median "
               "round (like for like where the host's speed drifts; each one's own p50: --json)")


def paired(table: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each candidate's figure: the median over the rounds it shares with the leader (most
    rounds, then the lowest median) of its ratio to the leader's round median, times the
    leader's median round."""
    runs = _by_candidate(table)
    if not runs:
        return {}
    leader = min(runs, key=lambda k: (-len(runs[k]), median(runs[k]), k))
    level = median(runs[leader])
    return {k: _ratio(table, k, leader, level) or median(v) for k, v in runs.items()}


def _ratio(table: Sequence[Mapping[str, float]], name: str, leader: str,
           level: float) -> float | None:
    """``name``'s median ratio to ``leader`` over the rounds both ran, times ``level``."""
    ratios = [r[name] / r[leader] for r in table if name in r and r.get(leader, 0) > 0]
    return level * median(ratios) if ratios else None


def _rounds_table(round_ms: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Round medians by candidate as rounds (round -> id -> ms)."""
    count = max((len(v) for v in round_ms.values()), default=0)
    return [{k: v[i] for k, v in round_ms.items() if i < len(v)} for i in range(count)]


def _new_rounds(timed: Mapping[str, Sequence[float]], batch: int) -> list[dict[str, float]]:
    rows = _rounds_table(timed)
    return rows[:batch]


def _by_candidate(table: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {}
    for row in table:
        for k, v in row.items():
            runs.setdefault(k, []).append(v)
    return runs


def _round_winners(results: Sequence[CandidateResult], runtimes: Sequence[str],
                   table: Sequence[Mapping[str, float]], tie: float) -> list[str]:
    """What each round alone would choose."""
    return [choose_candidate(results, runtimes, ms=dict(row), tie=tie).id or "" for row in table]


def _open(results: Sequence[CandidateResult], runtimes: Sequence[str],
          window: Sequence[Mapping[str, float]], choice: Choice, tie: float) -> set[str]:
    """The candidates that keep the winner from being clear in ``window``: a round chose
    them, or, outside the tie band by their medians, their spread reaches into it: in a round,
    within ``tie`` of that round's fastest (paired: a spike that slows a whole round leaves the
    spread alone; the band is the fastest's, as the choice's is, not the winner's, which may be
    the more faithful at its edge), and faster than that round's original beyond ``tie`` (one
    that is not cannot replace it)."""
    if choice.basis != "measured" or choice.id is None:
        return set()
    winners = {w for w in _round_winners(results, runtimes, window, tie) if w != choice.id}
    mine = choice.id
    overlap = {k for row in window if row.get(mine, 0) > 0 for k, v in row.items()
               if k != mine and k not in choice.tied and v <= min(row.values()) * (1 + tie)
               and v * (1 + tie) < row.get(ORIGINAL, math.inf)}
    return winners | overlap


def _contest(results: Sequence[CandidateResult], runtimes: Sequence[str],
             table: Sequence[Mapping[str, float]], ms: Mapping[str, float], first: int,
             ran: int, contenders: set[str], clear: bool, tie: float) -> Contest:
    runs = _by_candidate(table)
    standings = tuple(Standing(candidate=k, round_ms=tuple(v), low_ms=min(v), high_ms=max(v),
                               paired_ms=ms[k]) for k, v in sorted(runs.items()))
    return Contest(rounds=first, extra_rounds=ran, contenders=tuple(sorted(contenders)),
                   clear=clear, standings=standings,
                   round_winners=tuple(_round_winners(results, runtimes, table, tie)))


def contest_note(contest: Contest) -> str:
    """What the reason of a settled choice adds: the rounds behind it."""
    if not contest.extra_rounds:
        return (f"; clear in {contest.rounds} interleaved rounds (each chose it, no contender's "
                "spread overlapping)" if contest.clear else
                f"; not clear in {contest.rounds} interleaved rounds: the median of paired "
                "round ratios decided")
    verdict = ("then clear" if contest.clear else
               "still not clear: the median of paired round ratios decided")
    return (f"; not clear after {contest.rounds} interleaved rounds, so "
            f"{contest.extra_rounds} more of {', '.join(contest.contenders)}: {verdict}")
