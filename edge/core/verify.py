"""Fidelity of an artifact against the reference model on held-out inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge.core.values import Dataset, Fidelity

__all__ = ["Outputs", "Thresholds", "judge", "measure", "run_all"]

#: per sample, the list of output arrays
Outputs = list[list[np.ndarray]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Thresholds:
    """What an artifact must keep: accuracy (or top-1 agreement) and output cosine."""

    max_drop: float = 1.0  # percentage points of accuracy, or of top-1 agreement without labels
    min_cosine: float = 0.98


def run_all(runner: object, data: Dataset) -> Outputs:
    """Run every held-out sample through a runner."""
    return [list(runner.run(feed)) for feed in data.feeds]  # type: ignore[attr-defined]


def measure(reference: Outputs, candidate: Outputs, data: Dataset) -> Fidelity:
    """Compare candidate outputs to reference outputs sample by sample."""
    ref = [_flat(o) for o in reference]
    got = [_flat(o) for o in candidate]
    cosines = [_cosine(r, g) for r, g in zip(ref, got, strict=True)]
    max_abs = max(float(np.max(np.abs(r - g))) if r.size else 0.0
                  for r, g in zip(ref, got, strict=True))
    top_ref, top_got = _top1(reference), _top1(candidate)
    agreement = None if top_ref is None else float(np.mean(top_ref == top_got))
    labels = data.labels
    accuracy = ref_accuracy = None
    if labels is not None and top_ref is not None:
        accuracy = float(np.mean(top_got == labels))
        ref_accuracy = float(np.mean(top_ref == labels))
    return Fidelity(samples=len(ref), cosine=float(np.mean(cosines)), max_abs=max_abs,
                    top1_agreement=agreement, accuracy=accuracy,
                    reference_accuracy=ref_accuracy, synthetic=data.synthetic)


def judge(fidelity: Fidelity, limits: Thresholds) -> str | None:
    """Why the artifact fails the thresholds, or None when it passes."""
    if fidelity.accuracy is not None and fidelity.reference_accuracy is not None:
        drop = 100.0 * (fidelity.reference_accuracy - fidelity.accuracy)
        if drop > limits.max_drop + 1e-9:
            return (f"accuracy {100 * fidelity.accuracy:.1f}% is {drop:.1f} points below "
                    f"fp32 {100 * fidelity.reference_accuracy:.1f}% (--max-drop {limits.max_drop})")
    elif fidelity.top1_agreement is not None:
        drop = 100.0 * (1.0 - fidelity.top1_agreement)
        if drop > limits.max_drop + 1e-9:
            return (f"top-1 agrees with fp32 on {100 * fidelity.top1_agreement:.1f}% of samples "
                    f"(--max-drop {limits.max_drop} points)")
    if fidelity.cosine < limits.min_cosine:
        return f"output cosine {fidelity.cosine:.4f} < {limits.min_cosine}"
    return None


def _flat(outputs: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(o, dtype=np.float64).ravel() for o in outputs])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norm)


def _top1(outputs: Outputs) -> np.ndarray | None:
    """Arg-max of the first output when it looks like class scores ([1, K], K > 1)."""
    first = np.asarray(outputs[0][0])
    if first.ndim != 2 or first.shape[0] != 1 or first.shape[1] < 2:
        return None
    return np.array([int(np.argmax(o[0])) for o in outputs])
