"""ONNX Runtime on the device, for edge's agent: loading an ``.onnx`` model on random inputs,
and ``profile``: per-node times from ONNX Runtime's profiler with the optimized model's median.

Zipped into the agent as ``edge_agent/runtime_onnxruntime.py`` (devices/agentfile.py): Python
3.8, the standard library, numpy and onnxruntime only. Edge imports it on its host too.
"""

import json
import os
import shutil
import tempfile

try:  # inside the agent zipapp on a device
    from edge_agent import info, observe, runtimes, timing
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import info, observe, runtimes, timing
    from devices.agent.errors import AgentError, one_line

NAME = "onnxruntime"
SUFFIXES = (".onnx",)
MODULES = ("onnxruntime",)
DISTRIBUTIONS = ("onnxruntime",)
#: Rounds of the whole-model timing (fewer when there are fewer runs).
WHOLE_ROUNDS = 5


def load(path, threads):
    """An ONNX Runtime session and a closure running it on random inputs."""
    np = runtimes.numpy()
    ort = runtimes.import_module(*MODULES)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: runtimes.random_input(np, i.shape, ort_dtype(np, i.type))
             for i in session.get_inputs()}
    return observe.Loaded(lambda: session.run(None, feeds),
                          lambda: dict(ort_observed(ort, path, threads, feeds),
                                       versions={"onnxruntime": str(ort.__version__)})), \
        ort.__version__


#: Operators that take float inputs and quantize them to uint8 inside (ONNX Runtime's contrib
#: operators' definition), multiplying with int8 weights.
DYNAMIC_INT8 = frozenset({"DynamicQuantizeMatMul", "DynamicQuantizeLSTM"})
#: Operator -> the input holding its weights [O, I, k...] (convolutions).
CONV_WEIGHTS = {"Conv": 1, "FusedConv": 1, "ConvInteger": 1, "NhwcConv": 1, "QLinearConv": 3}
#: Operators multiplying [.., K] by [K, N] (the first input's last dimension is K; a
#: transposed first operand is not told apart).
PRODUCTS = frozenset({"MatMul", "Gemm", "FusedMatMul", "MatMulInteger", "QLinearMatMul",
                      "FusedGemm", "QGemm", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"})


def ort_observed(ort, path, threads, feeds):
    """Each node of the optimized graph as ONNX Runtime ran it: its execution provider,
    operator and input type, from one profiled run of a second session of the same file and
    settings (ONNX Runtime names a node's provider only in its profile)."""
    trace_dir = tempfile.mkdtemp(prefix="edge-observe-")
    try:
        session = ort_session(ort, path, threads, optimize=True,
                              profile_prefix=os.path.join(trace_dir, "ort-observe"))
        ort_run(session, feeds)
        events = _trace(session.end_profiling())
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    nodes = {}
    for name, event in _kernel_events(events):
        nodes.setdefault(name, _observed_node(name, event.get("args") or {}))
    return {"method": "ONNX Runtime's profile of one run (each node's execution provider and "
                      "input type)", "layers": list(nodes.values())}


def _observed_node(name, args):
    provider = str(args.get("provider") or "?")
    unit = provider[:-len("ExecutionProvider")] if provider.endswith("ExecutionProvider") \
        else provider
    op = str(args.get("op_name") or "?")
    ins = [_type_shape(t) for t in args.get("input_type_shape") or ()]
    out = _type_shape((args.get("output_type_shape") or [{}])[0])[1]
    precision = "u8" if op in DYNAMIC_INT8 else (ins[0][0] if ins else "?")
    return observe.layer(name, op, unit, precision, provider, _ort_macs(op, ins, out))


def _type_shape(entry):
    """(type, shape) of a profile's {"float": [1, 3, 8, 8]}; ("?", []) when it says none."""
    for kind, shape in (entry or {}).items():
        return str(kind), list(shape) if isinstance(shape, list) else []
    return "?", []


def _ort_macs(op, ins, out):
    at = CONV_WEIGHTS.get(op)
    if at is not None and len(ins) > at and len(ins[at][1]) >= 3:
        return observe.product_macs(out, observe.count(ins[at][1][1:]))
    if op == "ConvTranspose" and len(ins) > 1 and len(ins[1][1]) >= 3:  # [I, O/g, k...]
        return observe.product_macs(ins[0][1], observe.count(ins[1][1][1:]))
    if op in PRODUCTS and ins and ins[0][1]:
        return observe.product_macs(out, ins[0][1][-1])
    return 0


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
    name = {"float": "float32", "double": "float64", "float16": "float16",
            "bool": "bool"}.get(name, name)
    try:
        return np.dtype(name)
    except TypeError:
        raise AgentError(f"cannot make a random input of type {ort_type}", status=2) from None


def cmd_profile(args):
    """Per-node kernel ms (ORT profiling, graph optimizations off) and the optimized model's ms."""
    if args.runs < 1 or args.threads < 0:
        raise AgentError("--runs must be >= 1 and --threads >= 0", status=2)
    if not os.path.isfile(args.model):
        raise AgentError(f"model {args.model} not found", status=2)
    if os.path.splitext(args.model)[1] != ".onnx":
        raise AgentError(f"profile needs an .onnx model, got {args.model}", status=2)
    return dict(ort_profile(args.model, args.threads, args.runs), device=info.device_info())


#: The agent's commands this runtime adds: (name, function, default --runs, default --threads).
COMMANDS = (("profile", cmd_profile, 10, 1),)


def ort_profile(model, threads, runs, hold=None):
    """Per node: one warm-up run then ``runs`` profiled runs of an unoptimized session, the
    "Node" kernel events summed per node and averaged over the last ``runs`` runs (``nodes``;
    ``ops``: each node's operator). Whole model: the median ms of ``runs`` runs of a fully
    optimized session, timed in rounds after warm-up calls (``whole_ms``)."""
    np = runtimes.numpy()
    ort = runtimes.import_module(*MODULES)
    trace_dir = tempfile.mkdtemp(prefix="edge-profile-")
    try:
        session = ort_session(ort, model, threads, optimize=False,
                              profile_prefix=os.path.join(trace_dir, "ort-profile"))
        feeds = profile_feeds(np, session.get_inputs())
        with timing.held(hold):
            for _ in range(runs + 1):  # the first is the warm-up, dropped by kernel_ms
                ort_run(session, feeds)
        events = _trace(session.end_profiling())
        del session
        optimized = ort_session(ort, model, threads, optimize=True)
        timed = timing.interleaved({"whole": lambda: ort_run(optimized, feeds)},
                                   rounds=min(WHOLE_ROUNDS, runs), runs=runs, warmup=1,
                                   idle_s=0.0, hold=hold)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return {"nodes": kernel_ms(events, runs), "ops": kernel_ops(events),
            "whole_ms": timing.percentile(timed.samples["whole"], 50), "runs": runs,
            "threads": threads, "runtime": {"onnxruntime": ort.__version__}}


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
        # weights kept as inputs, so the profile shows their shapes (a prepacked QLinearConv's
        # are gone from it); the kernels chosen are the same
        options.add_session_config_entry("session.disable_prepacking", "1")
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
