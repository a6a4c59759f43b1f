#!/usr/bin/env python3
"""edge's on-device agent: a standalone script (stdlib + numpy + one runtime) run by the
device's own python. It verifies and installs artifacts, health-checks a model, switches
releases atomically (recording each switch in WORK_DIR/history.json), rolls back, prunes old
releases and benchmarks a model ON the device, printing one JSON document on stdout.

    python3 edge_agent.py probe
    python3 edge_agent.py install SRC DEST --sha256 HEX
    python3 edge_agent.py verify WORK_DIR RELEASE --file NAME=HEX [--file NAME=HEX ...]
    python3 edge_agent.py health --model MODEL [--threads N]
    python3 edge_agent.py activate WORK_DIR RELEASE [--artifact NAME]
    python3 edge_agent.py rollback WORK_DIR [--to RELEASE]
    python3 edge_agent.py releases WORK_DIR
    python3 edge_agent.py prune WORK_DIR [--keep N]
    python3 edge_agent.py bench MODEL [--runs N] [--warmup N] [--threads N]
    python3 edge_agent.py profile --model MODEL.onnx [--threads N] [--runs N]

Exit status: 0 ok, 2 bad request, 3 runtime missing or failed. Errors are JSON {"error": ...}.
"""

import argparse
import hashlib
import json
import os
import platform
import resource
import sys
import time

AGENT_VERSION = 1
RUNTIME_MODULES = {
    "onnxruntime": ("onnxruntime",),
    "tflite": ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"),
    "openvino": ("openvino",),
}
SUFFIX_RUNTIME = {".onnx": "onnxruntime", ".tflite": "tflite", ".xml": "openvino"}
HEX = frozenset("0123456789abcdef")
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
HISTORY = "history.json"
HISTORY_MAX = 200  # activations kept in history.json
STALE_PARTIAL_S = 3600  # prune removes incoming/*.partial older than this


class AgentError(Exception):
    """A failure reported as JSON with an exit status."""

    def __init__(self, message, status=3):
        super().__init__(message)
        self.status = status


def main(argv=None):
    """Parse the command line, run one command, print its JSON."""
    args = _parser().parse_args(argv)
    try:
        result = args.func(args)
    except AgentError as exc:
        print(json.dumps({"error": str(exc)}))
        return exc.status
    print(json.dumps(result))
    return 0


def _parser():
    parser = argparse.ArgumentParser(prog="edge_agent")
    sub = parser.add_subparsers(required=True)
    probe = sub.add_parser("probe")
    probe.set_defaults(func=cmd_probe)
    install = sub.add_parser("install")
    install.add_argument("src")
    install.add_argument("dest")
    install.add_argument("--sha256", required=True)
    install.set_defaults(func=cmd_install)
    verify = sub.add_parser("verify")
    verify.add_argument("work_dir")
    verify.add_argument("release")
    verify.add_argument("--file", action="append", default=[], metavar="NAME=SHA256")
    verify.set_defaults(func=cmd_verify)
    health = sub.add_parser("health")
    health.add_argument("--model", required=True)
    health.add_argument("--threads", type=int, default=0)
    health.set_defaults(func=cmd_health)
    activate = sub.add_parser("activate")
    activate.add_argument("work_dir")
    activate.add_argument("release")
    activate.add_argument("--artifact", default=None)
    activate.set_defaults(func=cmd_activate)
    rollback = sub.add_parser("rollback")
    rollback.add_argument("work_dir")
    rollback.add_argument("--to", default=None)
    rollback.set_defaults(func=cmd_rollback)
    releases = sub.add_parser("releases")
    releases.add_argument("work_dir")
    releases.set_defaults(func=cmd_releases)
    prune = sub.add_parser("prune")
    prune.add_argument("work_dir")
    prune.add_argument("--keep", type=int, default=3)
    prune.set_defaults(func=cmd_prune)
    bench = sub.add_parser("bench")
    bench.add_argument("model")
    bench.add_argument("--runs", type=int, default=50)
    bench.add_argument("--warmup", type=int, default=5)
    bench.add_argument("--threads", type=int, default=0)
    bench.set_defaults(func=cmd_bench)
    rounds = sub.add_parser("rounds")
    rounds.add_argument("models", nargs="+")
    rounds.add_argument("--rounds", type=int, default=20)
    rounds.add_argument("--min-rounds", type=int, default=5)
    rounds.add_argument("--budget-s", type=float, default=60.0)
    rounds.add_argument("--threads", type=int, default=1)
    rounds.set_defaults(func=cmd_rounds)
    perf = sub.add_parser("perf")
    perf.add_argument("--model", required=True)
    perf.add_argument("--threads", type=int, default=1)
    perf.add_argument("--runs", type=int, default=20)
    perf.set_defaults(func=cmd_perf)
    profile = sub.add_parser("profile")
    profile.add_argument("--model", required=True)
    profile.add_argument("--threads", type=int, default=1)
    profile.add_argument("--runs", type=int, default=10)
    profile.set_defaults(func=cmd_profile)
    return parser


