"""Measuring models on the device: the health check (load, run once) and ``bench``: one or
more models timed together in interleaved rounds (``timing.interleaved``), with each one's load
time, and the process's peak memory and the sensors around the timed rounds."""

from . import sensors, timing
from .errors import AgentError, one_line
from .info import device_info, peak_rss_mb
from .kept import keep_observed
from .observe import observed
from .runtimes import load, model_runtime, threads_for


def cmd_health(args):
    """Load a model and run it once: the gate before a release becomes current."""
    if args.threads < 0:
        raise AgentError("--threads must be >= 0", status=2)
    runtime = model_runtime(args.model)
    try:
        (run, version), load_ms = timing.elapsed_ms(load, args.model, threads_for(args.threads))
        run_ms = timing.elapsed_ms(_runner(run, runtime, args.model))[1]
    except AgentError as exc:
        if exc.status != 3:
            raise
        raise AgentError(f"health check failed: {exc}") from None
    return {"healthy": True, "model": args.model, "runtime": runtime,
            "runtime_version": version, "load_ms": load_ms, "run_ms": run_ms}


def cmd_bench(args):
    """Time MODEL [MODEL ...] in interleaved rounds; per model percentiles, load ms and
    throughput; for the whole run peak RSS and sensors before, during and after."""
    _check(args)
    threads = threads_for(args.threads)
    plan = {"rounds": args.rounds, "runs": args.runs, "warmup": args.warmup,
            "idle_s": args.idle_s, "budget_s": args.budget_s, "min_rounds": args.min_rounds}
    during = {}

    def sample(index, rounds, name):  # one power reading under load, outside a timed block
        if not during and index == rounds // 2:
            during["power_w"] = sensors.guarded(sensors.read_power)

    loaded = load_models(args.models, threads)
    before = sensors.sensor_snapshot()
    reply = bench_loaded(loaded, threads, plan, before=sample)
    after = sensors.sensor_snapshot()
    peak = peak_rss_mb()  # before observing: a runtime may load the model again to say
    reply = reply if getattr(args, "no_observe", False) else with_observed(reply, loaded)
    keep_observed(reply["results"])
    return dict(reply, threads_requested=args.threads, peak_rss_mb=peak,
                device=device_info(),
                metrics={"before": before, "during": during or None, "after": after})


def with_observed(reply, entries):
    """``reply`` (``bench_loaded``'s) with what ran each layer of every model it timed, as
    its runtime says (``observe.observed``), read after the timed rounds."""
    results = [dict(result, observed=observed(entry["run"], entry["runtime"]))
               if "run" in entry else result for result, entry in zip(reply["results"], entries)]
    return dict(reply, results=results)


def _check(args):
    if args.runs < 1 or args.warmup < 0 or args.threads < 0:
        raise AgentError("--runs must be >= 1, --warmup >= 0 and --threads >= 0", status=2)
    if args.rounds < 1 or args.min_rounds < 1 or args.idle_s < 0:
        raise AgentError("--rounds and --min-rounds must be >= 1 and --idle-s >= 0", status=2)
    if args.budget_s is not None and args.budget_s <= 0:
        raise AgentError("--budget-s must be > 0", status=2)


def load_models(models, threads):
    """Each model loaded and run once: ``{"model", "runtime", ...}`` with ``run``,
    ``runtime_version`` and ``load_ms``, or with ``error`` when it cannot load or run. One model
    that fails is an error; of several, those that fail drop out (all fail: the first error)."""
    runtimes = [model_runtime(model) for model in models]  # a bad request before any load
    entries, first = [], None
    for model, runtime in zip(models, runtimes):  # python 3.8 devices: no zip(strict=)
        entry = {"model": model, "runtime": runtime}
        try:
            (run, version), load_ms = timing.elapsed_ms(load, model, threads)
            _runner(run, runtime, model)()
            entry.update(run=run, runtime_version=version, load_ms=load_ms)
        except AgentError as exc:
            if len(models) == 1 or exc.status != 3:
                raise
            first = first or exc
            entry["error"] = str(exc)
        entries.append(entry)
    if first is not None and all("error" in entry for entry in entries):
        raise first
    return entries


def bench_loaded(entries, threads, plan, hold=None, before=None):
    """Time the loaded entries together (``plan``: interleaved's rounds, runs, warmup, ...)."""
    calls = {k: _runner(e["run"], e["runtime"], e["model"]) for k, e in enumerate(entries)
             if "run" in e}
    timed = timing.interleaved(calls, hold=hold, before=before, **plan)
    results = [_result(e, timed.samples.get(k), threads, plan["warmup"])
               for k, e in enumerate(entries)]
    for k, result in enumerate(results):
        if k in timed.samples:
            result["round_ms"] = timed.round_medians(k)
    return {"results": results, "rounds": timed.rounds, "order": timed.order,
            "threads": threads}


def _result(entry, times, threads, warmup):
    if times is None:
        return {"model": entry["model"], "runtime": entry["runtime"], "error": entry["error"]}
    total_s = sum(times) / 1e3
    return dict(
        timing.summary(times), model=entry["model"], runtime=entry["runtime"],
        runtime_version=entry["runtime_version"], runs=len(times), warmup=warmup,
        threads=threads, load_ms=entry["load_ms"],
        throughput_fps=len(times) / total_s if total_s > 0 else None)


def _runner(run, runtime, model):
    """``run`` with any runtime failure as one line (exit 3)."""
    def call():
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - any runtime's failure is one line
            raise AgentError(f"{runtime} cannot run {model}: {one_line(exc)}") from None
    return call
