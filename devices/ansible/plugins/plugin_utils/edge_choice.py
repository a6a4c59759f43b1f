"""edge.fleet.release's controller part of ``on_device`` and ``provision``, with edge's own
code: the bundle's faithful candidates, the choice among the device's timings of them
(edge.core.select, as ``edge deploy --on-device`` chooses: the latency budget, the least
fidelity loss, the fastest by paired rounds, more rounds of the contenders while the winner is
not clear), and the bundle's runtime provisioned (devices.provision, with the wheels each
runtime declares, found as the agent finds them: no import of targets) over the task's
connection."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail

from devices.agent.runtimes import declared
from devices.deploy import as_planned
from devices.measure import Rounds, bench_result
from devices.provision import install_declared, runtime_to_provision
from devices.release import release_files
from devices.transport import Transport
from edge.core.errors import EdgeError, first_line
from edge.core.select import Budget, runnable, within_budget
from edge.core.settle import settle
from edge.core.values import BenchResult, Bundle, CandidateResult, MeasuredCandidate

__all__ = ["TOGETHER", "bench_options", "candidates", "choose", "device_benches", "provision",
           "round_ms"]

#: How the module says it timed the candidates together (then more rounds may settle it).
TOGETHER = "in one interleaved bench"
#: What a provisioning reports back, of devices.provision.ProvisionReport.
_PROVISIONED = ("runtime", "runtime_version", "venv", "files_sent", "files_reused", "installed")


def faithful(bundle: Bundle) -> list[CandidateResult]:
    """The faithful candidates with an artifact, the chosen one first, then in bundle order."""
    every = frozenset(r.artifact.runtime for r in bundle.candidates if r.artifact is not None)
    return runnable(bundle.candidates, bundle.chosen, every)


def candidates(root: Path, bundle: Bundle) -> list[dict[str, Any]]:
    """What the module installs and times: each faithful candidate's release, id, runtime,
    main file and files (path here, sha256, name in the release)."""
    found = []
    for result in faithful(bundle):
        assert result.artifact is not None
        files = release_files(root, result.artifact)
        found.append({"release": result.artifact.release_id[:16],
                      "artifact": result.artifact.candidate.id,
                      "planned": result.artifact.planned,
                      "runtime": result.artifact.runtime, "main": files[-1][2],
                      "files": [(str(p), sha, name) for p, sha, name in files]})
    return found


def bench_options(runs: int, warmup: int, more: int = 0) -> list[str]:
    """The agent bench options of ``edge deploy``'s timing (``more``: that many more rounds)."""
    rounds = Rounds(calls=runs, warmup=warmup)
    return (rounds.more(more) if more else rounds).options()


def device_benches(benches: Sequence[dict[str, Any]], where: str,
                   dropped: list[str]) -> dict[str, BenchResult]:
    """Each candidate's BenchResult from the module's replies (``[{ids, reply}]``); one that
    failed on the device drops out, said in ``dropped``."""
    found = {}
    for group in benches:
        reply = group["reply"]
        alone = len(group["ids"]) == 1
        for key, entry in zip(group["ids"], reply.get("results") or (), strict=False):
            if "error" in entry:
                dropped.append(f"{where}: {key} dropped out: {entry['error']}")
            else:
                found[key] = bench_result(reply, entry, where, alone=alone)
    if not found:
        raise AnsibleActionFail("no candidate could be benchmarked on the device")
    return found


def round_ms(benches: Sequence[dict[str, Any]]) -> dict[str, tuple[float, ...]]:
    """Each candidate's round medians from the module's replies (more rounds of a few)."""
    return {key: tuple(entry.get("round_ms") or ()) for group in benches
            for key, entry in zip(group["ids"], group["reply"].get("results") or (),
                                  strict=False) if "error" not in entry}


def choose(bundle: Bundle, benches: dict[str, BenchResult], *, how: str, where: str,
           budget_ms: float | None, budget_name: str, runtimes: Sequence[str],
           more: Callable[[Sequence[str], int], dict[str, tuple[float, ...]]]
           ) -> tuple[CandidateResult, dict[str, Any]]:
    """edge's choice among the candidates the device timed, and what the task reports of it
    (compared, reason, contest); none within the latency budget: AnsibleActionFail."""
    timed = [r for r in faithful(bundle) if r.candidate.id in benches]
    benches = {r.candidate.id: benches[r.candidate.id].planned_for(r.artifact) for r in timed}
    measured = as_planned([(r, "") for r in timed], benches, allowed=False)
    ms = {k: b.p50_ms for k, b in benches.items()}
    budget = None if budget_ms is None else Budget(limit=float(budget_ms), name=budget_name)
    try:
        pool, note = within_budget(measured, ms, budget, where)
    except EdgeError as exc:
        raise AnsibleActionFail(first_line(exc)) from None
    rounds = {r.candidate.id: tuple(benches[r.candidate.id].round_ms)
              or (benches[r.candidate.id].p50_ms,) for r in pool}
    choice, contest, _ = settle(pool, tuple(runtimes), rounds,
                                more if how == TOGETHER else None, where=f"{where} {how}")
    chosen = next(r for r in measured if r.candidate.id == choice.id)
    paired = {s.candidate: s.paired_ms for s in contest.standings} if contest else {}
    compared = [MeasuredCandidate(candidate=r.candidate.id, bench=replace(
        benches[r.candidate.id], paired_ms=paired.get(r.candidate.id))).to_json()
        for r in measured]
    return chosen, {"compared": compared, "reason": note + choice.reason,
                    "contest": contest.to_json() if contest is not None else None}


def provision(transport: Transport, bundle: Bundle, *, python: str,
              work_dir: str) -> dict[str, Any]:
    """The bundle's runtime (its chosen candidate's, else the first faithful one's that can be)
    and numpy into WORK/venv from wheels fetched here; that venv's python and what was done.
    The runtimes' wheels come from their declarations, found as the agent finds them (the
    ``targets`` folders, the ``edge.targets`` entry points), not by importing targets."""
    specs = {r.name: r.provision for r in declared() if r.provision is not None}
    try:
        runtime = runtime_to_provision(bundle, specs)
        report = install_declared(transport, specs[runtime], device_python=python,
                                  work_dir=work_dir, runtime=runtime)
    except EdgeError as exc:
        raise AnsibleActionFail(first_line(exc)) from None
    done = report.to_json()
    return {"python": report.python, "provision": {k: done[k] for k in _PROVISIONED}}