def cmd_probe(args):
    """Device facts and the runtimes importable here."""
    return {"agent": AGENT_VERSION, "device": device_info(), "runtimes": runtime_versions()}


def cmd_install(args):
    """Move an uploaded file into place only if its sha256 matches (data synced first)."""
    _check_sha(args.sha256)
    actual = sha256_file(args.src)
    if actual != args.sha256:
        os.unlink(args.src)
        raise AgentError(f"checksum mismatch for {args.src}: got {actual}", status=3)
    _fsync(args.src)  # the bytes are on disk before the name is
    os.makedirs(os.path.dirname(args.dest) or ".", exist_ok=True)
    os.replace(args.src, args.dest)
    _fsync(os.path.dirname(args.dest) or ".")
    return {"installed": args.dest, "sha256": actual}


def cmd_verify(args):
    """Which of a release's files are missing or differ from their sha256 (so must be sent)."""
    release = _release_name(args.release)
    wanted = []
    for spec in args.file:
        name, _, sha = spec.partition("=")
        if not _plain_name(name) or name.endswith(".partial"):
            raise AgentError(f"bad file name {name!r}", status=2)
        _check_sha(sha)
        wanted.append((name, sha))
    if not wanted:
        raise AgentError("verify needs at least one --file NAME=SHA256", status=2)
    folder = os.path.join(args.work_dir, "releases", release)
    present, missing = [], []
    for name, sha in wanted:
        path = os.path.join(folder, name)
        ok = os.path.isfile(path) and not os.path.islink(path) and _sha_or_none(path) == sha
        (present if ok else missing).append(name)
    return {"release": release, "present": present, "missing": missing}


def cmd_health(args):
    """Load a model and run it once: the gate before a release becomes current."""
    if args.threads < 0:
        raise AgentError("--threads must be >= 0", status=2)
    runtime = _model_runtime(args.model)
    _numpy()
    module = _import(*RUNTIME_MODULES[runtime])
    cores = os.cpu_count() or 1
    threads = min(args.threads, cores) if args.threads > 0 else cores
    start = time.perf_counter()
    try:
        run, version = LOADERS[runtime](args.model, threads)
    except AgentError:
        raise
    except Exception as exc:  # noqa: BLE001 - any runtime's load failure is one line
        raise AgentError(f"health check failed: {runtime} cannot load {args.model}: "
                         f"{_one_line(exc)}") from None
    load_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    try:
        run()
    except Exception as exc:  # noqa: BLE001
        raise AgentError(f"health check failed: {runtime} cannot run {args.model}: "
                         f"{_one_line(exc)}") from None
    run_ms = (time.perf_counter() - start) * 1e3
    return {"healthy": True, "model": args.model, "runtime": runtime,
            "runtime_version": version or _version_of(module), "load_ms": load_ms,
            "run_ms": run_ms}


def cmd_activate(args):
    """Point WORK_DIR/current at WORK_DIR/releases/RELEASE atomically; record it in history."""
    release = _release_name(args.release)
    if args.artifact is not None and not _plain_name(args.artifact):
        raise AgentError(f"bad artifact name {args.artifact!r}", status=2)
    with _Lock(args.work_dir):
        if not _is_release_dir(args.work_dir, release):
            raise AgentError(f"release {release} is not installed", status=2)
        previous = _switch(args.work_dir, release, "deploy", args.artifact)
    return {"active": release, "previous": previous, "changed": previous != release}


def cmd_rollback(args):
    """Switch back to the previously active release (or --to RELEASE), atomically."""
    with _Lock(args.work_dir):
        state = _state(args.work_dir)
        if args.to is None:
            target = state["previous"]
            if target is None:
                raise AgentError("no previous release to roll back to (history has none "
                                 "installed); give --to RELEASE", status=2)
        else:
            target = _release_name(args.to)
            if target not in state["complete"]:
                raise AgentError(f"release {target} is not installed (installed: "
                                 f"{', '.join(sorted(state['complete'])) or 'none'})", status=2)
        artifact = state["artifacts"].get(target)
        previous = _switch(args.work_dir, target, "rollback", artifact)
    return {"active": target, "previous": previous, "changed": previous != target,
            "artifact": artifact}


