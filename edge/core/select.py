"""Choosing: the one place edge picks among options that passed their checks, with the reason.

Three ways to choose, in order of trust:

* **measured where it will run** (this host when it is the device's kind, or the device itself
  through its agent): the fastest median; options within ``TIE`` of it are noise on a shared
  machine, and among them the most faithful wins (``faithful_first``: the original, then the
  least fidelity lost, the higher precision, the profile's runtime order): a gain within the
  noise is no gain;
* **measured elsewhere**: the timings only inform; the preference order decides;
* **not measured**: the preference order decides (``preference``: the profile's runtime order,
  within a runtime the lower precision only where the device runs it faster by its profile,
  else the more faithful), and a converted candidate replaces the original only with something
  to show for it (``without_gain``: not larger on disk, and smaller when it is of the original's
  own runtime). docs/choosing.md states these rules for users.

The user's own model file (candidate ``original``, when the device runs its format) takes part
like any other candidate, with one rule: it is never replaced by noise. Measured, a converted
candidate wins only when it is faster than the original by more than ``TIE``, and the reason
quotes its speed ratio to the original; by order, the original ranks by its runtime and
precision like the others (first among equals), and the reason says the profile's order
decided, not a measurement.

``optimize`` chooses a bundle's candidate here, ``deploy --on-device`` chooses among the
candidates measured on the device here, ``deploy`` picks the candidate a device can run here,
and the split client picks its cut here (its options are cuts priced by the partition model,
with no tie band: the model is exact).

A measured choice is settled by more interleaved rounds in ``edge.core.settle``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from edge.core.errors import CheckFailed
from edge.core.plan import PRECISION_RANK
from edge.core.values import ORIGINAL, CandidateResult

__all__ = ["BASELINE", "BEYOND_TIE", "FAITHFUL", "FIDELITY_STEP", "LOSS_BAND", "TIE", "Budget",
           "Choice", "Faster", "Option", "any_lower", "choose", "choose_candidate",
           "describe_original", "dominated_by", "faithful_first", "label",
           "least_loss", "may_be_fastest", "may_win", "preference", "runnable", "within_budget",
           "without_gain"]

#: Medians within this fraction of the fastest are a tie on a shared, noisy machine.
TIE = 0.10
#: A time beats another beyond the tie only at most this share of it.
BEYOND_TIE = 1 / (1 + TIE)
#: Allowance shares within this of the least are equally faithful (sampling noise).
LOSS_BAND = 0.10
#: What speed-ups are quoted against.
BASELINE = "onnxruntime-fp32"
#: Whether the device runs (runtime, precision) faster than fp32, by its profile's figures.
Faster = Callable[[str, str], bool]
#: Precisions from the most faithful down: what a tie, or a precision with no gain, falls to.
FAITHFUL = {"fp32": 0, "bf16": 1, "fp16": 2, "int8-dynamic": 3, "int8": 4}
#: Fidelity lost (share of the allowance, rounded to this) below which two are equally faithful.
FIDELITY_STEP = 0.01


def any_lower(runtime: str, precision: str) -> bool:
    """The default ``Faster`` when no profile says: every precision below fp32 runs faster."""
    return PRECISION_RANK.get(precision, len(PRECISION_RANK)) < PRECISION_RANK["fp32"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One thing to choose: its id, its measured cost (a median in ms, or mJ; lower is better;
    None: not measured) and its rank in the preference order (lower first)."""

    id: str
    cost: float | None
    rank: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """A latency (ms) or size (MB) budget and how reasons name it (``--latency-budget``, the
    profile's size budget)."""

    limit: float
    name: str
    unit: str = "ms"

    def holds(self, value: float) -> bool:
        return value <= self.limit

    def over(self, value: float) -> str:
        """The rejection reason of a candidate at ``value`` (its p50, or its size on disk)."""
        if self.unit == "ms":
            return f"p50 {value:.3f} ms over {self}"
        return f"{value:.3g} {self.unit} on disk, over {self}"

    def __str__(self) -> str:
        return f"{self.name} {self.limit:g} {self.unit}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """What was chosen (None: nothing to choose from), how, and why."""

    id: str | None
    basis: str  # "measured" | "order" | "none"
    reason: str
    tied: tuple[str, ...] = ()


def choose(options: Sequence[Option], *, tie: float = TIE, trusted: bool = True) -> Choice:
    """The fastest measured option (ties broken by rank) when the timings are ``trusted``,
    else the first option by rank."""
    if not options:
        return Choice(id=None, basis="none", reason="nothing to choose from")
    timed = [o for o in options if o.cost is not None]
    if not timed or not trusted:
        best = min(options, key=_order)
        return Choice(id=best.id, basis="order", reason="first in the preference order")
    fastest = min(o.cost for o in timed if o.cost is not None)
    tied = [o for o in timed if o.cost is not None and o.cost <= fastest * (1 + tie)]
    best = min(tied, key=_order)
    return Choice(id=best.id, basis="measured", reason="fastest measured",
                  tied=tuple(o.id for o in tied))


def may_be_fastest(intervals: Mapping[str, tuple[float, float]], order: Sequence[str]) -> str:
    """Of estimated options (id -> (low, high) ms; high inf: open above), the first in
    ``order`` whose interval reaches below every other's top: none is sure to beat it, and
    between those that may be fastest only the order decides (an open interval contends with
    all: with nothing known, the order alone)."""
    cap = min(high for _, high in intervals.values())
    return next(i for i in order if i in intervals and intervals[i][0] <= cap)


def may_win(best_ms: float, rival_worst_ms: float, *, ranks_first: bool,
            tie: float = TIE) -> bool:
    """Whether a candidate that takes at least ``best_ms`` may be chosen over a faithful rival
    that takes at most ``rival_worst_ms``, as ``choose`` chooses: faster beyond the tie band, or
    within it and first in the preference order."""
    if best_ms > rival_worst_ms * (1 + tie):
        return False
    return best_ms * (1 + tie) < rival_worst_ms or ranks_first


def _order(option: Option) -> tuple[tuple[int, ...], str]:
    return option.rank, option.id


def preference(runtimes: Sequence[str],
               faster: Faster = any_lower) -> Callable[[CandidateResult], tuple[int, ...]]:
    """A candidate's rank by order: an accelerator's artifact that leaves operators to the CPU
    after every one that does not (only a measurement on the device shows whether it still
    wins), then its runtime in the profile's runtime order,
    then the lower precision where the device runs it ``faster`` (else the more faithful
    precision first), then the user's original
    file before a converted artifact of the same runtime and precision, and the full model
    before its pruned twin (a pruned model wins only when measurably faster)."""
    order = list(runtimes)

    def rank(result: CandidateResult) -> tuple[int, ...]:
        runtime = _runtime(result)
        return (1 if _fallbacks(result) else 0,
                order.index(runtime) if runtime in order else len(order),
                _precision_rank(runtime, result.candidate.precision, faster),
                0 if result.candidate.target == ORIGINAL else 1,
                1 if result.candidate.variant else 0)
    return rank


def _precision_rank(runtime: str, precision: str, faster: Faster) -> int:
    """Lower precisions first where the device runs them faster, then the rest from the most
    faithful down."""
    if faster(runtime, precision):
        return PRECISION_RANK.get(precision, len(PRECISION_RANK))
    return len(PRECISION_RANK) + FAITHFUL.get(precision, len(FAITHFUL))


def faithful_first(runtimes: Sequence[str]) -> Callable[[CandidateResult], tuple[int, ...]]:
    """A candidate's rank among measured ties (a gain within the noise is no gain): one that
    fell back where it was timed, then one that leaves operators to a CPU, last; then the
    user's original file, the full model before a mixed or pruned variant, the least fidelity
    lost, the higher precision, the profile's runtime order."""
    order = list(runtimes)

    def rank(result: CandidateResult) -> tuple[int, ...]:
        runtime = _runtime(result)
        return (_fallback_rank(result),
                0 if result.candidate.target == ORIGINAL else 1,
                1 if result.candidate.variant else 0,
                round(_allowance(result) / FIDELITY_STEP),
                FAITHFUL.get(result.candidate.precision, len(FAITHFUL)),
                order.index(runtime) if runtime in order else len(order))
    return rank


