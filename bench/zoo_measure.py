"""The zoo's own measurements of one optimized model: task fidelity per output, and speed.

Fidelity: the original file runs on its own runtime (tests/support/zoo_run.py) and each
candidate artifact of the bundle runs through its edge target's runner (which speaks the
reference ONNX's names and layouts) on the same held-out samples; the entry's judge compares
them output by output (tests/support/zoo_metrics.py).

Speed: the original and the chosen artifact on this host, ``rounds`` interleaved rounds (the
order flips every round), each round the median of ``runs`` runs on one held-out sample; the
ratio is original median / chosen median (> 1: the chosen artifact is faster).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge.core.model import inspect_model
from targets import get_target
from tests.support.zoo import Arrays, Entry
from tests.support.zoo_run import Model, feed, outputs

THREADS = 2


def artifact_model(bundle: Path, candidate: dict[str, Any], reference: Path) -> Model:
    """A candidate of the bundle loaded by its target, as a ``Model`` over reference names."""
    info = inspect_model(reference)
    runner = get_target(candidate["candidate"]["target"]).load(
        bundle / candidate["artifact"]["file"], info, threads=THREADS)
    return Model(inputs=tuple((s.name, len(s.shape)) for s in info.inputs),
                 outputs=tuple(s.name for s in info.outputs), run=runner.run)


def aligned(original: Model, ref: Sequence[np.ndarray], other: Model,
            got: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``got`` in the original's output order (by name when the names match, else by
    position), each reshaped to the original's shape when only the layout of 1-dims differs."""
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


def speed(original: Model, chosen: Model, held: Arrays, rounds: int = 7,
          runs: int = 20) -> dict[str, Any]:
    """Interleaved medians of the original and the chosen artifact on one sample."""
    pair = {"original": (original, feed(original, held, 0)),
            "chosen": (chosen, feed(chosen, held, 0))}
    for model, feeds in pair.values():
        model.run(feeds)  # warm-up
    medians: dict[str, list[float]] = {"original": [], "chosen": []}
    for index in range(rounds):
        for name in (("original", "chosen") if index % 2 == 0 else ("chosen", "original")):
            model, feeds = pair[name]
            medians[name].append(_median_ms(lambda m=model, f=feeds: m.run(f), runs))
    orig, mine = statistics.median(medians["original"]), statistics.median(medians["chosen"])
    return {"rounds": rounds, "runs": runs, "threads": THREADS, "original_ms": orig,
            "chosen_ms": mine, "speedup": orig / mine if mine > 0 else None,
            "per_round_ms": medians}


def _median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)
