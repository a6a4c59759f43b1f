"""Fidelity per output as table rows, shared by the terminal summary and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence

from edge.core.values import CandidateResult, Fidelity, OutputFidelity

__all__ = ["HEADERS", "kind_lines", "output_rows", "passed_reason"]

#: the columns of :func:`output_rows`
HEADERS = ("candidate", "output", "kind", "cosine", "RMS err / spread", "task metric", "verdict")

_CHANGED = {"classes": "top-1 changed", "probs": "decisions flipped",
            "sequence": "positions changed", "ctc": "strings changed", "exact": "values changed",
            "embedding": "neighbours or pairs changed", "multilabel": "tags changed"}


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def task_metric(out: OutputFidelity) -> str:
    """The output's own metric in a few words."""
    if out.error:
        return out.error
    if out.kind == "custom":
        return f"{out.numbers.get('value', float('nan')):g}: {out.reason}"
    if out.accuracy is not None and out.reference_accuracy is not None:
        return f"accuracy {100 * out.accuracy:.1f}% (fp32 {100 * out.reference_accuracy:.1f}%)"
    if out.kind in ("yolo", "ssd") and "detections" in out.numbers:
        return (f"matched {int(out.numbers['matched'])}/{int(out.numbers['detections'])}, "
                f"mAP50 {out.numbers['map50']:.3f}")
    if out.drop is not None:
        return f"{_CHANGED.get(out.kind, 'changed')} {out.drop:.1f}%"
    if out.rel_error is not None:
        return f"relative error {out.rel_error:.4f}"
    return ""


def output_rows(candidates: Sequence[CandidateResult]) -> list[tuple[str, ...]]:
    """One row per candidate and output (candidates verified per output only)."""
    return [(r.candidate.id, o.name, o.kind, _number(o.cosine, 4), _number(o.rel_rms, 3),
             task_metric(o), "passes" if o.passed else "FAILS")
            for r in candidates if r.fidelity is not None for o in r.fidelity.outputs]


def kind_lines(candidates: Sequence[CandidateResult]) -> list[str]:
    """How each output is judged and why (the same for every candidate), one line each."""
    first = next((r.fidelity for r in candidates if r.fidelity and r.fidelity.outputs), None)
    if first is None:
        return []
    return [f"{o.name}: {o.kind} ({o.why})" for o in first.outputs]


def passed_reason(fid: Fidelity, kept_float: tuple[str, ...] = (),
                  float_ops: tuple[str, ...] = ()) -> str:
    """Why a candidate passed: accuracy when labelled, a single output's task metric, else the
    lowest output cosine; with several outputs, how many each kept their own metric."""
    if fid.accuracy is not None and fid.reference_accuracy is not None:
        text = (f"keeps fidelity: accuracy {100 * fid.accuracy:.1f}% vs fp32 "
                f"{100 * fid.reference_accuracy:.1f}%")
    elif len(fid.outputs) == 1 and fid.outputs[0].drop is not None:  # its task metric
        text = f"keeps fidelity: {fid.outputs[0].reason}"
    else:
        text = f"keeps fidelity: cosine {fid.cosine:.4f}"
    if len(fid.outputs) > 1:
        text += f" (every one of {len(fid.outputs)} outputs passes its own metric)"
    if kept_float:
        text += f" after keeping {len(kept_float)} node(s) in float: {_listed(kept_float)}"
    if float_ops:
        text += (f"{' and' if kept_float else ' after keeping'} its arithmetic in float "
                 "(sums, products, normalizations; the convolutions and matrix products stay "
                 "int8)")
    return text


#: Names a reason lists before it counts the rest.
LISTED = 6


def _listed(names: tuple[str, ...]) -> str:
    """The first ``LISTED`` names, then how many more."""
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")
