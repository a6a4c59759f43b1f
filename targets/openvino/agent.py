"""OpenVINO on the device, for edge's agent: loading an IR (``.xml`` + ``.bin``) on the CPU in
the precision it records, and ``perf``: per-node times from the CPU plugin's performance
counters with an unprofiled compile's median.

Zipped into the agent as ``edge_agent/runtime_openvino.py`` (devices/agentfile.py): Python 3.8,
the standard library, numpy and openvino only. Edge imports it on its host too.
"""

try:  # inside the agent zipapp on a device
    from edge_agent import info, runtimes, timing
    from edge_agent.errors import AgentError
except ImportError:  # on edge's host
    from devices.agent import info, runtimes, timing
    from devices.agent.errors import AgentError

NAME = "openvino"
SUFFIXES = (".xml",)
MODULES = ("openvino",)
DISTRIBUTIONS = ("openvino",)
#: Where edge's IR records the precision it computes in (targets/openvino/target.py writes it).
OPENVINO_COMPUTES = ["edge", "inference_precision"]


def openvino_config(threads, hint="f32"):
    """How edge compiles an IR for the CPU: ``threads`` threads, ``hint`` precision, latency."""
    return {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": hint,
            "PERFORMANCE_HINT": "LATENCY"}


def openvino_hint(model):
    """The precision an IR (a read ov.Model) records that it computes in; f32 when none."""
    if model.has_rt_info(OPENVINO_COMPUTES):
        return str(model.get_rt_info(OPENVINO_COMPUTES).astype(str))
    return "f32"


def openvino_feeds(np, ports):
    """Random inputs for a compiled model's or request's input ports (min shapes)."""
    return [runtimes.random_input(np, list(p.get_partial_shape().get_min_shape()),
                                  p.get_element_type().to_dtype()) for p in ports]


def openvino_compiled(core, ir, threads, **extra):
    """``ir`` compiled for the CPU in the precision it records (``extra``: more properties);
    refused (exit 3) when OpenVINO would silently compute in another one on this CPU."""
    hint = openvino_hint(ir)
    compiled = core.compile_model(ir, "CPU", dict(openvino_config(threads, hint), **extra))
    got = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    if got != hint:
        raise AgentError(f"the model was made to compute in {hint}, but OpenVINO computes {got} "
                         "on this CPU: its profile's compute.isa names instructions this device "
                         "lacks; fix the profile, or deploy another candidate")
    return compiled


def load(path, threads):
    """An OpenVINO CPU compiled model on random inputs, computing in the IR's precision."""
    np = runtimes.numpy()
    ov = runtimes.import_module(*MODULES)
    core = ov.Core()
    compiled = openvino_compiled(core, core.read_model(path), threads)
    request = compiled.create_infer_request()
    feeds = openvino_feeds(np, compiled.inputs)
    return (lambda: request.infer(feeds)), ov.__version__


def cmd_perf(args):
    """Per-node times of an OpenVINO IR from its performance counters (see ``openvino_perf``)."""
    if args.runs < 1 or args.threads < 1:
        raise AgentError("--runs and --threads must be >= 1", status=2)
    return dict(openvino_perf(args.model, args.threads, args.runs), device=info.device_info())


#: The agent's commands this runtime adds: (name, function, default --runs, default --threads).
COMMANDS = (("perf", cmd_perf, 20, 1),)


def openvino_perf(model, threads, runs, hold=None):
    """Each executed node's median real time over ``runs`` from the OpenVINO CPU plugin's
    performance counters, and the median of an unprofiled compile of the same IR: the two
    compiles are timed as two candidates in interleaved rounds (one call each per round, after
    two warm-up calls of each); the profiled compile's own wall times are not used."""
    if runtimes.model_runtime(model) != NAME:
        raise AgentError(f"perf reads OpenVINO performance counters: {model} is not an "
                         "OpenVINO IR (.xml)", status=2)
    np = runtimes.numpy()
    ov = runtimes.import_module(*MODULES)
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
    return {"runtime": NAME, "runtime_version": ov.__version__, "threads": threads,
            "runs": runs, "whole_ms": timing.percentile(timed.samples["plain"], 50),
            "nodes": {name: {"op": op, "kernel": kernel,
                             "ms": timing.percentile(ms, 50)}
                      for name, (op, kernel, ms) in nodes.items()}}


def _count(infos, nodes):
    for info_ in infos:
        if info_.status.name == "EXECUTED":
            entry = nodes.setdefault(info_.node_name, [info_.node_type, info_.exec_type, []])
            entry[2].append(info_.real_time.total_seconds() * 1e3)
