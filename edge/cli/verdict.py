"""The one line that ends ``edge optimize`` and ``edge deploy`` (issue 42): what to deploy, its
size, its fidelity against the original, its speed against the original and where that speed
comes from, then the next command. The table and reasons above it say why."""

from __future__ import annotations

from edge.core.select import label
from edge.core.units import size_text
from edge.core.values import ORIGINAL, BenchResult, Bundle, CandidateResult, DeployReport

__all__ = ["deploy_verdict", "optimize_verdict"]


def optimize_verdict(bundle: Bundle, where: str, *, timed_here: bool) -> str:
    """``verdict: deploy X (size, fidelity, speed); next: edge deploy BUNDLE --host ...``
    (``timed_here``: this host's timings stand for the device's, ``edge.flows.budgets.host_is``;
    else they only inform and the profile's order chose)."""
    chosen = bundle.chosen_result()
    if chosen is None or chosen.artifact is None:
        return ("nothing to deploy: no candidate kept fidelity (each reason above says "
                "why); check the data's preprocessing, or relax --max-drop / --min-cosine")
    original = _original(bundle)
    parts = [_size(chosen, original), _fidelity(chosen),
             _speed(chosen, original, bundle.profile, timed_here)]
    return (f"deploy {label(chosen)} ({'; '.join(p for p in parts if p)}); "
            f"next: edge deploy {where} --host USER@HOST")


def deploy_verdict(report: DeployReport, previous: str | None) -> str:
    """``verdict: X is live on TARGET as release R, P50 ms there; undo: edge rollback``
    (``previous``: the release rollback returns to, if any)."""
    name = f" --name {report.name}" if report.name else ""
    undo = (f"undo: edge rollback{name}" if previous and previous != report.release
            else "the slot's first release: nothing to roll back to")
    return (f"{report.candidate} is live on {report.target} as release "
            f"{report.release}, {_ms(report.bench)} ({report.bench.source_label}); {undo}")


def _original(bundle: Bundle) -> CandidateResult | None:
    return next((c for c in bundle.candidates if c.candidate.target == ORIGINAL
                 and c.artifact is not None), None)


def _size(chosen: CandidateResult, original: CandidateResult | None) -> str:
    assert chosen.artifact is not None
    mine = size_text(chosen.artifact.total_bytes)
    if original is None or original is chosen or original.artifact is None:
        return mine
    return f"{mine}, the original {size_text(original.artifact.total_bytes)}"


def _fidelity(chosen: CandidateResult) -> str:
    """Its fidelity in a few words: accuracy with labels, else what every output kept."""
    fid = chosen.fidelity
    if fid is None:
        return ""
    if fid.accuracy is not None and fid.reference_accuracy is not None:
        return f"accuracy {100 * fid.accuracy:.1f}% (fp32 {100 * fid.reference_accuracy:.1f}%)"
    if chosen.candidate.target == ORIGINAL:
        return "your own file: the reference itself"
    outputs = len(fid.outputs)
    kept = f"every one of {outputs} outputs keeps its task" if outputs > 1 else \
        "its output keeps its task"
    return f"{kept}, cosine {fid.cosine:.4f}"


def _speed(chosen: CandidateResult, original: CandidateResult | None, profile: str,
           timed_here: bool) -> str:
    """Its speed against the original's and where that comes from, or why there is none."""
    mine, theirs = chosen.bench, original.bench if original is not None else None
    if mine is None:
        return (f"speed not measured here: the {profile} profile's order chose; --host "
                "measures every candidate on the device")
    ratio = "" if chosen is original or theirs is None or mine.compared_ms <= 0 else \
        f", {theirs.compared_ms / mine.compared_ms:.2f}x the original's speed"
    if not timed_here and mine.source == "host":  # timed here, chosen by order
        return (f"{_ms(mine)}{ratio} on this host, which is not a {profile}: the profile's "
                "order chose; --host measures every candidate on the device")
    return f"{_ms(mine)}{ratio} ({mine.source_label})"


def _ms(bench: BenchResult) -> str:
    return f"{bench.compared_ms:.3f} ms"
