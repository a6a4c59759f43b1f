"""LiteRT (TFLite) on the device, for edge's agent: loading a ``.tflite`` model with
``ai_edge_litert``, else ``tflite_runtime``, on random inputs; a ``.delegate.tflite`` through
the external delegate its companion JSON names (an NPU's, e.g. NXP's VX delegate), and
``delegate``: which operators that delegate took, and its time.

Zipped into the agent as ``edge_agent/runtime_tflite.py`` (devices/agentfile.py): Python 3.8,
the standard library, numpy and LiteRT only. Edge imports it on its host too.
"""

import importlib.metadata as md
import json
import os

try:  # inside the agent zipapp on a device
    from edge_agent import info, observe, runtimes, timing
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import info, observe, runtimes, timing
    from devices.agent.errors import AgentError, one_line

NAME = "tflite"
#: A TFLite model for an NPU behind an external delegate (targets/tflite/delegate.py): the
#: companion JSON names the library and its options.
DELEGATE_SUFFIX = ".delegate.tflite"
SUFFIXES = (".tflite", DELEGATE_SUFFIX)
MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")
DISTRIBUTIONS = ("ai-edge-litert", "tflite-runtime")
#: The companion JSON's key holding {"library", "options", "unit"}.
SPEC_KEY = "edge_delegate"


def delegate_spec(path):
    """The external delegate a model was made for, from its companion JSON (model.json or
    model.delegate.json beside it); None for a plain .tflite."""
    stem = os.path.splitext(path)[0]
    for name in (stem + ".json", os.path.splitext(stem)[0] + ".json"):
        if os.path.isfile(name):
            try:
                with open(name) as handle:
                    spec = json.load(handle).get(SPEC_KEY)
            except (OSError, ValueError, AttributeError):
                continue
            if spec is not None:
                return _checked(spec, name)
    return None


def _checked(spec, name):
    if not isinstance(spec, dict) or not isinstance(spec.get("library"), str):
        raise AgentError(f"{name}: its {SPEC_KEY} entry names no library", status=2)
    return spec


def loaded_delegate(module, spec):
    """The delegate ``spec`` names, loaded; exit 3 naming the library when this device lacks
    it or it does not load."""
    library = spec["library"]
    if not os.path.isfile(library):
        raise AgentError(f"the model runs on {spec.get('unit') or 'an NPU'} through the TFLite "
                         f"delegate {library}, which this device lacks: install it (NXP's VX "
                         "delegate comes with the i.MX BSP's tensorflow-lite packages) or "
                         "deploy a CPU candidate", status=3)
    _check_library(library)
    options = {str(k): str(v) for k, v in (spec.get("options") or {}).items()}
    try:
        return module.load_delegate(library, options)
    except Exception as exc:  # noqa: BLE001 - the loader raises ValueError/OSError/RuntimeError
        raise AgentError(f"the TFLite delegate {library} did not load: {one_line(exc)}",
                         status=3) from None


def _check_library(library):
    """Exit 3 unless ``library`` loads and exports TFLite's external delegate entry point."""
    problem = runtimes.delegate_problem(library)
    if problem is not None:
        raise AgentError(f"the TFLite delegate {library} did not load: {problem}", status=3)