def _fallback_rank(result: CandidateResult) -> int:
    """2: it was observed running away from its plan (``BenchResult.fell_back``); 1: its
    converter planned operators on the CPU; 0: neither. Either ranks it after the others, so
    a tie in time goes to one that runs as planned."""
    if result.bench is not None and result.bench.fell_back:
        return 2
    return 1 if _fallbacks(result) else 0


def _fallbacks(result: CandidateResult) -> tuple[str, ...]:
    return result.artifact.fallbacks if result.artifact is not None else ()


def _fallback_note(passed: Sequence[CandidateResult], chosen: str | None) -> str:
    """Why an accelerator's candidate with CPU fallbacks was not chosen by order."""
    waiting = [r.candidate.id for r in passed if _fallbacks(r) and r.candidate.id != chosen]
    if not waiting:
        return ""
    return (f"; {', '.join(waiting)} leave(s) operators to the CPU: not preferred without a "
            "measurement on the device (edge deploy --host measures them there)")


def _fell_back_note(passed: Sequence[CandidateResult], chosen: str | None) -> str:
    """Which timed candidates ran away from their plan: each ranks after those that did not,
    so it is chosen only when faster beyond the noise."""
    notes = [f"{r.candidate.id} fell back ({r.bench.fell_back})" + (
        ": chosen all the same, faster beyond the noise than those that ran as planned"
        if r.candidate.id == chosen else ": ranked after those that ran as planned")
        for r in passed if r.bench is not None and r.bench.fell_back]
    return "".join(f"; {n}" for n in notes)


