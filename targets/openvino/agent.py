"""OpenVINO on the device, for edge's agent: loading an IR (``.xml`` + ``.bin``) on the CPU in
the precision it records, or on the accelerator its companion JSON names (an ``.npu.xml`` or
``.gpu.xml`` IR: ``accelerator_spec``), and ``perf``: per-node times from the plugin's
performance counters with an unprofiled compile's median.

Zipped into the agent as ``edge_agent/runtime_openvino.py`` (devices/agentfile.py): Python 3.8,
the standard library, numpy and openvino only. Edge imports it on its host too.
"""

import json
import os

try:  # inside the agent zipapp on a device
    from edge_agent import info, observe, runtimes, timing
    from edge_agent.errors import AgentError
except ImportError:  # on edge's host
    from devices.agent import info, observe, runtimes, timing
    from devices.agent.errors import AgentError

NAME = "openvino"
#: IRs made for an accelerator (targets/openvino/accel.py): the same IR, with a companion JSON
#: naming the device to compile it on and its properties.
DEVICE_SUFFIXES = (".npu.xml", ".gpu.xml")
SUFFIXES = (".xml", *DEVICE_SUFFIXES)
MODULES = ("openvino",)
DISTRIBUTIONS = ("openvino",)
#: Where edge's IR records the precision it computes in (targets/openvino/target.py writes it).
OPENVINO_COMPUTES = ["edge", "inference_precision"]


#: The companion JSON's key holding {"device", "unit", "computes", "config"}.
SPEC_KEY = "edge_accelerator"
#: What makes a device family visible to OpenVINO, for the refusal when it is not.
DRIVERS = {
    "NPU": "the NPU driver (the intel_vpu kernel module, /dev/accel/accel0) or OpenVINO's NPU "
           "plugin is not installed",
    "GPU": "Intel's GPU compute runtime (intel-opencl-icd / Level Zero, /dev/dri/renderD128) or "
           "OpenVINO's GPU plugin is not installed",
}


def companion(path, suffix):
    """The file beside ``path`` named with ``suffix`` in place of its last suffix
    (model.npu.xml -> model.npu.json), else in place of its last two (model.npu.xml ->
    model.json, as a release names it); None when neither exists."""
    stem = os.path.splitext(path)[0]
    for name in (stem + suffix, os.path.splitext(stem)[0] + suffix):
        if os.path.isfile(name):
            return name
    return None


def accelerator_spec(path):
    """The accelerator an IR was made for, from its companion JSON (None: the CPU IR)."""
    found = companion(path, ".json")
    if found is None:
        return None
    try:
        with open(found) as handle:
            spec = json.load(handle).get(SPEC_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    if spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("device"), str)):
        raise AgentError(f"{found}: its {SPEC_KEY} entry names no device", status=2)
    return spec


def listed_devices(device):
    """The device families a device string names: "NPU" -> [NPU]; "AUTO:NPU,GPU,CPU" ->
    [NPU, GPU, CPU]; "GPU.1" -> [GPU]."""
    names = device.split(":", 1)[1] if ":" in device else device
    return [n.strip().split(".")[0].split("(")[0] for n in names.split(",") if n.strip()]


def runnable(available, device):
    """The device string to compile on: ``device`` when OpenVINO sees it; a priority list
    (AUTO:NPU,GPU,CPU) cut to the devices it sees, in order (AUTO fails on a listed plugin that
    cannot load); exit 3 naming what is missing and why when it sees none of them."""
    families = {d.split(".")[0] for d in available}
    wanted = listed_devices(device)
    seen = [w for w in wanted if w in families]
    if not seen:
        why = "; ".join(DRIVERS.get(w, f"OpenVINO's {w} plugin is not installed") for w in wanted)
        raise AgentError(f"OpenVINO has no {' or '.join(wanted)} here (it sees "
                         f"{', '.join(available) or 'no device'}): {why}", status=3)
    if ":" not in device:
        return device
    virtual, names = device.split(":", 1)
    kept = [n.strip() for n in names.split(",") if listed_devices(n.strip())[0] in families]
    return f"{virtual}:{','.join(kept)}"


def weights_of(path):
    """The IR's .bin (beside it as model.npu.bin or model.bin); exit 2 when absent."""
    found = companion(path, ".bin")
    if found is None:
        raise AgentError(f"{path}: its weights (.bin) are not beside it", status=2)
    return found


def openvino_model(core, path, threads, **extra):
    """The IR at ``path`` compiled where it was made to run: on its accelerator (checked
    present) with the properties its JSON names, else on the CPU (``openvino_compiled``)."""
    ir = core.read_model(path, weights_of(path))
    spec = accelerator_spec(path)
    if spec is None:
        return openvino_compiled(core, ir, threads, **extra)
    device = runnable(core.available_devices, spec["device"])
    return core.compile_model(ir, device, dict(spec.get("config") or {}, **extra))


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