def interpreter_for(path, threads, defaults=True):
    """(interpreter, LiteRT module, delegate spec or None), tensors allocated; ``defaults``
    False: without LiteRT's default (XNNPACK) delegate where this LiteRT can say so."""
    module = runtimes.import_module(*MODULES)
    spec = delegate_spec(path)
    delegates = [loaded_delegate(module, spec)] if spec else []
    kind = getattr(module, "OpResolverType", None)
    extra = {} if defaults or kind is None else {
        "experimental_op_resolver_type": kind.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    interpreter = module.Interpreter(model_path=path, num_threads=threads,
                                     experimental_delegates=delegates or None, **extra)
    interpreter.allocate_tensors()
    return interpreter, module, spec


def load(path, threads):
    """A LiteRT interpreter (ai_edge_litert, else tflite_runtime) on random inputs, through
    the external delegate its companion JSON names."""
    np = runtimes.numpy()
    interpreter, module, spec = interpreter_for(path, threads)
    fed(np, interpreter)
    versions = {"tflite": str(version_of(module))}
    versions.update({"delegate": os.path.basename(spec["library"])} if spec else {})
    return observe.Loaded(interpreter.invoke,
                          lambda: dict(tflite_observed(interpreter, path, threads, spec),
                                       versions=versions)), version_of(module)


#: Operator -> (the input holding its weights, the weight dimensions one output sums over).
WEIGHTED = {"CONV_2D": (1, slice(1, None)), "DEPTHWISE_CONV_2D": (1, slice(1, 3)),
            "CONV_3D": (1, slice(0, 4)), "FULLY_CONNECTED": (1, slice(-1, None)),
            "BATCH_MATMUL": (0, slice(-1, None))}
#: Operators whose data is not their first input (TRANSPOSE_CONV: output shape, weights, data).
DATA_INPUT = {"TRANSPOSE_CONV": 2}
#: What a ``.delegate.tflite`` with no companion JSON was made for (it runs without one).
UNNAMED_DELEGATE = "its delegate (no companion JSON names one)"


def tflite_observed(interpreter, path, threads, spec):
    """Each operator of a loaded interpreter and the unit that ran it: a delegate partition's
    (LiteRT's default XNNPACK runs on the CPU; a model made for an external delegate is read
    on an interpreter without the default, as ``delegate`` reads it, so each partition is that
    delegate's) or the CPU's builtin kernels; its precision from its tensors' types."""
    if spec and getattr(runtimes.import_module(*MODULES), "OpResolverType", None) is None:
        raise AgentError("this LiteRT cannot load a model without its default delegate, so "
                         "which partitions are the external delegate's cannot be told")
    reader = interpreter_for(path, threads, defaults=False)[0] if spec else interpreter
    taken = delegated(reader)
    if not taken["listed"]:
        raise AgentError("this LiteRT lists no operators")
    unit = (spec.get("unit") or os.path.basename(spec["library"])) if spec else "CPU"
    kernel = os.path.basename(spec["library"]) if spec else "XNNPACK"
    tensors = {t["index"]: t for t in reader.get_tensor_details()}
    layers = [_observed_op(op, tensors, (unit, kernel) if op["index"] in taken["indices"]
                           else ("CPU", "builtin")) for op in taken["ops"]]
    unnamed = UNNAMED_DELEGATE if path.endswith(DELEGATE_SUFFIX) else ""
    return {"method": "LiteRT's operators and the delegate partitions that replaced them "
                      "(precision: each operator's data and weight types)", "layers": layers,
            "made_for": unit if spec else unnamed}


def _observed_op(op, tensors, where):
    found = [tensors.get(t) if t >= 0 else None for t in op["inputs"]]
    kinds = [str(getattr(t["dtype"], "__name__", t["dtype"])) if t else "?" for t in found]
    data = DATA_INPUT.get(op["op_name"], 0)
    precision = kinds[data] if len(kinds) > data else "?"
    weights = WEIGHTED.get(op["op_name"], (1, None))[0]
    if precision.startswith("float") and len(kinds) > weights and kinds[weights] == "int8":
        precision = "i8"  # dynamic range: float in, int8 weights, quantized on the fly
    outs = [tensors.get(t) for t in op["outputs"] if t >= 0]
    out = [int(d) for d in outs[0]["shape"]] if outs and outs[0] else []
    # a fused operator's output names every op fused in it, ";"-joined: the first names it
    name = outs[0]["name"].split(";")[0] if outs and outs[0] else str(op["index"])
    return observe.layer(name, op["op_name"], where[0], precision, where[1],
                         _tflite_macs(op["op_name"], found, out))


def _tflite_macs(op, found, out):
    if op == "TRANSPOSE_CONV" and len(found) > 2 and found[1] and found[2]:
        # weights [O, kh, kw, I]: each input element feeds O x kh x kw outputs
        shape = [int(d) for d in found[1]["shape"]]
        return observe.product_macs([int(d) for d in found[2]["shape"]],
                                    observe.count(shape[:3]))
    at, dims = WEIGHTED.get(op, (None, None))
    if at is None or len(found) <= at or not found[at]:
        return 0
    return observe.product_macs(out, observe.count([int(d) for d in found[at]["shape"]][dims]))


def fed(np, interpreter):
    """Random inputs set on every input of ``interpreter``."""
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               runtimes.random_input(np, list(detail["shape"]), detail["dtype"]))


