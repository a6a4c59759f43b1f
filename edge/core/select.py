"""Choosing: the one place edge picks among options that passed their checks, with the reason.

Three ways to choose, in order of trust:

* **measured where it will run** (this host when it is the device's kind, or the device itself
  through its agent): the fastest median; options within ``TIE`` of it are noise on a shared
  machine, and the preference order decides among them;
* **measured elsewhere**: the timings only inform; the preference order decides;
* **not measured**: the preference order decides.

``optimize`` chooses a bundle's candidate here, ``deploy --on-device`` chooses among the
candidates measured on the device here, ``deploy`` picks the candidate a device can run here,
and the split client picks its cut here (its options are cuts priced by the partition model,
with no tie band: the model is exact).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from edge.core.plan import PRECISION_RANK
from edge.core.values import CandidateResult

__all__ = ["BASELINE", "TIE", "Choice", "Option", "choose", "choose_candidate", "preference",
           "runnable"]

#: Medians within this fraction of the fastest are a tie on a shared, noisy machine.
TIE = 0.10
#: What speed-ups are quoted against.
BASELINE = "onnxruntime-fp32"


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One thing to choose: its id, its measured cost (a median in ms, or mJ; lower is better;
    None: not measured) and its rank in the preference order (lower first)."""

    id: str
    cost: float | None
    rank: tuple[int, ...] = ()


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


def _order(option: Option) -> tuple[tuple[int, ...], str]:
    return option.rank, option.id


def preference(runtimes: Sequence[str]) -> Callable[[CandidateResult], tuple[int, ...]]:
    """A candidate's rank: its target in the profile's runtime order, then the lower precision."""
    order = list(runtimes)

    def rank(result: CandidateResult) -> tuple[int, ...]:
        target = result.candidate.target
        return (order.index(target) if target in order else len(order),
                PRECISION_RANK.get(result.candidate.precision, len(PRECISION_RANK)))
    return rank


def choose_candidate(results: Iterable[CandidateResult], runtimes: Sequence[str], *,
                     ms: dict[str, float] | None = None, where: str = "this host",
                     trusted: bool = True, untrusted_why: str = "",
                     tie: float = TIE) -> Choice:
    """Among passed candidates: the fastest measured ``where`` (``ms``: candidate id -> median
    ms), or the first in ``runtimes`` order at the lowest precision; the reason says which."""
    passed = [r for r in results if r.status in ("passed", "chosen")]
    if not passed:
        return Choice(id=None, basis="none", reason="no candidate kept fidelity (and the "
                      "budget); see each candidate's reason")
    rank = preference(runtimes)
    times = ms or {}
    options = [Option(id=r.candidate.id, cost=times.get(r.candidate.id), rank=rank(r))
               for r in passed]
    choice = choose(options, tie=tie, trusted=trusted)
    if choice.basis == "measured":
        return _measured_reason(choice, options, where, tie)
    note = f"; {untrusted_why}" if times and untrusted_why else ""
    return Choice(id=choice.id, basis="order", reason=(
        f"first in the runtime order ({' > '.join(runtimes)}) at the lowest precision that "
        f"keeps fidelity{note}"))


def _measured_reason(choice: Choice, options: Sequence[Option], where: str,
                     tie: float) -> Choice:
    times = {o.id: o.cost for o in options if o.cost is not None}
    best, fastest = times[choice.id or ""], min(times.values())
    lead = "fastest" if best <= fastest else f"within {tie:.0%} of the fastest"
    text = f"{lead} that keeps fidelity: median {best:.3f} ms measured on {where}"
    base = times.get(BASELINE)
    if base is not None and choice.id != BASELINE and best > 0:
        text += f", {base / best:.1f}x the speed of {BASELINE}"
    slowest = max(times, key=lambda k: times[k])
    if len(times) > 1 and slowest != choice.id:
        text += f" (slowest {slowest} {times[slowest]:.3f} ms)"
    if len(choice.tied) > 1:
        text += f"; {len(choice.tied)} candidates within {tie:.0%} (noise): runtime order decided"
    return Choice(id=choice.id, basis="measured", reason=text, tied=choice.tied)


def runnable(results: Iterable[CandidateResult], chosen: str | None,
             runtimes: frozenset[str]) -> list[CandidateResult]:
    """Faithful candidates with an artifact whose runtime is in ``runtimes``, the chosen one
    first, then in the bundle's order."""
    faithful = [r for r in results if r.status in ("chosen", "passed") and r.artifact is not None]
    ordered = sorted(faithful, key=lambda r: r.candidate.id != chosen)  # stable: chosen first
    return [r for r in ordered if r.artifact is not None and r.artifact.runtime in runtimes]
