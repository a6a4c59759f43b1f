"""Several models run together on the device, each at its own rate: ``corun``.

Each model runs in a process of its own (``corun-one``), pinned to the CPU cores its plan gives
it (or placed on an accelerator core by its runtime), with its number of threads. Frames come
on a clock, one every 1/rate seconds, whether the model is ready or not: a frame's latency runs
from when it was due to when its inference ended (waits included), and a frame still waiting
``max_wait_s`` after it was due is dropped (stale). First each model runs alone, the others
loaded and idle; then all of them at once, started on one clock. Peak memory: each process's
high-water mark (VmHWM), summed.

The host sends the jobs as JSON: ``[{"name", "model", "rate", "threads", "cores", "unit"}]``.
"""

import json
import os
import select
import subprocess
import sys
import time

from . import timing
from .errors import AgentError, one_line
from .runtimes import load, model_runtime, plugins, threads_for

#: The most models one co-run holds, and the longest phase.
MAX_JOBS = 16
MAX_SECONDS = 600.0
#: Seconds between telling the processes to start and the common start.
LEAD_S = 0.5
_KEYS = {"name", "model", "rate", "threads", "cores", "unit"}


def cmd_corun(args):
    """Every job alone (unless --no-alone), then all together; each one's latencies, drops
    and peak memory."""
    jobs = _jobs(args.jobs)
    _check_times(args.seconds, args.max_wait_s)
    children = []
    try:
        for job in jobs:
            children.append(_spawn(job, args.warmup))
        loaded = [_read(child, 300.0) for child in children]
        rates = [job["rate"] for job in jobs]
        alone = [_phase([c], [r], args.seconds, args.max_wait_s)[0]
                 for c, r in zip(children, rates)] if args.alone else [None] * len(children)
        together = _phase(children, rates, args.seconds, args.max_wait_s)
        peaks = [_quit(child) for child in children]
    finally:
        for child in children:
            _kill(child)
    results = [_result(job, ready, a, t, peak)
               for job, ready, a, t, peak in zip(jobs, loaded, alone, together, peaks)]
    return {"seconds": args.seconds, "max_wait_s": args.max_wait_s, "jobs": results,
            "peak_mb": round(sum(peaks), 3), "cpus": sorted(_affinity())}


def _jobs(text):
    try:
        jobs = json.loads(text)
    except ValueError:
        raise AgentError("--jobs must be a JSON list", status=2) from None
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_JOBS:
        raise AgentError(f"--jobs must list 1 to {MAX_JOBS} models", status=2)
    return [_job(job) for job in jobs]


def _job(job):
    if not isinstance(job, dict) or set(job) != _KEYS:
        raise AgentError("each job has exactly " + ", ".join(sorted(_KEYS)), status=2)
    model_runtime(job["model"])  # a missing file or unknown runtime: exit 2
    if not _number(job["rate"]) or not 0 < job["rate"] <= 100000:
        raise AgentError("a job's rate is a number in (0, 100000]", status=2)
    if not isinstance(job["threads"], int) or isinstance(job["threads"], bool) \
            or not 0 <= job["threads"] <= 1024:
        raise AgentError("a job's threads is an integer in [0, 1024]", status=2)
    _check_cores(job["cores"])
    if not isinstance(job["unit"], str) or not job["unit"].isalnum():
        raise AgentError("a job's unit is a name (cpu, npu0, gpu, ...)", status=2)
    if not isinstance(job["name"], str) or not job["name"]:
        raise AgentError("a job's name is a non-empty string", status=2)
    return job


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _check_cores(cores):
    if cores is None:
        return
    usable = _affinity()
    if not isinstance(cores, list) or not cores or not all(
            isinstance(c, int) and not isinstance(c, bool) and c in usable for c in cores):
        raise AgentError(f"a job's cores are CPU numbers this process may use "
                         f"({sorted(usable)}), or null", status=2)


def _check_times(seconds, max_wait_s):
    if not 0 < seconds <= MAX_SECONDS or not 0 < max_wait_s <= MAX_SECONDS:
        raise AgentError(f"--seconds and --max-wait-s must be in (0, {MAX_SECONDS:g}]",
                         status=2)


def _affinity():
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def _spawn(job, warmup):
    command = [sys.executable, os.path.abspath(sys.argv[0]), "corun-one", "--model",
               job["model"], "--threads", str(job["threads"]), "--unit", job["unit"],
               "--warmup", str(warmup)]
    if job["cores"] is not None:
        command += ["--cores", ",".join(str(c) for c in job["cores"])]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, universal_newlines=True, bufsize=1)


