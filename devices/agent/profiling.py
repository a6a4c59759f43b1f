"""Per-node times by the runtime's own profiler: ONNX Runtime's per-node trace (``profile``) and
OpenVINO's CPU performance counters (``perf``), each with the whole model's median from
``timing.interleaved``. Edge runs them on the device and, importing this module, on its host."""

import contextlib
import json
import os

from . import timing
from .errors import AgentError, one_line
from .info import device_info
from .runtimes import (
    import_module,
    model_runtime,
    numpy,
    openvino_compiled,
    openvino_feeds,
    profile_feeds,
)

#: Rounds of the whole-model timing (fewer when there are fewer runs).
WHOLE_ROUNDS = 5


def cmd_profile(args):
    """Per-node kernel ms (ORT profiling, graph optimizations off) and the optimized model's ms."""
    if args.runs < 1 or args.threads < 0:
        raise AgentError("--runs must be >= 1 and --threads >= 0", status=2)
    if not os.path.isfile(args.model):
        raise AgentError(f"model {args.model} not found", status=2)
    if os.path.splitext(args.model)[1] != ".onnx":
        raise AgentError(f"profile needs an .onnx model, got {args.model}", status=2)
    return dict(ort_profile(args.model, args.threads, args.runs), device=device_info())


def ort_profile(model, threads, runs, hold=None):
    """Per node: one warm-up run then ``runs`` profiled runs of an unoptimized session, the
    "Node" kernel events summed per node and averaged over the last ``runs`` runs (``nodes``;
    ``ops``: each node's operator). Whole model: the median ms of ``runs`` runs of a fully
    optimized session, timed in rounds after warm-up calls (``whole_ms``)."""
    np = numpy()
    ort = import_module("onnxruntime")
    import shutil
    import tempfile

    trace_dir = tempfile.mkdtemp(prefix="edge-profile-")
    try:
        session = ort_session(ort, model, threads, optimize=False,
                              profile_prefix=os.path.join(trace_dir, "ort-profile"))
        feeds = profile_feeds(np, session.get_inputs())
        with _held(hold):
            for _ in range(runs + 1):  # the first is the warm-up, dropped by kernel_ms
                ort_run(session, feeds)
        events = _trace(session.end_profiling())
        del session
        optimized = ort_session(ort, model, threads, optimize=True)
        timed = timing.interleaved({"whole": lambda: ort_run(optimized, feeds)},
                            rounds=min(WHOLE_ROUNDS, runs), runs=runs, warmup=1, idle_s=0.0,
                            hold=hold)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return {"nodes": kernel_ms(events, runs), "ops": kernel_ops(events),
            "whole_ms": _median(timed.samples["whole"]), "runs": runs, "threads": threads,
            "runtime": {"onnxruntime": ort.__version__}}


def _held(hold):
    return hold() if hold is not None else contextlib.nullcontext()


def _median(times):
    return timing.percentile(times, 50)


def _trace(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read the onnxruntime profile: {exc}") from None


def ort_session(ort, path, threads, optimize, profile_prefix=None):
    """A CPU session (graph optimizations all or none); a load failure is one line."""
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
        raise AgentError(f"onnxruntime cannot load {path}: {one_line(exc)}") from None


def ort_run(session, feeds):
    """One run; a failure is one line."""
    try:
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001
        raise AgentError(f"onnxruntime failed to run the model: {one_line(exc)}") from None


def _kernel_events(events):
    """(node name, event) of every "<node>_kernel_time" Node event (ORT 1.31 gives no
    node_name argument: the node is the event name without that suffix)."""
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        args = event.get("args") or {}
        name = args.get("node_name") or event["name"][:-len("_kernel_time")]
        if name:
            yield name, event


def kernel_ms(events, runs):
    """Mean kernel ms per node over the last ``runs`` runs of an ORT trace (a list of events)."""
    per_run = {}
    for name, event in _kernel_events(events):
        per_run.setdefault(name, []).append(event["dur"] / 1e3)
    return {name: sum(ds[-runs:]) / runs for name, ds in per_run.items()}


def kernel_ops(events):
    """The operator type of every node of an ORT trace ("?" when the trace does not say)."""
    return {name: (event.get("args") or {}).get("op_name") or "?"
            for name, event in _kernel_events(events)}


def cmd_perf(args):
    """Per-node times of an OpenVINO IR from its performance counters (see ``openvino_perf``)."""
    if args.runs < 1 or args.threads < 1:
        raise AgentError("--runs and --threads must be >= 1", status=2)
    return dict(openvino_perf(args.model, args.threads, args.runs), device=device_info())


def openvino_perf(model, threads, runs, hold=None):
    """Each executed node's median real time over ``runs`` from the OpenVINO CPU plugin's
    performance counters, and the median of an unprofiled compile of the same IR: the two
    compiles are timed as two candidates in interleaved rounds (one call each per round, after
    two warm-up calls of each); the profiled compile's own wall times are not used."""
    if model_runtime(model) != "openvino":
        raise AgentError(f"perf reads OpenVINO performance counters: {model} is not an "
                         "OpenVINO IR (.xml)", status=2)
    np = numpy()
    ov = import_module("openvino")
    core = ov.Core()
    ir = core.read_model(model)
    plain = openvino_compiled(core, ir, threads).create_infer_request()
    profiled = openvino_compiled(core, ir, threads, PERF_COUNT=True).create_infer_request()
    feeds = openvino_feeds(np, plain.model_inputs)
    for _ in range(2):
        plain.infer(feeds)
        profiled.infer(feeds)
    nodes = {}

    def counted():
        profiled.infer(feeds)
        _count(profiled.get_profiling_info(), nodes)

    timed = timing.interleaved({"plain": lambda: plain.infer(feeds), "profiled": counted},
                        rounds=runs, runs=runs, warmup=0, idle_s=0.0, hold=hold)
    return {"runtime": "openvino", "runtime_version": ov.__version__, "threads": threads,
            "runs": runs, "whole_ms": _median(timed.samples["plain"]),
            "nodes": {name: {"op": op, "kernel": kernel, "ms": _median(ms)}
                      for name, (op, kernel, ms) in nodes.items()}}


def _count(infos, nodes):
    for info in infos:
        if info.status.name == "EXECUTED":
            entry = nodes.setdefault(info.node_name, [info.node_type, info.exec_type, []])
            entry[2].append(info.real_time.total_seconds() * 1e3)