#: Where an int8-dynamic IR records its run-time quantization (a runtime option every compile
#: reads): the group size of its activations' scales.
DYNAMIC_OPTION = ["runtime_options", "DYNAMIC_QUANTIZATION_GROUP_SIZE"]


def load(path, threads):
    """An OpenVINO compiled model on random inputs: on the CPU computing in the IR's precision,
    or on the accelerator its companion JSON names."""
    np = runtimes.numpy()
    ov = runtimes.import_module(*MODULES)
    core = ov.Core()
    compiled = openvino_model(core, path, threads)
    request = compiled.create_infer_request()
    feeds = openvino_feeds(np, compiled.inputs)
    return observe.Loaded(lambda: request.infer(feeds),
                          lambda: dict(openvino_observed(compiled), made_for=made_for(path),
                                       versions=observe.versions_of(
                                           lambda: plugin_versions(ov, core, compiled)))), \
        ov.__version__


def plugin_versions(ov, core, compiled):
    """OpenVINO's version and the build of each plugin the compile runs on."""
    found = {"openvino": str(ov.__version__)}
    for device in compiled.get_property("EXECUTION_DEVICES"):
        for name, version in core.get_versions(str(device)).items():
            found[f"{name} plugin"] = f"{version.description} {version.build_number}"
    return found


def made_for(path):
    """The device family an IR was made for: its companion JSON's first listed device (an
    AUTO list's first choice), else its suffix's (.npu.xml, .gpu.xml, even with no JSON);
    "" for a CPU IR."""
    spec = accelerator_spec(path)
    if spec:
        return listed_devices(spec["device"])[0]
    return next((s.split(".")[1].upper() for s in DEVICE_SUFFIXES if path.endswith(s)), "")


#: Runtime-graph layers that move or hold data rather than compute the model: left out.
NOT_LAYERS = frozenset({"Input", "Output", "Const", "Reorder"})


def openvino_observed(compiled):
    """Each layer of a compiled model as its plugin runs it: the runtime graph's layer type,
    execution precision and kernel, on the device(s) the compile runs on."""
    units = sorted({listed_devices(str(d))[0] for d in compiled.get_property("EXECUTION_DEVICES")})
    if len(units) != 1:  # HETERO, or AUTO still on its CPU: the graph does not say per layer
        raise AgentError(f"it runs on {' and '.join(units) or 'no device'}, and its runtime "
                         "graph does not say which ran each layer")
    unit = units[0]
    layers = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info_ = op.get_rt_info()
        kind = info_["layerType"].astype(str)
        if kind not in NOT_LAYERS:
            layers.append(observe.layer(
                op.get_friendly_name(), kind, unit, info_["runtimePrecision"].astype(str),
                info_["primitiveType"].astype(str), _macs(op, kind)))
    return {"method": "the compiled model's runtime graph (each layer's runtimePrecision "
                      "and primitive; the compile's EXECUTION_DEVICES)", "layers": layers}


def _macs(op, kind):
    """Multiply-accumulates of a convolution, fully connected layer or matrix product."""
    shapes = [op.input(k).get_partial_shape() for k in range(op.get_input_size())]
    if op.get_output_size() == 0 or len(shapes) < 2 or not all(s.is_static for s in shapes) \
            or not op.get_output_partial_shape(0).is_static:
        return 0
    out = [int(d) for d in op.get_output_partial_shape(0).to_shape()]
    first, weights = list(shapes[0].to_shape()), list(shapes[1].to_shape())
    # weights [O, I, k...] (a deconvolution's [I, O, k...]) or, grouped, [G, O/G, I/G, k...]
    skip = 2 if len(weights) == len(first) + 1 else 1
    if kind == "Convolution" and len(weights) >= 3:
        return observe.product_macs(out, observe.count(weights[skip:]))
    if kind == "Deconvolution" and len(weights) >= 3:  # each input element feeds O x k
        return observe.product_macs(first, observe.count(weights[skip:]))
    if kind in ("FullyConnected", "MatMul") and first:
        return observe.product_macs(out, first[-1])
    return 0


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
    two warm-up calls of each); the profiled compile's own wall times are not used. An IR made
    for an accelerator is compiled on it (its plugin's counters)."""
    if runtimes.model_runtime(model) != NAME:
        raise AgentError(f"perf reads OpenVINO performance counters: {model} is not an "
                         "OpenVINO IR (.xml)", status=2)
    np = runtimes.numpy()
    ov = runtimes.import_module(*MODULES)
    core = ov.Core()
    plain = openvino_model(core, model, threads).create_infer_request()
    profiled = openvino_model(core, model, threads, PERF_COUNT=True).create_infer_request()
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