def _runtime(result: CandidateResult) -> str:
    """The runtime that runs a candidate: its target's, or for the original its format's."""
    if result.candidate.target == ORIGINAL and result.artifact is not None:
        return result.artifact.runtime
    return result.candidate.target


def choose_candidate(results: Iterable[CandidateResult], runtimes: Sequence[str], *,
                     ms: dict[str, float] | None = None, where: str = "this host",
                     trusted: bool = True, untrusted_why: str = "",
                     tie: float = TIE, faster: Faster = any_lower,
                     blind: frozenset[str] = frozenset()) -> Choice:
    """Among passed candidates: the fastest measured ``where`` (``ms``: candidate id -> median
    ms; among ties the most faithful), or the first by the profile's order (``faster``: which
    precisions the device runs faster; ``blind``: precisions whose timings ``where`` do not
    tell for the device); the reason says which.

    The user's original file, when it passed, is never beaten by noise: a converted candidate
    is chosen over it only when measured faster by more than ``tie``, and the reason quotes
    the ratio to it; by order, only when it has something to show (``without_gain``).
    """
    passed = [r for r in results if r.status in ("passed", "chosen")]
    if not passed:
        return Choice(id=None, basis="none", reason="no candidate kept fidelity (and the "
                      "budget); see each candidate's reason")
    times = ms or {}
    measured = trusted and any(r.candidate.id in times for r in passed)
    rank = faithful_first(runtimes) if measured else preference(runtimes, faster)
    options = [Option(id=r.candidate.id, cost=times.get(r.candidate.id), rank=rank(r))
               for r in passed]
    original = next((r for r in passed if r.candidate.target == ORIGINAL), None)
    slower = {} if trusted else _slower_than_original(passed, times, original, tie, blind)
    empty = {} if measured else _before(without_gain(passed, original, tie), passed,
                                        original, rank)
    noise = _within_noise(options, tie) if measured else set()
    options = [o for o in options if o.id not in {*slower, *empty}]
    choice = _original_in_tie(choose([o for o in options if o.id not in noise], tie=tie,
                                     trusted=trusted))
    if choice.id == ORIGINAL and noise:  # the original kept: name every tie it kept over
        choice = replace(choice, tied=choose(options, tie=tie).tied)
    copy = choice.id if choice.id in _copies(passed, original) else None
    if copy:  # the original file, byte for byte: only noise made it faster
        choice = replace(choice, id=ORIGINAL)
        options = _copy_timed(options, copy)
    if choice.basis == "measured":
        done = _measured_reason(choice, options, where, tie, original)
        notes = _copy_note(copy) + _fell_back_note(passed, choice.id)
        return replace(done, reason=done.reason + notes)
    note = f"; {untrusted_why}" if times and untrusted_why else ""
    note += _slower_note(slower, times, where) + _no_gain_note(empty)
    note += _fallback_note(passed, choice.id)
    chosen = next(r for r in passed if r.candidate.id == choice.id)
    return Choice(id=choice.id, basis="order", reason=(
        f"first by the profile's order ({_order_words(runtimes, chosen, faster)})"
        f"{_order_vs_original(chosen, original)}{note}"))