def cmd_releases(args):
    """Installed releases (newest use first), the active one, the rollback target, history."""
    state = _state(args.work_dir)
    return {"active": state["active"], "previous": state["previous"],
            "releases": state["releases"], "history": state["history"]}


def cmd_prune(args):
    """Remove the least recently used inactive releases beyond --keep; never active/previous."""
    if args.keep < 1:
        raise AgentError("--keep must be >= 1", status=2)
    import shutil

    with _Lock(args.work_dir):
        state = _state(args.work_dir)
        protected = {state["active"], state["previous"]} - {None}
        kept, removed = [], []
        for info in state["releases"]:  # most recently used first
            name = info["release"]
            if name in protected or len(kept) < args.keep:
                kept.append(name)
                continue
            shutil.rmtree(os.path.join(args.work_dir, "releases", name))
            removed.append(name)
        if removed:
            _fsync(os.path.join(args.work_dir, "releases"))
        stale = _remove_stale(args.work_dir)
    return {"kept": kept, "removed": removed, "stale_removed": stale}


def _is_release_id(text):
    """A release id: 1-64 lowercase hex digits (so never a path, an option or a dot name)."""
    return isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= HEX


def _plain_name(text):
    """A file or artifact name: letters, digits, ``._-``; no leading dot or dash; <= 64."""
    return (isinstance(text, str) and 0 < len(text) <= 64 and set(text) <= NAME_CHARS
            and text[0] not in ".-")


def _release_name(text):
    if not _is_release_id(text):
        raise AgentError(f"bad release name {text!r}: a release id is hex (0-9a-f)", status=2)
    return text


def _check_sha(text):
    if not (isinstance(text, str) and len(text) == 64 and set(text) <= HEX):
        raise AgentError(f"bad sha256 {text!r}: 64 lowercase hex digits", status=2)


def _sha_or_none(path):
    try:
        return sha256_file(path)
    except AgentError:
        return None


def _model_runtime(model):
    if not os.path.isfile(model):
        raise AgentError(f"model {model} not found", status=2)
    runtime = SUFFIX_RUNTIME.get(os.path.splitext(model)[1])
    if runtime is None:
        raise AgentError(f"no runtime for {model}", status=2)
    return runtime


def _is_release_dir(work_dir, release):
    path = os.path.join(work_dir, "releases", release)
    return os.path.isdir(path) and not os.path.islink(path)


def _main_model(folder):
    """The release's main model file name (model.onnx / .tflite / .xml), or None if incomplete."""
    for suffix in SUFFIX_RUNTIME:
        if os.path.isfile(os.path.join(folder, "model" + suffix)):
            return "model" + suffix
    return None


def _active(work_dir):
    """The release ``current`` points to (None if no link or not a release)."""
    try:
        target = os.readlink(os.path.join(work_dir, "current"))
    except OSError:
        return None
    head, name = os.path.split(target.rstrip("/"))
    if os.path.basename(head) != "releases" or not _is_release_id(name):
        return None
    return name


