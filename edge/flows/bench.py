"""Timing on this host: candidates measured side by side in interleaved rounds.

The machine is shared and noisy, so candidates alternate within every round, each one after an
idle gap (a runtime's spinning thread pool must not slow the next one) and a re-warm-up.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from edge.core import progress
from edge.core.values import BenchResult

__all__ = ["Rounds", "interleaved", "summarize", "host_label"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rounds:
    """How to time: rounds x calls, with warm-up calls and an idle gap before each block."""

    rounds: int = 5
    calls: int = 20
    warmup: int = 3
    idle_s: float = 0.1


def interleaved(
    calls: Mapping[str, Callable[[], object]], rounds: Rounds
) -> dict[str, list[float]]:
    """Milliseconds per call for every candidate; order alternates round by round."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    with progress.step("timing", total=rounds.rounds * len(names)) as bar:
        for index in range(rounds.rounds):
            for name in names if index % 2 == 0 else names[::-1]:
                bar.update(f"timing round {index + 1}/{rounds.rounds} {name}")
                with progress.hold():  # no redraw of the bars inside a timed block
                    samples[name] += _block(calls[name], rounds)
                bar.advance()
    return samples


def _block(call: Callable[[], object], rounds: Rounds) -> list[float]:
    time.sleep(rounds.idle_s)
    for _ in range(rounds.warmup):
        call()
    times = []
    for _ in range(rounds.calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def host_label() -> str:
    """Where host measurements come from."""
    return f"host {platform.node()} ({platform.machine()})"


def summarize(times: list[float], *, runtime: str, threads: int, rounds: Rounds,
              load_ms: float | None = None) -> BenchResult:
    """Percentiles of one candidate's samples."""
    values = np.asarray(times)
    return BenchResult(
        where=host_label(), runtime=runtime, runs=len(times), warmup=rounds.warmup,
        threads=threads, p50_ms=float(np.percentile(values, 50)),
        p90_ms=float(np.percentile(values, 90)), p99_ms=float(np.percentile(values, 99)),
        mean_ms=float(values.mean()), load_ms=load_ms,
        device={"machine": platform.machine(), "cpu": _cpu(), "interleaved_rounds": rounds.rounds})


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