def _within_noise(options: Sequence[Option], tie: float) -> set[str]:
    """Measured: converted candidates not faster than the timed original by more than ``tie``
    (the most faithful of a tie must not slip in where the fastest beat the original and it
    did not)."""
    mine = next((o.cost for o in options if o.id == ORIGINAL), None)
    if mine is None:
        return set()
    return {o.id for o in options if o.id != ORIGINAL and o.cost is not None
            and o.cost * (1 + tie) >= mine}


def _order_words(runtimes: Sequence[str], chosen: CandidateResult, faster: Faster) -> str:
    """The order that decided: runtimes, and how precisions rank within the chosen one's."""
    runtime = _runtime(chosen)
    gains = [p for p in sorted(FAITHFUL, key=PRECISION_RANK.__getitem__) if faster(runtime, p)]
    within = (f"lower precision first where the device runs it faster ({', '.join(gains)}), "
              "then the most faithful" if gains else
              "the device runs no lower precision faster: the most faithful first")
    return f"runtimes {' > '.join(runtimes)}; within {runtime}, {within}"


def without_gain(passed: Sequence[CandidateResult], original: CandidateResult | None,
                 tie: float = TIE) -> dict[str, str]:
    """Converted candidates that the order alone would put before the original with nothing to
    show for it: larger on disk (beyond ``tie``), or of the original's own runtime and not
    smaller by more than ``tie`` (a quantizer that left the weights alone): id -> why."""
    if original is None or original.artifact is None:
        return {}
    size = original.artifact.total_bytes
    out = {}
    for r in passed:
        if r.candidate.target == ORIGINAL or r.artifact is None or not size:
            continue
        ratio = r.artifact.total_bytes / size
        same = _runtime(r) == _runtime(original)
        if ratio > 1 + tie or (same and ratio > 1 - tie):
            out[r.candidate.id] = f"{r.candidate.id} {ratio:.2f}x"
    return out


def _before(found: dict[str, str], passed: Sequence[CandidateResult],
            original: CandidateResult | None,
            rank: Callable[[CandidateResult], tuple[int, ...]]) -> dict[str, str]:
    """Of ``found``, those the order would put before the original (the rest lose to it
    anyway, and the reason need not name them)."""
    if original is None:
        return {}
    return {r.candidate.id: found[r.candidate.id] for r in passed
            if r.candidate.id in found and rank(r) < rank(original)}


def _no_gain_note(empty: dict[str, str]) -> str:
    if not empty:
        return ""
    return (f"; not preferred to the original by order, with nothing to show for it (size on "
            f"disk against the original's, and not measured faster where it runs): "
            f"{', '.join(empty[k] for k in sorted(empty))}")


def _copy_timed(options: Sequence[Option], copy: str) -> list[Option]:
    """The original's cost, where only its byte-for-byte copy was timed (a round of just the
    contenders settling a choice leaves the original out)."""
    cost = next(o.cost for o in options if o.id == copy)
    return [replace(o, cost=cost) if o.id == ORIGINAL and o.cost is None else o
            for o in options]


def least_loss(results: Sequence[CandidateResult],
               band: float | None = LOSS_BAND) -> tuple[list[CandidateResult], str]:
    """With a budget: the candidates that passed (within it) and spend the least of the
    fidelity allowance (within ``band`` of the least), the others as they are, and a note."""
    passed = [r for r in results if r.status in ("passed", "chosen")]
    if not passed:
        return list(results), ""
    band = LOSS_BAND if band is None else band
    used = {r.candidate.id: _allowance(r) for r in passed}
    least = min(used.values())
    keep = {cid for cid, share in used.items() if share <= least + band}
    kept = [r for r in results if r.status not in ("passed", "chosen") or r.candidate.id in keep]
    note = (f"the budget leaves {len(passed)} faithful candidate(s); the least fidelity loss "
            f"within it is {100 * least:.0f}% of the allowance ({len(keep)} within "
            f"{100 * band:.0f} points of it); among those: ")
    return kept, note


