"""The bundle's choice among the candidates optimize tried: measured on this host when it is
the device's kind, else by the profile's order (``edge.core.select``)."""

from __future__ import annotations

import platform
from dataclasses import replace
from typing import Any

from devices.measure import More
from edge.core.plan import FP16_ISA, computes_fp16, runs_faster
from edge.core.profile import Profile
from edge.core.select import TIE, choose_candidate, least_loss
from edge.core.settle import settle
from edge.core.values import CandidateResult, Contest
from edge.flows.budgets import host_is, host_isa

__all__ = ["choose_bundle", "host_blind", "with_paired"]


def choose_bundle(results: list[CandidateResult], profile: Profile, band: float | None = None,
            more: More | None = None) -> tuple[str | None, str, Any]:
    """The bundle's choice and its Contest: host timings decide when this host is the device's
    kind (settled by more rounds of the contenders while unclear); with a budget (``band``),
    only among the candidates within it that lose the least fidelity."""
    results, note = least_loss(results, band) if band is not None else (results, "")
    timed = [r for r in results if r.bench is not None and r.bench.measured
             and r.status in ("passed", "chosen")]
    ms = {r.candidate.id: r.bench.p50_ms for r in timed if r.bench is not None}
    why = (f"this host ({platform.machine()}) is not an {profile.compute.arch} device, so its "
           "timings only inform; edge deploy --host measures on the device")
    where, contest = "this host in interleaved rounds", None
    if host_is(profile):
        rounds = {r.candidate.id: r.bench.round_ms or (r.bench.p50_ms,) for r in timed
                  if r.bench is not None}
        choice, contest, ms = settle(results, profile.runtimes, rounds, more, where=where)
    else:
        choice = choose_candidate(results, profile.runtimes, ms=ms, where=where,
                                  trusted=False, untrusted_why=why,
                                  faster=runs_faster(profile, TIE), blind=host_blind(profile))
    if choice.basis == "measured":
        note += _untimed(results, ms)
    return choice.id, note + choice.reason if choice.id else choice.reason, contest


def host_blind(profile: Profile) -> frozenset[str]:
    """Precisions this host's timings do not tell for the device: fp16 where the device's CPU
    computes it and this host's does not (here it computes in fp32, or emulates)."""
    here = {i.lower() for i in host_isa()}
    if computes_fp16(profile, "") and not here & FP16_ISA:
        return frozenset({"fp16"})
    return frozenset()


def _untimed(results: list[CandidateResult], ms: dict[str, float]) -> str:
    """The faithful candidates a measured choice could not weigh: an accelerator's, timed only
    on its device."""
    waiting = [r.candidate.id for r in results
               if r.status in ("passed", "chosen") and r.candidate.id not in ms]
    if not waiting:
        return ""
    return (f"{', '.join(waiting)} run(s) on the device's accelerator, timed only there (edge "
            "deploy --host measures them); among the rest: ")


def with_paired(result: CandidateResult, contest: Contest | None) -> CandidateResult:
    """``result`` with the figure the measured choice compared on its bench (tables and ratios
    show it: like for like where a pooled p50 is not)."""
    found = {s.candidate: s.paired_ms for s in contest.standings} if contest else {}
    if result.bench is None or result.candidate.id not in found:
        return result
    return replace(result, bench=replace(result.bench, paired_ms=found[result.candidate.id]))
