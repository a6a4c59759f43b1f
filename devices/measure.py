"""Measuring on this host or ON a device, by one method: ``devices.agent.timing.interleaved``.

``Rounds`` says how to time; ``time_here`` times callables in this process (optimize's
candidates), ``time_files_here`` model files loaded as the agent loads them (per-layer prefix
timings), ``time_on_device`` model files on a device by ONE agent ``bench`` call. All three
answer ``{id: BenchResult}``, each saying where it was measured. Host timing holds the progress
display (no redraw inside a timed block); the agent has no display.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devices.agent import bench as agent_bench
from devices.agent import timing
from devices.agent.errors import AgentError
from devices.agent.info import cpu_model
from devices.device import Device
from edge.core import progress
from edge.core.errors import DeviceError, UsageError
from edge.core.native_log import stderr_to_log
from edge.core.profile import Profile
from edge.core.values import BenchResult, Observed

__all__ = ["Rounds", "bench_result", "here", "host_label", "more_here", "more_on_device",
           "observed_of", "time_files_here", "time_here", "time_on_device"]

#: More interleaved rounds of some candidates: (ids, rounds) -> id -> each new round's median ms
#: (``edge.core.settle.Timer``, what settles an unclear measured choice).
More = Callable[[Sequence[str], int], dict[str, tuple[float, ...]]]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class Rounds:
    """How to time: ``calls`` timed calls of each candidate spread over ``rounds`` interleaved
    rounds (order reversed every other round), each block after an ``idle_s`` gap and ``warmup``
    untimed calls; with ``budget_s``, fewer rounds (not below ``min_rounds``) when the first
    round says all would take longer. ``edge deploy --runs/--warmup`` are ``calls``/``warmup``."""

    rounds: int = 5
    calls: int = 100
    warmup: int = 3
    idle_s: float = 0.02  # a spinning thread pool stops within milliseconds
    budget_s: float | None = None
    min_rounds: int = 1

    def __post_init__(self) -> None:
        if min(self.rounds, self.calls, self.min_rounds) < 1 or self.warmup < 0 \
                or self.idle_s < 0 or (self.budget_s is not None and self.budget_s <= 0):
            raise UsageError(f"cannot time with {self}: rounds, calls and min_rounds must be "
                             ">= 1, warmup and idle_s >= 0, budget_s > 0")

    def plan(self) -> dict[str, Any]:
        """The keyword arguments of ``timing.interleaved``."""
        return {"rounds": self.rounds, "runs": self.calls, "warmup": self.warmup,
                "idle_s": self.idle_s, "budget_s": self.budget_s, "min_rounds": self.min_rounds}

    def more(self, rounds: int) -> Rounds:
        """``rounds`` more rounds of the same blocks (the same timed calls in each), no budget."""
        per = max(1, self.calls // self.rounds)
        return Rounds(rounds=rounds, calls=per * rounds, warmup=self.warmup, idle_s=self.idle_s)

    def options(self) -> list[str]:
        """The agent ``bench`` options that say the same."""
        budget = [] if self.budget_s is None else ["--budget-s", str(self.budget_s)]
        return ["--runs", str(self.calls), "--warmup", str(self.warmup), "--rounds",
                str(self.rounds), "--idle-s", str(self.idle_s), "--min-rounds",
                str(self.min_rounds), *budget]


def host_label() -> str:
    """Where host measurements come from."""
    return f"host {platform.node()} ({platform.machine()})"


def time_here(calls: Mapping[str, Callable[[], object]], rounds: Rounds, *, threads: int,
              runtime: str | Mapping[str, str]) -> dict[str, BenchResult]:
    """Time zero-argument calls on this host, interleaved; ``runtime``: one for all or per id."""
    with _bar(len(calls)) as before:
        timed = here(timing.interleaved, calls, hold=progress.hold, before=before,
                     **rounds.plan())
    kinds = runtime if isinstance(runtime, Mapping) else dict.fromkeys(calls, runtime)
    return {name: replace(_host_result(times, runtime=kinds[name], threads=threads,
                                       warmup=rounds.warmup, rounds=timed.rounds),
                          round_ms=tuple(timed.round_medians(name)))
            for name, times in timed.samples.items()}


def time_files_here(models: Mapping[str, Path], rounds: Rounds, *, threads: int,
                    skip_failed: bool = False, observe: bool = True) -> dict[str, BenchResult]:
    """Time model files on this host as the agent's ``bench`` does on a device (the same
    loaders and random inputs), interleaved, then read what ran each layer (``observe``). With
    ``skip_failed`` a model that cannot load or run drops out (a warning); otherwise it fails
    the call (a DeviceError naming it)."""
    ids = list(models)
    with stderr_to_log("runtimes"):  # a runtime's native notices at load (LiteRT's XNNPACK one)
        loaded = here(agent_bench.load_models, [str(models[k]) for k in ids], threads)
    with _bar(len(ids), ids) as before:
        reply = here(agent_bench.bench_loaded, loaded, threads, rounds.plan(),
                     hold=progress.hold, before=before)
    if observe:
        with stderr_to_log("runtimes"), progress.step("reading what ran each layer"):
            reply = agent_bench.with_observed(reply, loaded)
    return _results(ids, reply, host_label(), skip_failed=skip_failed, alone=False,
                    source="host")


def more_here(models: Mapping[str, Path], rounds: Rounds, *, threads: int) -> More:
    """More rounds of some of ``models`` on this host, as ``time_files_here`` times them."""
    def more(ids: Sequence[str], count: int) -> dict[str, tuple[float, ...]]:
        timed = time_files_here({k: models[k] for k in ids}, rounds.more(count),
                                threads=threads, skip_failed=True, observe=False)
        return {k: b.round_ms for k, b in timed.items()}
    return more


def more_on_device(device: Device, models: Mapping[str, str], rounds: Rounds, *,
                   threads: int) -> More:
    """More rounds of some of ``models`` (id -> path on the device) in one agent ``bench``."""
    def more(ids: Sequence[str], count: int) -> dict[str, tuple[float, ...]]:
        try:
            timed = time_on_device(device, {k: models[k] for k in ids}, rounds.more(count),
                                   threads=threads, skip_failed=True, observe=False)
        except DeviceError as exc:
            log.warning("%s: no more rounds of %s (%s): choosing from the rounds run",
                        device.label, ", ".join(ids), exc)
            return {}
        return {k: b.round_ms for k, b in timed.items()}
    return more


def time_on_device(device: Device, models: Mapping[str, str], rounds: Rounds, *, threads: int,
                   profile: Profile | None = None, skip_failed: bool = False,
                   timeout: float = 600.0, observe: bool = True) -> dict[str, BenchResult]:
    """Time model files already on the device (id -> path there) in ONE interleaved agent
    ``bench``. With ``skip_failed`` a model that cannot load or run drops out (a warning);
    otherwise it fails the call. One model alone also gets peak memory, sensors and power
    (``profile``, the device's profile object: its estimate when the device has no power
    sensor). ``observe``: then read what ran each layer (the agent's ``observe``)."""
    ids = list(models)
    what = f"{len(ids)} models" if len(ids) > 1 else ids[0]
    with progress.step(f"{device.label}: timing {what} ({rounds.calls} runs, "
                       f"{rounds.rounds} interleaved rounds)"):
        reply = device.call("bench", *[models[k] for k in ids], *rounds.options(),
                            "--threads", str(threads), *([] if observe else ["--no-observe"]),
                            timeout=timeout)
    return _results(ids, reply, device.label, skip_failed=skip_failed, alone=len(ids) == 1,
                    profile=profile)


def _results(ids: list[str], reply: dict[str, Any], where: str, *, skip_failed: bool,
             alone: bool, profile: Profile | None = None,
             source: str = "device") -> dict[str, BenchResult]:
    """A bench reply's results by id; an entry that failed raises, or drops out with a warning."""
    results = {}
    if len(reply["results"]) != len(ids):
        raise DeviceError(f"{where}: agent bench replied {len(reply['results'])} results for "
                          f"{len(ids)} models")
    for k, entry in zip(ids, reply["results"], strict=True):
        if "error" in entry and not skip_failed:
            raise DeviceError(f"{where}: {k}: {entry['error']}")
        if "error" in entry:
            log.warning("%s: %s dropped out: %s", where, k, entry["error"])
            continue
        results[k] = bench_result(reply, entry, where, profile=profile, alone=alone,
                                  source=source)
    return results


def here(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An agent function run on this host: its bad requests are UsageErrors, its runtime
    failures DeviceErrors (one line each, as on a device)."""
    try:
        return function(*args, **kwargs)
    except AgentError as exc:
        raise (UsageError if exc.status == 2 else DeviceError)(str(exc)) from None


@contextmanager
def _bar(candidates: int, names: Sequence[str] = ()
         ) -> Iterator[Callable[[int, int, object], None]]:
    """A progress bar over the blocks, advanced by interleaved's ``before`` hook; ``names``
    label candidates the hook only knows by their index (the agent's loaded models)."""
    with progress.step("timing") as bar:
        done = [0]

        def before(index: int, rounds: int, name: object) -> None:
            label = names[name] if isinstance(name, int) and name < len(names) else name
            bar.update(f"timing round {index + 1}/{rounds} {label}", completed=done[0],
                       total=rounds * candidates)
            done[0] += 1
        yield before


def _host_result(times: list[float], *, runtime: str, threads: int, warmup: int,
                 rounds: int) -> BenchResult:
    return BenchResult(
        where=host_label(), runtime=runtime, runs=len(times), warmup=warmup, threads=threads,
        **timing.summary(times),
        device={"machine": platform.machine(), "cpu": cpu_model(), "interleaved_rounds": rounds},
        source="host")


def bench_result(reply: dict, entry: dict, where: str, *, profile: Profile | None = None,
                 alone: bool = True, source: str = "device") -> BenchResult:
    """One model's BenchResult from an agent ``bench`` reply; peak memory, sensors and power
    only when it was ``alone`` (several models share one process and one time span)."""
    device = dict(reply.get("device") or {}, runtime_version=entry.get("runtime_version"),
                  interleaved_rounds=reply.get("rounds"))
    metrics = dict(reply.get("metrics") or {}) if alone else {}
    if alone and (metrics or profile is not None):
        metrics.update(_power(metrics, int(entry["threads"]), profile))
    keys = ("runtime", "runs", "warmup", "threads", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
            "load_ms")
    return BenchResult(where=where, device=device, throughput_fps=entry.get("throughput_fps"),
                       source=source,  # type: ignore[arg-type]
                       round_ms=tuple(entry.get("round_ms") or ()),
                       observed=observed_of(entry.get("observed"), str(entry["runtime"])),
                       peak_rss_mb=reply.get("peak_rss_mb") if alone else None, metrics=metrics,
                       **{k: entry[k] for k in keys})


def observed_of(reply: Any, runtime: str) -> Observed | None:
    """What ran each layer, from an agent's reply (validated: a malformed one is "not
    observable" naming the fault); None when the agent did not say (an older agent)."""
    if reply is None:
        return None
    try:
        return Observed.from_json(dict(reply, runtime=str(reply.get("runtime") or runtime)))
    except (TypeError, ValueError, AttributeError) as exc:
        reason = str(exc).splitlines()[0][:200]
        return Observed(runtime=runtime, why_not=f"the agent's reply was malformed: {reason}")


def _power(metrics: dict, threads: int, profile: Profile | None) -> dict[str, Any]:
    """Measured watts (under load first) with their sysfs paths, else the profile's estimate."""
    for phase in ("during", "after", "before"):
        reading = (metrics.get(phase) or {}).get("power_w") or {}
        if reading.get("value") is not None:
            source = reading.get("source")
            paths = source if isinstance(source, list) else [source]
            return {"power_w": reading["value"], "power_source": ", ".join(map(str, paths)),
                    "power_phase": phase}
    if profile is None:
        return {"power_w": None, "power_source": "not measured: no sensor and no profile"}
    idle, top, cores = profile.power.idle_w, profile.power.max_w, profile.compute.cores
    return {"power_w": idle + (top - idle) * min(1.0, threads / cores),
            "power_source": f"estimated from the profile ({idle:g}..{top:g} W), not measured"}