def within_budget(measured: Sequence[CandidateResult], ms: dict[str, float],
                  budget: Budget | None, where: str) -> tuple[list[CandidateResult], str]:
    """The candidates timed (``ms``) within the latency budget ``where`` that lose the least
    fidelity, and a note; none within it: CheckFailed (the caller activates nothing)."""
    if budget is None or not measured:
        return list(measured), ""
    within = [r for r in measured if budget.holds(ms[r.candidate.id])]
    if not within:
        fastest = min(measured, key=lambda r: ms[r.candidate.id])
        raise CheckFailed(f"no faithful candidate runs within {budget} on "
                          f"{where}: the fastest, {fastest.candidate.id}, "
                          f"{budget.over(ms[fastest.candidate.id])}; nothing was activated")
    pool, note = least_loss(within)
    return pool, f"on the device, {note}"


def dominated_by(name: str, points: dict[str, tuple[float, float, int]]) -> str:
    """'dominated by X' when X is no worse on latency (within ``TIE``), loss and size, and
    better on one (latency: by more than ``TIE``)."""
    ms, used, size = points[name]
    for other, (o_ms, o_used, o_size) in points.items():
        no_worse = o_ms <= ms * (1 + TIE) and o_used <= used and o_size <= size
        better = o_ms * (1 + TIE) < ms or o_used < used or o_size < size
        if other != name and no_worse and better:
            return f"dominated by {other}"
    return ""


def _allowance(result: CandidateResult) -> float:
    """The candidate's used share of the fidelity allowance (1: unknown, as if at the limit)."""
    fid = result.fidelity
    return 1.0 if fid is None or fid.allowance_used is None else fid.allowance_used


def _slower_than_original(passed: Sequence[CandidateResult], times: dict[str, float],
                          original: CandidateResult | None, tie: float,
                          blind: frozenset[str] = frozenset()) -> dict[str, float]:
    """Candidates on the original's own runtime that ``times`` (measured off the device) put
    slower than the original by more than ``tie``: id -> ratio of their speed to the original's.

    Timings off the device do not rank runtimes against each other, but the same runtime on
    the same file format slowing down on the host is evidence enough not to swap the user's
    file for it on the profile's word alone, except at a precision the host does not compute
    as the device does (``blind``: fp16 on a host without fp16 arithmetic).
    """
    mine = times.get(ORIGINAL)
    if original is None or not mine:
        return {}
    same = [r for r in passed if r.candidate.target != ORIGINAL
            and _runtime(r) == _runtime(original) and r.candidate.id in times
            and r.candidate.precision not in blind]
    return {r.candidate.id: mine / times[r.candidate.id] for r in same
            if times[r.candidate.id] > mine * (1 + tie)}


def _slower_note(slower: dict[str, float], times: dict[str, float], where: str) -> str:
    if not slower:
        return ""
    shown = ", ".join(f"{k} {v:.2f}x" for k, v in sorted(slower.items()))
    return (f"; on {where} the original's own runtime ran {shown} the speed of the original "
            f"({times[ORIGINAL]:.3f} ms): not preferred to it")


def _copies(passed: Sequence[CandidateResult], original: CandidateResult | None) -> set[str]:
    """Candidates whose artifact is the original file, byte for byte (LiteRT's fp32 of a
    .tflite with nothing to decode, ONNX Runtime's fp32 of an ONNX file edge left alone)."""
    if original is None or original.artifact is None:
        return set()
    digest = original.artifact.sha256
    return {r.candidate.id for r in passed if r.candidate.target != ORIGINAL
            and r.artifact is not None and r.artifact.sha256 == digest}


def _copy_note(copy: str | None) -> str:
    if not copy:
        return ""
    return (f"; {copy} measured faster is the original file, byte for byte: its timing is the "
            "original's, noise apart")


def _original_in_tie(choice: Choice) -> Choice:
    """The original when it is among the measured ties: only a clear win replaces it."""
    if choice.basis != "measured" or ORIGINAL not in choice.tied or choice.id == ORIGINAL:
        return choice
    return replace(choice, id=ORIGINAL)


