"""A zoo model's bundle candidates judged against the original file, output by output.

The original runs on its own runtime (tests/support/zoo_run.py); a candidate artifact runs
through its edge target's runner, which speaks the reference ONNX's names and layouts, on the
same held-out samples; the entry's judge compares them per output (tests/support/zoo_metrics.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge.core.values import ModelInfo
from targets import get_target
from tests.support.zoo import Arrays, Entry
from tests.support.zoo_run import Model, outputs

THREADS = 2


def artifact_model(bundle: Path, candidate: dict[str, Any], source: dict[str, Any]) -> Model:
    """A candidate of the bundle loaded by its runtime's target (as the device's runner loads
    it), as a ``Model`` over the names of the reference ``source`` (the report's "source")."""
    info = ModelInfo.from_json(source)
    artifact = candidate["artifact"]
    runner = get_target(artifact["runtime"]).load(bundle / artifact["file"], info,
                                                  threads=THREADS)
    return Model(inputs=tuple((s.name, len(s.shape)) for s in info.inputs),
                 outputs=tuple(s.name for s in info.outputs), run=runner.run)


def aligned(original: Model, ref: Sequence[np.ndarray], other: Model,
            got: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``got`` in the original's output order (by name when the names match, else by
    position), each reshaped to the original's shape when it holds as many values."""
    by_name = dict(zip(other.outputs, got, strict=True))
    if set(original.outputs) <= set(by_name):
        got = [by_name[n] for n in original.outputs]
    return [g.reshape(r.shape) if g.size == r.size else g for r, g in zip(ref, got, strict=False)]


def fidelity(entry: Entry, original: Model, ref: list[np.ndarray], other: Model,
             held: Arrays) -> dict[str, Any]:
    """Per-output task scores of ``other`` against the original's outputs ``ref``."""
    got = aligned(original, ref, other, outputs(other, held))
    scores = entry.judge(ref, got)
    return {"passed": all(s.passed for s in scores.values()),
            "outputs": {k: {"kind": s.kind, "value": s.value, "passed": s.passed,
                            "text": s.text} for k, s in scores.items()}}