def _switch(work_dir, release, action, artifact):
    """Atomically repoint ``current`` (symlink + rename) and record it; return the old release."""
    previous = _active(work_dir)
    history = _read_history(work_dir)  # unreadable: fail before anything changes
    _remove_stale_links(work_dir)
    tmp = os.path.join(work_dir, f".current-{os.getpid()}-{os.urandom(4).hex()}")
    os.symlink(os.path.join("releases", release), tmp)
    try:
        os.replace(tmp, os.path.join(work_dir, "current"))
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync(work_dir)
    if previous != release:
        now = time.time()
        history.append({"release": release, "artifact": artifact, "action": action,
                        "previous": previous, "unix": round(now, 3),
                        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
        _write_json_atomic(os.path.join(work_dir, HISTORY),
                           {"version": 1, "activations": history[-HISTORY_MAX:]})
    return previous


def _state(work_dir):
    """Releases on disk joined with history: what is active, what rollback would pick."""
    history = _read_history(work_dir)
    active = _active(work_dir)
    last_active, last_used, artifacts = {}, {}, {}
    for entry in history:
        last_active[entry["release"]] = entry.get("time")
        last_used[entry["release"]] = _entry_epoch(entry)
        if entry.get("artifact"):
            artifacts[entry["release"]] = entry["artifact"]
    releases = []
    root = os.path.join(work_dir, "releases")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for name in names:
        if not _is_release_id(name) or not _is_release_dir(work_dir, name):
            continue  # not ours: never listed, never removed
        folder = os.path.join(root, name)
        files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
                 if os.path.isfile(os.path.join(folder, f))}
        installed = os.stat(folder).st_mtime
        used = max(installed, last_used.get(name, 0.0))
        model = _main_model(folder)
        releases.append({
            "release": name, "model": os.path.join(folder, model) if model else None,
            "complete": model is not None, "files": files, "size_bytes": sum(files.values()),
            "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(installed)),
            "last_active": last_active.get(name), "artifact": artifacts.get(name),
            "active": name == active, "_used": used})
    releases.sort(key=lambda r: (r["active"], r["_used"], r["release"]), reverse=True)
    for info in releases:
        del info["_used"]
    complete = {r["release"] for r in releases if r["complete"]}
    previous = next((e["release"] for e in reversed(history)
                     if e["release"] != active and e["release"] in complete), None)
    for info in releases:
        info["previous"] = info["release"] == previous
    return {"active": active, "previous": previous, "releases": releases,
            "history": history[-20:], "complete": complete, "artifacts": artifacts}


def _entry_epoch(entry):
    """When a history entry was made: its ``unix`` seconds, else its UTC ``time`` stamp."""
    if isinstance(entry.get("unix"), (int, float)):
        return float(entry["unix"])
    import calendar

    try:
        return float(calendar.timegm(time.strptime(entry.get("time"), "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return 0.0


def _read_history(work_dir):
    path = os.path.join(work_dir, HISTORY)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read {path}: {exc}", status=3) from None
    entries = data.get("activations", []) if isinstance(data, dict) else []
    return [e for e in entries if isinstance(e, dict)
            and _is_release_id(e.get("release"))]


def _write_json_atomic(path, document):
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync(os.path.dirname(path) or ".")


def _remove_stale_links(work_dir):
    """Leftover ``.current-*`` links of a switch that died before its rename."""
    for name in os.listdir(work_dir):
        if name.startswith(".current-"):
            _unlink_quietly(os.path.join(work_dir, name))


def _remove_stale(work_dir):
    """Uploads abandoned in incoming/ (older than an hour) and leftover switch links."""
    _remove_stale_links(work_dir)
    removed = []
    incoming = os.path.join(work_dir, "incoming")
    now = time.time()
    for name in sorted(os.listdir(incoming)) if os.path.isdir(incoming) else []:
        path = os.path.join(incoming, name)
        try:
            old = now - os.lstat(path).st_mtime > STALE_PARTIAL_S
        except OSError:
            continue
        if name.endswith(".partial") and old:
            _unlink_quietly(path)
            removed.append(name)
    return removed


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class _Lock:
    """An exclusive lock on WORK_DIR/.lock (switches, rollbacks and prunes never interleave)."""

    def __init__(self, work_dir):
        if not os.path.isdir(work_dir):
            raise AgentError(f"work dir {work_dir} does not exist", status=2)
        self.path = os.path.join(work_dir, ".lock")
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock


def cmd_bench(args):
    """Load a model, warm up, time N runs; report percentiles, load time, peak RSS."""
    if args.runs < 1 or args.warmup < 0:
        raise AgentError("--runs must be >= 1 and --warmup >= 0", status=2)
    runtime = _model_runtime(args.model)
    _numpy()
    _import(*RUNTIME_MODULES[runtime])  # import time is not load time
    cores = os.cpu_count() or 1
    threads = min(args.threads, cores) if args.threads > 0 else cores
    start = time.perf_counter()
    run, version = LOADERS[runtime](args.model, threads)
    load_ms = (time.perf_counter() - start) * 1e3
    for _ in range(args.warmup):
        run()
    before = sensor_snapshot()
    during = None
    times = []
    for index in range(args.runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
        if index == args.runs // 2:  # one power sample under load, outside the timed region
            during = {"power_w": _guarded(read_power)}
    after = sensor_snapshot()
    total_s = sum(times) / 1e3
    return {
        "runtime": runtime, "runtime_version": version, "runs": args.runs,
        "warmup": args.warmup, "threads": threads, "threads_requested": args.threads,
        "p50_ms": percentile(times, 50), "p90_ms": percentile(times, 90),
        "p99_ms": percentile(times, 99), "mean_ms": sum(times) / len(times),
        "load_ms": load_ms, "peak_rss_mb": peak_rss_mb(), "device": device_info(),
        "throughput_fps": args.runs / total_s if total_s > 0 else None,
        "metrics": {"before": before, "during": during, "after": after},
    }


def cmd_rounds(args):
    """Time several models of one runtime in interleaved rounds (see ``time_rounds``)."""
    if args.rounds < 1 or args.min_rounds < 1 or args.threads < 1 or args.budget_s <= 0:
        raise AgentError("--rounds, --min-rounds and --threads must be >= 1 and --budget-s > 0",
                         status=2)
    return dict(time_rounds(args.models, threads=args.threads, rounds=args.rounds,
                            min_rounds=args.min_rounds, budget_s=args.budget_s),
                device=device_info())


def time_rounds(models, threads, rounds, min_rounds, budget_s):
    """Each round runs every model once untimed, then once timed; the median ms of each.
    Fewer rounds (not fewer than ``min_rounds``) when ``rounds`` would take longer than
    ``budget_s``. Edge times a TFLite model's operator prefixes this way, on the device and,
    importing this module, on its own host."""
    runtimes = {_model_runtime(model) for model in models}
    if len(runtimes) != 1:
        raise AgentError(f"models of one runtime only, got {sorted(runtimes)}", status=2)
    runtime = runtimes.pop()
    _numpy()
    _import(*RUNTIME_MODULES[runtime])
    loaded = [LOADERS[runtime](model, threads) for model in models]
    runs, version = [run for run, _ in loaded], loaded[0][1]
    times = [[t] for t in _timed_round(runs)]  # the first round also warms up
    per_round = 2 * sum(row[0] for row in times) / 1e3
    rounds = min(rounds, max(min_rounds, int(budget_s / max(per_round, 1e-9))))
    for _ in range(rounds - 1):
        for k, t in enumerate(_timed_round(runs)):  # no zip(strict=): python 3.8 devices
            times[k].append(t)
    return {"runtime": runtime, "runtime_version": version, "threads": threads,
            "rounds": rounds, "medians_ms": [percentile(row, 50) for row in times]}


def cmd_perf(args):
    """Per-node times of an OpenVINO IR from its performance counters (see ``openvino_perf``)."""
    if args.runs < 1 or args.threads < 1:
        raise AgentError("--runs and --threads must be >= 1", status=2)
    return dict(openvino_perf(args.model, threads=args.threads, runs=args.runs),
                device=device_info())


def openvino_perf(model, threads, runs):
    """Each executed node's median real time over ``runs`` from the OpenVINO CPU plugin's
    performance counters, and the median of an unprofiled compile of the same IR, the two run
    alternately. Edge reads them this way on the device and, importing this module, here."""
    if _model_runtime(model) != "openvino":
        raise AgentError(f"perf reads OpenVINO performance counters: {model} is not an "
                         "OpenVINO IR (.xml)", status=2)
    np = _numpy()
    ov = _import("openvino")
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
              "PERFORMANCE_HINT": "LATENCY"}
    plain = core.compile_model(model, "CPU", config).create_infer_request()
    profiled = core.compile_model(model, "CPU", dict(config, PERF_COUNT=True)
                                  ).create_infer_request()
    feeds = [_random_input(np, list(p.get_partial_shape().get_min_shape()),
                           p.get_element_type().to_dtype()) for p in plain.model_inputs]
    for _ in range(2):
        plain.infer(feeds)
        profiled.infer(feeds)
    times, nodes = [], {}
    for _ in range(runs):
        t0 = time.perf_counter()
        plain.infer(feeds)
        times.append((time.perf_counter() - t0) * 1e3)
        profiled.infer(feeds)
        for info in profiled.get_profiling_info():
            if info.status.name != "EXECUTED":
                continue
            entry = nodes.setdefault(info.node_name, [info.node_type, info.exec_type, []])
            entry[2].append(info.real_time.total_seconds() * 1e3)
    return {"runtime": "openvino", "runtime_version": ov.__version__, "threads": threads,
            "runs": runs, "whole_ms": percentile(times, 50),
            "nodes": {name: {"op": op, "kernel": kernel, "ms": percentile(ms, 50)}
                      for name, (op, kernel, ms) in nodes.items()}}


def _timed_round(runs):
    """Ms of one timed run per model, each right after an untimed one."""
    out = []
    for run in runs:
        run()
        t0 = time.perf_counter()
        run()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _sysfs(*parts):
    """A path under the sysfs root (EDGE_AGENT_SYSFS, default /sys; tests point it elsewhere)."""
    return os.path.join(os.environ.get("EDGE_AGENT_SYSFS") or "/sys", *parts)


def _glob(pattern):
    import glob  # stdlib, imported where used: the agent's top-level imports stay minimal

    return glob.glob(pattern)


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def _read_number(path):
    text = _read_text(path)
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _absent(**extra):
    return dict({"value": None, "source": None}, **extra)


def _guarded(reader):
    """A sensor reading; a reader that fails is a missing sensor, never a failed bench."""
    try:
        return reader()
    except Exception as exc:  # noqa: BLE001 - sensors must never fail the bench
        return _absent(error=_one_line(exc))


def sensor_snapshot():
    """CPU temperature, throttling and power, each with its sysfs source (None when absent)."""
    return {"temperature_c": _guarded(read_cpu_temperature),
            "throttling": _guarded(read_throttling),
            "power_w": _guarded(read_power)}


CPU_ZONE_WORDS = ("cpu", "soc", "x86_pkg", "pkg", "package", "core", "arm")


def read_cpu_temperature():
    """Max °C over CPU/SoC thermal zones (by type), else over all zones."""
    zones = []
    for folder in sorted(_glob(_sysfs("class", "thermal", "thermal_zone*"))):
        milli = _read_number(os.path.join(folder, "temp"))
        if milli is None:
            continue
        kind = (_read_text(os.path.join(folder, "type")) or "").lower()
        celsius = milli / 1000.0 if abs(milli) > 200 else milli
        zones.append((celsius, os.path.join(folder, "temp"), kind))
    cpu = [z for z in zones if any(word in z[2] for word in CPU_ZONE_WORDS)]
    if not zones:
        return _absent(zone=None)
    value, source, kind = max(cpu or zones)
    return {"value": value, "source": source, "zone": kind or None}


def read_throttling():
    """vcgencmd get_throttled (Raspberry Pi), cpufreq cur/max ratio, thermal throttle counts."""
    return {"vcgencmd": read_vcgencmd(), "freq_ratio": read_freq_ratio(),
            "throttle_count": read_throttle_count()}


def read_vcgencmd():
    """``vcgencmd get_throttled`` where the binary exists (only with the real /sys)."""
    import shutil
    import subprocess

    if os.environ.get("EDGE_AGENT_SYSFS", "/sys") != "/sys":
        return _absent()
    binary = shutil.which("vcgencmd")
    if binary is None:
        return _absent()
    try:
        done = subprocess.run([binary, "get_throttled"], capture_output=True, text=True,
                              timeout=2, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return _absent(error=_one_line(exc))
    return dict(parse_throttled(done.stdout), source=f"{binary} get_throttled")


def parse_throttled(text):
    """``throttled=0x50005`` -> the bits, and whether throttling is happening / ever happened."""
    try:
        bits = int(text.strip().partition("=")[2], 16)
    except ValueError:
        return {"value": None}
    return {"value": hex(bits), "under_voltage": bool(bits & 0x1),
            "throttled_now": bool(bits & 0xF), "throttled_since_boot": bool(bits & 0xF0000)}


def read_freq_ratio():
    """Min over cpufreq policies of scaling_cur_freq / cpuinfo_max_freq (1.0 = not capped)."""
    folders = sorted(_glob(_sysfs("devices", "system", "cpu", "cpufreq", "policy*")))
    if not folders:
        folders = sorted(_glob(_sysfs("devices", "system", "cpu", "cpu[0-9]*", "cpufreq")))
    ratios = []
    for folder in folders:
        cur = _read_number(os.path.join(folder, "scaling_cur_freq"))
        top = _read_number(os.path.join(folder, "cpuinfo_max_freq"))
        if cur is not None and top:
            ratios.append((cur / top, os.path.join(folder, "scaling_cur_freq")))
    if not ratios:
        return _absent()
    value, source = min(ratios)
    return {"value": value, "source": source}


def read_throttle_count():
    """Sum of /sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count (x86)."""
    pattern = _sysfs("devices", "system", "cpu", "cpu[0-9]*", "thermal_throttle",
                     "*_throttle_count")
    counts = [(_read_number(p), p) for p in sorted(_glob(pattern))]
    counts = [(n, p) for n, p in counts if n is not None]
    if not counts:
        return _absent()
    return {"value": int(sum(n for n, _ in counts)), "source": [p for _, p in counts]}


def read_power():
    """Watts summed over rails: Jetson INA3221 (i2c, mW) else hwmon (power µW, or V×A)."""
    rails = _ina3221_rails()
    rails += _hwmon_rails(skip_ina3221=bool(rails))
    if not rails:
        return _absent(rails=[])
    return {"value": sum(r["watts"] for r in rails), "source": [r["source"] for r in rails],
            "rails": rails}


def _ina3221_rails():
    rails, seen = [], set()
    for depth in range(1, 4):  # bounded: driver dirs link back and forth
        pattern = _sysfs("bus", "i2c", "drivers", "ina3221*", *(["*"] * depth),
                         "in_power*_input")
        for path in sorted(_glob(pattern)):
            real = os.path.realpath(path)
            milliwatts = _read_number(path)
            if real in seen or milliwatts is None:
                continue
            seen.add(real)
            channel = os.path.basename(path)[len("in_power"):-len("_input")]
            label = _read_text(os.path.join(os.path.dirname(path), f"rail_name_{channel}"))
            rails.append({"label": label or f"ina3221/{channel}", "watts": milliwatts / 1e3,
                          "source": path})
    return rails


def _hwmon_rails(*, skip_ina3221):
    rails = []
    for folder in sorted(_glob(_sysfs("class", "hwmon", "hwmon*"))):
        name = _read_text(os.path.join(folder, "name")) or os.path.basename(folder)
        if skip_ina3221 and name.startswith("ina3221"):
            continue
        found = []
        for path in sorted(_glob(os.path.join(folder, "power*_input"))):
            microwatts = _read_number(path)
            channel = os.path.basename(path)[len("power"):-len("_input")]
            if microwatts is not None:
                found.append((f"power{channel}", microwatts / 1e6, path))
        if not found:  # no power channel: volts (mV) x amps (mA) where both exist
            for path in sorted(_glob(os.path.join(folder, "in*_input"))):
                channel = os.path.basename(path)[len("in"):-len("_input")]
                current = os.path.join(folder, f"curr{channel}_input")
                millivolts, milliamps = _read_number(path), _read_number(current)
                if millivolts is not None and milliamps is not None:
                    found.append((f"in{channel}", millivolts * milliamps / 1e6,
                                  f"{path} x {current}"))
        for stem, watts, source in found:
            label = _read_text(os.path.join(folder, f"{stem}_label"))
            rails.append({"label": f"{name}/{label or stem}", "watts": watts,
                          "source": source})
    return rails


def cmd_profile(args):
    """Per-node kernel ms (ORT profiling, graph optimizations off) and the optimized model's ms.

    Per node: one warm-up run then ``runs`` profiled runs of an unoptimized session, the
    "Node" kernel events summed per node and averaged over the last ``runs`` runs. Whole
    model: the median wall ms of ``runs`` runs of a fully optimized session (after a warm-up).
    """
    if args.runs < 1 or args.threads < 0:
        raise AgentError("--runs must be >= 1 and --threads >= 0", status=2)
    if not os.path.isfile(args.model):
        raise AgentError(f"model {args.model} not found", status=2)
    if os.path.splitext(args.model)[1] != ".onnx":
        raise AgentError(f"profile needs an .onnx model, got {args.model}", status=2)
    np = _numpy()
    ort = _import("onnxruntime")
    import shutil
    import tempfile

    trace_dir = tempfile.mkdtemp(prefix="edge-profile-")
    try:
        session = _ort_session(ort, args.model, args.threads, optimize=False,
                               profile_prefix=os.path.join(trace_dir, "ort-profile"))
        feeds = profile_feeds(np, session.get_inputs())
        for _ in range(args.runs + 1):  # the first is the warm-up, dropped by kernel_ms
            _ort_run(session, feeds)
        trace = session.end_profiling()
        try:
            with open(trace, encoding="utf-8") as handle:
                events = json.load(handle)
        except (OSError, ValueError) as exc:
            raise AgentError(f"cannot read the onnxruntime profile: {exc}") from None
        nodes = kernel_ms(events, args.runs)
        del session
        optimized = _ort_session(ort, args.model, args.threads, optimize=True)
        _ort_run(optimized, feeds)
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            _ort_run(optimized, feeds)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return {
        "nodes": nodes, "whole_ms": percentile(times, 50), "runs": args.runs,
        "threads": args.threads, "device": device_info(),
        "runtime": {"onnxruntime": ort.__version__},
    }


def _ort_session(ort, path, threads, *, optimize, profile_prefix=None):
    """A CPU session as partition.cost builds it; a load failure is one line of JSON."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types; report one line
        raise AgentError(f"onnxruntime cannot load {path}: {_one_line(exc)}") from None


def _ort_run(session, feeds):
    try:
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001
        raise AgentError(f"onnxruntime failed to run the model: {_one_line(exc)}") from None


def _one_line(exc):
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def profile_feeds(np, inputs):
    """Inputs for profiling: float standard normal, everything else zeros; symbolic dims 1."""
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in inputs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        dtype = ort_dtype(np, arg.type)
        feeds[arg.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                           else np.zeros(shape, dtype))
    return feeds


def ort_dtype(np, ort_type):
    """numpy dtype of an ORT type string such as 'tensor(float)'."""
    name = ort_type
    if name.startswith("tensor(") and name.endswith(")"):
        name = name[len("tensor("):-1]
    name = {"float": "float32", "double": "float64", "float16": "float16"}.get(name, name)
    try:
        return np.dtype(name)
    except TypeError:
        raise AgentError(f"cannot make a random input of type {ort_type}", status=2) from None


def kernel_ms(events, runs):
    """Mean kernel ms per node over the last ``runs`` runs of an ORT trace (a list of events).

    Only "Node" events named "<node>_kernel_time" count; ORT 1.31 gives no node_name argument,
    so the node is the event name without that suffix.
    """
    per_run = {}
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        args = event.get("args") or {}
        name = args.get("node_name") or event["name"][:-len("_kernel_time")]
        if name:
            per_run.setdefault(name, []).append(event["dur"] / 1e3)
    return {name: sum(ds[-runs:]) / runs for name, ds in per_run.items()}


def percentile(values, q):
    """Linear-interpolated percentile (as numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def peak_rss_mb():
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _numpy():
    try:
        import numpy
    except ImportError:
        raise AgentError("numpy is not installed on the device") from None
    return numpy


def _random_input(np, shape, dtype):
    shape = [_dim(d) for d in shape]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.random.default_rng(0).integers(max(info.min, -8), min(info.max, 8),
                                                 size=shape).astype(dtype)
    return np.random.default_rng(0).random(shape, dtype=np.float32).astype(dtype)


def _dim(value):
    """A concrete dimension: symbolic or unknown (-1, None, 'batch') becomes 1."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        return 1
    return value if value > 0 else 1


def load_onnxruntime(path, threads):
    """An ONNX Runtime session and a closure running it on random inputs."""
    np = _numpy()
    ort = _import("onnxruntime", "onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
    feeds = {i.name: _random_input(np, i.shape, dtypes.get(i.type, np.float32))
             for i in session.get_inputs()}
    return (lambda: session.run(None, feeds)), ort.__version__


def load_tflite(path, threads):
    """A LiteRT interpreter (ai_edge_litert, else tflite_runtime) on random inputs."""
    np = _numpy()
    module = _import(*RUNTIME_MODULES["tflite"])
    interpreter = module.Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               _random_input(np, list(detail["shape"]), detail["dtype"]))
    return interpreter.invoke, _version_of(module)


def load_openvino(path, threads):
    """An OpenVINO CPU compiled model on random inputs, computing in f32."""
    np = _numpy()
    ov = _import("openvino")
    core = ov.Core()
    compiled = core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                "INFERENCE_PRECISION_HINT": "f32",
                                                "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    feeds = [_random_input(np, list(p.get_partial_shape().get_min_shape()),
                           p.get_element_type().to_dtype()) for p in compiled.inputs]
    return (lambda: request.infer(feeds)), ov.__version__


LOADERS = {"onnxruntime": load_onnxruntime, "tflite": load_tflite, "openvino": load_openvino}


def _import(*names):
    import importlib

    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise AgentError(f"runtime not installed on the device: pip install {names[0].split('.')[0]}"
                     .replace("ai_edge_litert", "ai-edge-litert"))


def _version_of(module):
    import importlib.metadata as md

    for dist in ("ai-edge-litert", "tflite-runtime", "tensorflow"):
        try:
            if module.__name__.split(".")[0].replace("_", "-") == dist:
                return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def runtime_versions():
    """Runtime name -> version for every runtime importable here."""
    import importlib.metadata as md

    found = {}
    for runtime, dist_names in (("onnxruntime", ("onnxruntime",)),
                                ("tflite", ("ai-edge-litert", "tflite-runtime")),
                                ("openvino", ("openvino",))):
        for dist in dist_names:
            try:
                found[runtime] = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
    return found


def device_info():
    """Machine, CPU, cores, memory, OS and python of this device."""
    return {
        "hostname": platform.node(), "machine": platform.machine(),
        "system": platform.platform(), "cpu": _cpu_model(), "cores": os.cpu_count(),
        "mem_total_mb": _mem_total_mb(), "python": platform.python_version(),
    }


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mb():
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def sha256_file(path):
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise AgentError(f"cannot read {path}: {exc.strerror}", status=2) from None
    return digest.hexdigest()


def _fsync(path):
    """Flush a file or a directory entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # last resort: never a traceback to the host, always JSON
        print(json.dumps({"error": f"agent crashed: {type(exc).__name__}: {exc}"}))
        sys.exit(3)