def _read(child, timeout):
    """One JSON line of a child, or the agent's error (its own, or that it died)."""
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    line = child.stdout.readline() if ready else ""
    if not line:
        raise AgentError("a co-run process " + ("timed out" if not ready else
                                                 f"died (exit {child.poll()})"))
    reply = json.loads(line)
    if "error" in reply:
        raise AgentError(reply["error"], status=reply.get("status", 3))
    return reply


def _phase(children, rates, seconds, max_wait_s):
    start = time.monotonic() + LEAD_S
    for child, rate in zip(children, rates):
        child.stdin.write(f"go {start!r} {rate!r} {seconds!r} {max_wait_s!r}\n")
    return [_read(child, LEAD_S + seconds + max_wait_s + 120.0) for child in children]


def _quit(child):
    child.stdin.write("quit\n")
    return float(_read(child, 60.0)["peak_mb"])


def _kill(child):
    if child.poll() is None:
        child.kill()
    child.wait()


def _result(job, ready, alone, together, peak):
    return {"name": job["name"], "model": job["model"], "runtime": ready["runtime"],
            "runtime_version": ready["runtime_version"], "load_ms": ready["load_ms"],
            "threads": ready["threads"], "cores": job["cores"], "unit": job["unit"],
            "rate": job["rate"], "alone": alone, "together": together, "peak_mb": peak}


def cmd_corun_one(args):
    """One model of a co-run: placed, loaded and warmed up; then, for every ``go START
    RATE SECONDS MAX_WAIT`` on stdin, frames on the clock, one JSON line each; ``quit``: its peak
    memory. Its own output goes only through print (the parent reads lines)."""
    try:
        ready = _prepare(args)
    except AgentError as exc:
        _say({"error": str(exc), "status": exc.status})
        return None
    _say(ready)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["go"] and len(words) == 5:
            _say(_frames(ready["_call"], *map(float, words[1:])))
        elif words == ["quit"]:
            break
    _say({"peak_mb": _peak_mb()})
    raise SystemExit(0)


def _say(reply):
    print(json.dumps({k: v for k, v in reply.items() if not k.startswith("_")}), flush=True)


def _prepare(args):
    cores = [int(c) for c in args.cores.split(",")] if args.cores else None
    if cores is not None:
        os.sched_setaffinity(0, cores)  # before the runtime starts its threads
    threads = threads_for(args.threads) if cores is None else min(threads_for(args.threads),
                                                                  len(cores))
    runtime = model_runtime(args.model)
    (run, version), load_ms = timing.elapsed_ms(_load, args.model, threads, args.unit, runtime)
    for _ in range(max(args.warmup, 1)):
        _call(run, runtime)
    return {"ready": True, "runtime": runtime, "runtime_version": version,
            "load_ms": round(load_ms, 3), "threads": threads, "_call": lambda: _call(run,
                                                                                     runtime)}


def _load(model, threads, unit, runtime):
    if unit == "cpu":
        return load(model, threads)
    place = getattr(plugins()[runtime], "load_on", None)
    if place is None:
        raise AgentError(f"{runtime} cannot place a model on {unit}: it has no unit choice",
                         status=2)
    load(model, threads)  # imports the runtime, says what is missing
    return place(model, threads, unit)


def _call(run, runtime):
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - any runtime's failure is one line
        raise AgentError(f"{runtime} failed in the co-run: {one_line(exc)}") from None


def _frames(call, start, rate, seconds, max_wait_s):
    """Frames due every 1/rate seconds from ``start`` for ``seconds`` (timing.paced): p50/p99
    of their latencies (ms, from when due), served and dropped frames."""
    latencies, service, dropped, due = timing.paced(call, start, rate, seconds, max_wait_s)
    return {"frames": due, "served": len(latencies), "dropped": dropped,
            "per_s": round(len(latencies) / seconds, 3),
            "p50_ms": _pick(latencies, 50), "p99_ms": _pick(latencies, 99),
            "max_ms": round(max(latencies), 4) if latencies else None,
            "service_p50_ms": _pick(service, 50)}


def _pick(values, q):
    return round(timing.percentile(values, q), 4) if values else None


def _peak_mb():
    """This process's high-water resident memory, MB (Linux VmHWM; else ru_maxrss)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 3)
    except OSError:
        pass
    import resource
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 3)