def describe_original(result: CandidateResult) -> str:
    """``the original (onnxruntime, fp32)``: the user's file, its runtime and own precision."""
    return f"the {label(result)}"


def label(result: CandidateResult) -> str:
    """A candidate as tables show it: its id; the original with its runtime and precision."""
    if result.candidate.target != ORIGINAL:
        return result.candidate.id
    runtime = f"{result.artifact.runtime}, " if result.artifact is not None else ""
    return f"{ORIGINAL} ({runtime}{result.candidate.precision})"


def _order_vs_original(chosen: CandidateResult, original: CandidateResult | None) -> str:
    """How the order-based choice stands to the original (by the profile, not a timing)."""
    if original is None:
        return ""
    if chosen.candidate.target == ORIGINAL:
        return (f": {describe_original(original)} ranks first by the profile's order; no "
                "converted candidate ranks before it")
    why = (f"its runtime {_runtime(chosen)} comes first" if _runtime(chosen) !=
           _runtime(original) else f"its precision {chosen.candidate.precision} is lower")
    return (f"; it ranks before {describe_original(original)} by the profile's order ({why}), "
            "not by a measurement")


def _measured_reason(choice: Choice, options: Sequence[Option], where: str, tie: float,
                     original: CandidateResult | None) -> Choice:
    times = {o.id: o.cost for o in options if o.cost is not None}
    best, fastest = times[choice.id or ""], min(times.values())
    if original is not None and ORIGINAL in times:
        text = _versus_original(choice.id or "", times, where, tie, describe_original(original))
    else:
        lead = "fastest" if best <= fastest else f"within {tie:.0%} of the fastest"
        text = f"{lead} that keeps fidelity: median {best:.3f} ms measured on {where}"
        base = times.get(BASELINE)
        if base is not None and choice.id != BASELINE and best > 0:
            text += f", {base / best:.1f}x the speed of {BASELINE}"
    slowest = max(times, key=lambda k: times[k])
    if len(times) > 1 and slowest != choice.id:
        text += f" (slowest {slowest} {times[slowest]:.3f} ms)"
    if len(choice.tied) > 1:
        decided = ("the original kept" if choice.id == ORIGINAL else
                   "the most faithful kept (a gain within the noise is no gain)")
        text += f"; {len(choice.tied)} candidates within {tie:.0%} (noise): {decided}"
    return Choice(id=choice.id, basis="measured", reason=text, tied=choice.tied)


def _versus_original(chosen: str, times: dict[str, float], where: str, tie: float,
                     original: str) -> str:
    """The measured comparison with the user's original file."""
    mine = times[ORIGINAL]
    if chosen != ORIGINAL:
        best = times[chosen]
        lead = ("fastest" if best <= min(times.values()) else
                f"within {tie:.0%} of the fastest, the most faithful")
        return (f"{lead} that keeps fidelity: median {best:.3f} ms measured on {where}, "
                f"{mine / best:.2f}x the speed of {original} ({mine:.3f} ms)")
    others = {k: v for k, v in times.items() if k != ORIGINAL}
    if not others:
        return (f"{original} is the only faithful candidate measured: median {mine:.3f} ms "
                f"on {where}")
    rival = min(others, key=lambda k: others[k])
    ratio = mine / others[rival] if others[rival] > 0 else float("inf")
    verdict = ("nothing converted is faster" if ratio <= 1 else
               f"nothing converted is faster by more than {tie:.0%} (noise)")
    return (f"{original} kept: median {mine:.3f} ms measured on {where}; {verdict} (fastest "
            f"converted: {rival} {others[rival]:.3f} ms, {ratio:.2f}x the speed of the "
            "original)")


def runnable(results: Iterable[CandidateResult], chosen: str | None,
             runtimes: frozenset[str]) -> list[CandidateResult]:
    """Faithful candidates with an artifact whose runtime is in ``runtimes``, the chosen one
    first, then in the bundle's order."""
    faithful = [r for r in results if r.status in ("chosen", "passed") and r.artifact is not None]
    ordered = sorted(faithful, key=lambda r: r.candidate.id != chosen)  # stable: chosen first
    return [r for r in ordered if r.artifact is not None and r.artifact.runtime in runtimes]
