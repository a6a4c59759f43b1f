"""The reference must reproduce the source: both run on the same example inputs and agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from edge.core.errors import UsageError, first_line

_PARITY_COSINE = 0.9999

_PARITY_REL = 1e-3


def check_parity(reference: Path, feeds: dict[str, np.ndarray],
                  expected: list[tuple[str, np.ndarray]], source: Path) -> None:
    """The reference must reproduce the source's outputs on the same inputs (else UsageError)."""
    try:
        session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, feeds), strict=True))
    except Exception as exc:  # ORT raises its own exception types
        reference.unlink(missing_ok=True)
        raise UsageError(f"{source}: the converted ONNX does not run in onnxruntime "
                         f"({first_line(exc)})") from None
    problem = output_mismatch(got, expected, names)
    if problem:
        reference.unlink(missing_ok=True)
        raise UsageError(f"{source}: the converted ONNX does not reproduce the source: "
                         f"{problem}")


def output_mismatch(got: dict[str, np.ndarray], expected: list[tuple[str, np.ndarray]],
                    names: list[str]) -> str | None:
    """How the ONNX outputs ``got`` (in ``names`` order) differ from the source's, or None."""
    pairs = _pair_outputs(got, expected, names)
    if len(pairs) != len(names):
        return "outputs do not correspond"
    return next((p for p in (_mismatch(n, a, b) for n, a, b in pairs) if p), None)


def _pair_outputs(got: dict[str, np.ndarray], expected: list[tuple[str, np.ndarray]],
                  names: list[str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, onnx, source) pairs: by name when every name matches, else by position."""
    if {n for n, _ in expected} == set(names):
        return [(n, got[n], v) for n, v in expected]
    if len(expected) != len(names):
        return []
    return [(n, got[n], v) for n, (_, v) in zip(names, expected, strict=True)]


def _mismatch(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """Why ``got`` differs from ``want`` (shape, values), or None."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"output '{name}' has shape {list(got.shape)}, the source gives {list(want.shape)}"
    if got.dtype.kind not in "fc":
        agree = float(np.mean(got == want)) if got.size else 1.0
        return None if agree >= 0.99 else f"output '{name}' agrees on {100 * agree:.1f}%"
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    worst = float(np.max(np.abs(a - b))) if a.size else 0.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / norm) if norm > 0 else (1.0 if worst == 0 else 0.0)
    if cosine >= _PARITY_COSINE and worst <= _PARITY_REL * scale:
        return None
    return f"output '{name}' cosine {cosine:.5f}, max abs diff {worst:.3g}"