def cmd_delegate(args):
    """Which operators a ``.delegate.tflite`` model's delegate took (``delegated``, on an
    interpreter without LiteRT's default XNNPACK delegate, so every partition is the named
    delegate's) and its median time as ``bench`` loads it."""
    if args.runs < 1 or args.threads < 1:
        raise AgentError("--runs and --threads must be >= 1", status=2)
    runtimes.model_runtime(args.model)
    if delegate_spec(args.model) is None:
        raise AgentError(f"{args.model} names no delegate (no companion JSON)", status=2)
    alone, _, spec = interpreter_for(args.model, args.threads, defaults=False)
    interpreter, module, _ = interpreter_for(args.model, args.threads)
    fed(runtimes.numpy(), interpreter)
    times = [timing.elapsed_ms(interpreter.invoke)[1] for _ in range(args.runs + 2)][2:]
    said = {k: v for k, v in delegated(alone).items() if k not in ("ops", "indices")}
    return dict(said, runtime=NAME, runtime_version=version_of(module),
                library=spec["library"], runs=args.runs, p50_ms=timing.percentile(times, 50),
                device=info.device_info())


#: The agent's commands this runtime adds: (name, function, default --runs, default --threads).
COMMANDS = (("delegate", cmd_delegate, 20, 1),)


def delegated(interpreter):
    """The operators each delegate partition (a ``DELEGATE`` node) of ``interpreter`` took,
    in model order, and those left to the CPU kernels; ``listed`` False when this LiteRT lists
    no nodes (then nothing can be said); ``ops`` the operators, ``indices`` those taken."""
    try:
        nodes = [dict(op, inputs=[int(t) for t in op["inputs"]],
                      outputs=[int(t) for t in op["outputs"]])
                 for op in interpreter._get_ops_details()]
    except Exception:  # noqa: BLE001 - a private API: absent or changed in some releases
        nodes = []
    parts = [op for op in nodes if op["op_name"] == "DELEGATE"]
    plain = [op for op in nodes if op["op_name"] != "DELEGATE"]
    producers = {t: op for op in plain for t in op["outputs"]}
    taken = set()
    for part in parts:
        taken |= _covered(part, producers)
    return {"listed": bool(nodes), "partitions": len(parts), "model_ops": len(plain),
            "taken": [op["op_name"] for op in plain if op["index"] in taken],
            "cpu": [op["op_name"] for op in plain if op["index"] not in taken],
            "ops": plain, "indices": taken}


def _covered(part, producers):
    """Indices of the nodes a partition replaced: producers reached walking back from its
    outputs, stopping at its inputs."""
    stop, seen, stack = set(part["inputs"]), set(), list(part["outputs"])
    while stack:
        tensor = stack.pop()
        op = producers.get(tensor)
        if tensor in stop or op is None or op["index"] in seen:
            continue
        seen.add(op["index"])
        stack.extend(t for t in op["inputs"] if t >= 0)
    return seen


def version_of(module):
    """The installed version of a LiteRT module's distribution."""
    for dist in ("ai-edge-litert", "tflite-runtime", "tensorflow"):
        try:
            if module.__name__.split(".")[0].replace("_", "-") == dist:
                return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"
