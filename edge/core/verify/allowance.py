"""How much of the allowed fidelity loss an artifact used: 0 is the reference's outputs, 1 is
exactly at the thresholds, above 1 fails them.

Per output, the measure it is judged by over its bound: an accuracy drop, top-1 or probability
flips over ``--max-drop``; a ``values`` output's cosine gap over ``1 - --min-cosine`` and its
RMS error over its allowed error (the larger); a regression's relative error over its allowed
error. The artifact's share is its worst output's. Budgets choose with it: among candidates
within the budgets, the one that spends least of the allowance (docs/architecture.md).
"""

from __future__ import annotations

import math

from edge.core.values import Fidelity, OutputFidelity

__all__ = ["allowance_used"]


def allowance_used(fidelity: Fidelity, max_drop: float, min_cosine: float,
                   max_rel_rms: float) -> float:
    """The worst output's used share of its allowance (inf for an output that broke)."""
    if not fidelity.outputs:
        return _share(1 - fidelity.cosine, 1 - min_cosine)
    return max(_output(o, max_drop, min_cosine, max_rel_rms) for o in fidelity.outputs)


def _output(out: OutputFidelity, max_drop: float, min_cosine: float,
            max_rel_rms: float) -> float:
    if out.error:
        return math.inf
    if out.kind == "custom":
        return 0.0 if out.passed else math.inf
    if out.accuracy is not None and out.reference_accuracy is not None:
        return _share(100.0 * (out.reference_accuracy - out.accuracy), max_drop)
    if out.drop is not None:
        return _share(out.drop, max_drop)
    if out.rel_error is not None:
        return _share(out.rel_error, max_rel_rms)
    cosine = math.inf if out.cosine is None else _share(1 - out.cosine, 1 - min_cosine)
    rms = math.inf if out.rel_rms is None else _share(out.rel_rms, max_rel_rms)
    return max(cosine, rms)


def _share(used: float, allowed: float) -> float:
    """``used`` over ``allowed``; nothing used is 0 (a gain counts as none), NaN is inf."""
    if math.isnan(used):
        return math.inf
    if used <= 1e-12:
        return 0.0
    return used / allowed if allowed > 0 else math.inf
