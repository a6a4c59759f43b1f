"""Runtimes on the device: which file each runs, importing them, their versions, loading a
model with random inputs (a zero-argument callable that runs it once)."""

import os

from .errors import AgentError, one_line

RUNTIME_MODULES = {
    "onnxruntime": ("onnxruntime",),
    "tflite": ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"),
    "openvino": ("openvino",),
}
SUFFIX_RUNTIME = {".onnx": "onnxruntime", ".tflite": "tflite", ".xml": "openvino"}
DISTRIBUTIONS = (("onnxruntime", ("onnxruntime",)),
                 ("tflite", ("ai-edge-litert", "tflite-runtime")),
                 ("openvino", ("openvino",)))


def model_runtime(model):
    """The runtime that runs ``model`` (by suffix); a missing file or unknown suffix is exit 2."""
    if not os.path.isfile(model):
        raise AgentError(f"model {model} not found", status=2)
    runtime = SUFFIX_RUNTIME.get(os.path.splitext(model)[1])
    if runtime is None:
        raise AgentError(f"no runtime for {model}", status=2)
    return runtime


def threads_for(requested):
    """0: all of the device's cores; else at most that many."""
    cores = os.cpu_count() or 1
    return min(requested, cores) if requested > 0 else cores


def load(model, threads):
    """(run, runtime version) for ``model``: its runtime imported first (import time is not
    load time), then loaded; any load failure is one line (exit 3)."""
    runtime = model_runtime(model)
    numpy()
    import_module(*RUNTIME_MODULES[runtime])
    try:
        return LOADERS[runtime](model, threads)
    except AgentError:
        raise
    except Exception as exc:  # noqa: BLE001 - any runtime's load failure is one line
        raise AgentError(f"{runtime} cannot load {model}: {one_line(exc)}") from None


def numpy():
    """numpy, or a clear error."""
    try:
        import numpy
    except ImportError:
        raise AgentError("numpy is not installed on the device") from None
    return numpy


def import_module(*names):
    """The first of ``names`` that imports, or 'runtime not installed: pip install ...'."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    package = names[0].split(".")[0].replace("ai_edge_litert", "ai-edge-litert")
    raise AgentError("runtime not installed on the device: pip install " + package)


def version_of(module):
    """The installed version of a LiteRT module's distribution."""
    import importlib.metadata as md

    for dist in ("ai-edge-litert", "tflite-runtime", "tensorflow"):
        try:
            if module.__name__.split(".")[0].replace("_", "-") == dist:
                return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def runtime_versions():
    """Runtime name -> version for every runtime installed here."""
    import importlib.metadata as md

    found = {}
    for runtime, dist_names in DISTRIBUTIONS:
        for dist in dist_names:
            try:
                found[runtime] = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
    return found


def random_input(np, shape, dtype):
    """Uniform [0, 1) floats, 0/1 integers (valid ids, masks, flags) or bools (seed 0);
    symbolic dims as 1, and a 0-d input stays a 0-d array (never a numpy scalar)."""
    shape = [dim(d) for d in shape]
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(0)
    if dtype.kind in "iub":
        return np.asarray(rng.integers(0, 2, size=shape)).astype(dtype)
    return np.asarray(rng.random(shape, dtype=np.float32)).astype(dtype)


def dim(value):
    """A concrete dimension: symbolic or unknown (-1, None, 'batch') becomes 1."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        return 1
    return value if value > 0 else 1


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


def load_onnxruntime(path, threads):
    """An ONNX Runtime session and a closure running it on random inputs."""
    np = numpy()
    ort = import_module("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: random_input(np, i.shape, ort_dtype(np, i.type))
             for i in session.get_inputs()}
    return (lambda: session.run(None, feeds)), ort.__version__


def load_tflite(path, threads):
    """A LiteRT interpreter (ai_edge_litert, else tflite_runtime) on random inputs."""
    np = numpy()
    module = import_module(*RUNTIME_MODULES["tflite"])
    interpreter = module.Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               random_input(np, list(detail["shape"]), detail["dtype"]))
    return interpreter.invoke, version_of(module)


#: Where edge's IR records the precision it computes in (targets/openvino.py writes it).
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
    return [random_input(np, list(p.get_partial_shape().get_min_shape()),
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


def load_openvino(path, threads):
    """An OpenVINO CPU compiled model on random inputs, computing in the IR's precision."""
    np = numpy()
    ov = import_module("openvino")
    core = ov.Core()
    compiled = openvino_compiled(core, core.read_model(path), threads)
    request = compiled.create_infer_request()
    feeds = openvino_feeds(np, compiled.inputs)
    return (lambda: request.infer(feeds)), ov.__version__


LOADERS = {"onnxruntime": load_onnxruntime, "tflite": load_tflite, "openvino": load_openvino}
