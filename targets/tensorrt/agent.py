"""TensorRT on the device, for edge's agent: build an engine from the ``.trt.onnx`` with the
device's own TensorRT (the flags in its companion ``.npz``), cache it in the release folder keyed
by the TensorRT version and GPU name, check its outputs against the reference outputs the
companion carries, and hand back a closure running it once (inputs copied in, outputs out).

An engine runs only on the GPU and TensorRT version that built it, so edge ships the ONNX and
builds here. Python 3.8, the standard library, numpy and tensorrt only; device memory through
the libcudart TensorRT links (ctypes): no pycuda. edge does not install TensorRT.
"""

import ctypes
import ctypes.util
import glob
import hashlib
import importlib
import json
import os
import re
import sys

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import runtimes
    from devices.agent.errors import AgentError, one_line

NAME = "tensorrt"
SUFFIXES = (".trt.onnx",)
MODULES = ("tensorrt",)
DISTRIBUTIONS = ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-cu11")
#: How to install it (agent's "runtime not installed" message): not from PyPI on a device.
MISSING = ("TensorRT comes with JetPack on a Jetson (apt install python3-libnvinfer) and with "
           "NVIDIA's TensorRT packages or containers on a PC or cloud GPU")
#: The agent's commands this runtime adds: none (``bench`` builds, checks and times it).
COMMANDS = ()
#: The companion's suffix: build settings and reference inputs/outputs (numpy .npz).
COMPANION = ".npz"
#: The oldest TensorRT whose tensor API (``execute_async_v3``) this loader uses (JetPack 5+).
MIN_VERSION = (8, 5)
ENGINE_SUFFIX = ".engine"
_MB = 1 << 20
_H2D, _D2H = 1, 2  # cudaMemcpyKind
_KEEP = []  # type: list  # the loggers and runtimes of the engines loaded in this process
_CUDART = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
           "libcudart.so.10.2")


def load(path, threads):
    """(run, TensorRT version): the engine built or reused, checked against the reference."""
    np = runtimes.numpy()
    trt = tensorrt_module()
    cuda = Cuda.open()
    settings, samples = read_companion(np, path)
    engine = cached_engine(trt, cuda, path, settings)
    session = Session(np, trt, cuda, engine)
    check_outputs(np, session, settings, samples)
    return session.run_once, trt.__version__


def tensorrt_module():
    """The tensorrt module (8.5 or newer), or AgentError saying what is missing."""
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError as exc:
        raise AgentError("tensorrt: TensorRT's Python bindings are not installed (" +
                         one_line(exc) + "): " + MISSING) from None
    if version_tuple(trt.__version__) < MIN_VERSION:
        raise AgentError(f"tensorrt: TensorRT {trt.__version__} is too old: edge's loader needs "
                         f"{MIN_VERSION[0]}.{MIN_VERSION[1]} or newer (JetPack 5 or newer)")
    return trt


def version_tuple(text):
    """(major, minor) of a version string such as 10.3.0.30."""
    numbers = [int(n) for n in re.findall(r"\d+", str(text))[:2]]
    return tuple(numbers + [0] * (2 - len(numbers)))


# ---------------------------------------------------------------- CUDA runtime, through ctypes


class Cuda:
    """The few CUDA runtime calls an engine needs: memory, copies, a stream, the GPU's name."""

    def __init__(self, lib):
        self.lib = lib
        for name in ("cudaMalloc", "cudaMemcpy", "cudaStreamCreate", "cudaStreamSynchronize",
                     "cudaGetDeviceCount"):
            getattr(lib, name).restype = ctypes.c_int
        # CUDA 12 headers map cudaGetDeviceProperties to its _v2; both start with char name[256]
        self.properties = getattr(lib, "cudaGetDeviceProperties_v2", None) or \
            lib.cudaGetDeviceProperties
        self.properties.restype = ctypes.c_int
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p

    @classmethod
    def open(cls):
        """The CUDA runtime library with a GPU behind it, or AgentError naming what is absent."""
        cuda = cls(_cudart())
        count = ctypes.c_int(0)
        status = cuda.lib.cudaGetDeviceCount(ctypes.byref(count))
        if status != 0 or count.value < 1:
            reason = cuda.error(status) if status else "no device"
            raise AgentError(f"tensorrt: no NVIDIA GPU is usable here (cudaGetDeviceCount: "
                             f"{reason}; is the NVIDIA driver loaded, /dev/nvidia0 or "
                             "/dev/nvhost-* present?)")
        return cuda

    def error(self, status):
        return (self.lib.cudaGetErrorString(status) or b"?").decode(errors="replace")

    def check(self, status, call):
        if status != 0:
            raise AgentError(f"tensorrt: {call} failed: {self.error(status)}")

    def gpu_name(self):
        """The name of GPU 0 (cudaDeviceProp starts with char name[256])."""
        props = ctypes.create_string_buffer(8192)
        self.check(self.properties(props, 0), "cudaGetDeviceProperties")
        return props.raw[:256].split(b"\0", 1)[0].decode(errors="replace").strip()

    def malloc(self, size):
        pointer = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(size, 1))),
                   "cudaMalloc")
        return pointer.value

    def copy(self, dst, src, size, kind):
        self.check(self.lib.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src),
                                       ctypes.c_size_t(size), kind), "cudaMemcpy")

    def new_stream(self):
        stream = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
        return stream.value or 0

    def sync(self, stream):
        self.check(self.lib.cudaStreamSynchronize(ctypes.c_void_p(stream)),
                   "cudaStreamSynchronize")


def _cudart():
    """libcudart, from the system or from NVIDIA's pip wheels beside tensorrt."""
    found = ctypes.util.find_library("cudart")
    names = ([found] if found else []) + list(_CUDART) + _wheel_cudart()
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise AgentError("tensorrt: the CUDA runtime library (libcudart.so) is not found: install "
                     "the CUDA runtime that came with TensorRT (JetPack, or NVIDIA's packages)")


def _wheel_cudart():
    """libcudart shipped by NVIDIA's pip wheels (nvidia/cuda_runtime/lib)."""
    found = []
    for root in sys.path:
        found += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_runtime", "lib",
                                               "libcudart.so*")))
    return found


# ---------------------------------------------------------------- the companion


def companion_path(path):
    """The companion beside ``path``: ``X.npz`` for ``X.trt.onnx``."""
    names = [os.path.splitext(path)[0] + COMPANION]
    if path.endswith(SUFFIXES[0]):
        names.insert(0, path[:-len(SUFFIXES[0])] + COMPANION)
    for name in names:
        if os.path.isfile(name):
            return name
    raise AgentError(f"tensorrt: the build settings and reference outputs of {path} "
                     f"({' or '.join(names)}) are missing", status=2)


def read_companion(np, path):
    """(settings dict, samples): samples is [(inputs list, outputs list)] of the reference."""
    name = companion_path(path)
    try:
        with np.load(name, allow_pickle=False) as data:
            settings = json.loads(str(data["settings"]))
            inputs = [data[f"input_{i}"] for i in range(len(settings["inputs"]))]
            outputs = [data[f"output_{i}"] for i in range(len(settings["outputs"]))]
    except (OSError, ValueError, KeyError) as exc:
        raise AgentError(f"tensorrt: cannot read {name}: {one_line(exc)}", status=2) from None
    count = len(inputs[0]) if inputs else 0
    samples = [([a[s] for a in inputs], [a[s] for a in outputs]) for s in range(count)]
    return settings, samples


# ---------------------------------------------------------------- the engine, built or reused


def engine_path(path, trt_version, gpu, settings):
    """The cached engine: keyed by TensorRT's version, the GPU, the model and its settings."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    key = "\n".join([trt_version, gpu, digest.hexdigest(), json.dumps(settings["build"],
                                                                      sort_keys=True)])
    stem = path[:-len(SUFFIXES[0])] if path.endswith(SUFFIXES[0]) else os.path.splitext(path)[0]
    return f"{stem}.{hashlib.sha256(key.encode()).hexdigest()[:16]}{ENGINE_SUFFIX}"


def cached_engine(trt, cuda, path, settings):
    """The engine: the cached one when its key matches, else built and cached."""
    logger = trt.Logger(trt.Logger.ERROR)
    runtime = trt.Runtime(logger)
    _KEEP.append((logger, runtime))  # an engine must not outlive its runtime (older bindings)
    target = engine_path(path, trt.__version__, cuda.gpu_name(), settings)
    plan = _read(target)
    engine = runtime.deserialize_cuda_engine(plan) if plan else None
    if engine is None:
        plan = build_plan(trt, logger, path, settings["build"], settings)
        _replace_engines(target, plan)
        engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise AgentError(f"tensorrt: the engine built from {path} does not deserialize")
    return engine


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _replace_engines(target, plan):
    """Write the engine atomically, then drop the model's engines of other keys."""
    stem = target[:-(len(ENGINE_SUFFIX) + 17)]
    for old in glob.glob(glob.escape(stem) + ".*" + ENGINE_SUFFIX):
        if old != target and re.fullmatch(r"[0-9a-f]{16}", old[len(stem) + 1:-len(ENGINE_SUFFIX)]):
            os.remove(old)
    partial = target + ".partial"
    with open(partial, "wb") as handle:
        handle.write(plan)
    os.replace(partial, target)


def build_plan(trt, logger, path, build, settings):
    """A serialized engine: the ONNX parsed, the precision flags and workspace set."""
    builder = trt.Builder(logger)
    _check_precision(builder, build)
    network = builder.create_network(_network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    with open(path, "rb") as handle:
        parsed = parser.parse(handle.read())
    if not parsed:
        errors = [str(parser.get_error(i).desc()) for i in range(parser.num_errors)]
        raise AgentError(f"tensorrt: its ONNX parser refused {os.path.basename(path)}: "
                         f"{'; '.join(errors[:3]) or 'no reason given'}")
    config = builder.create_builder_config()
    _configure(trt, config, build)
    _fix_shapes(builder, config, network, settings)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise AgentError(f"tensorrt: building the {settings.get('precision', '?')} engine "
                         "failed (TensorRT's log above has why)")
    return bytes(plan)


def _check_precision(builder, build):
    """Refuse a precision this GPU does not compute fast (a Maxwell Jetson Nano has no int8)."""
    for flag, attribute in (("INT8", "platform_has_fast_int8"), ("FP16", "platform_has_fast_fp16")):
        if flag in build.get("flags", ()) and not getattr(builder, attribute, True):
            raise AgentError(f"tensorrt: this GPU has no fast {flag.lower()} ({attribute} is "
                             "False): use another precision's artifact")


def _network_flags(trt):
    """EXPLICIT_BATCH before TensorRT 10 (always explicit, the flag deprecated, from 10)."""
    flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    if flag is None or version_tuple(trt.__version__) >= (10, 0):
        return 0
    return 1 << int(flag)


def _configure(trt, config, build):
    """Precision flags (TF32 off unless asked; none in TensorRT 11: typed networks), workspace."""
    for name in build.get("flags", ()):
        if hasattr(trt.BuilderFlag, name):
            config.set_flag(getattr(trt.BuilderFlag, name))
    for name in build.get("clear_flags", ()):
        if hasattr(trt.BuilderFlag, name):
            config.clear_flag(getattr(trt.BuilderFlag, name))
    workspace = int(build.get("workspace_mb", 1024)) * _MB
    if hasattr(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    else:
        config.max_workspace_size = workspace


def _fix_shapes(builder, config, network, settings):
    """An optimization profile pinning dynamic input dims to the reference sample's shape."""
    shapes = dict(zip(settings["inputs"], settings["shapes"]))
    dynamic = [network.get_input(i) for i in range(network.num_inputs)
               if any(d < 0 for d in network.get_input(i).shape)]
    if not dynamic:
        return
    profile = builder.create_optimization_profile()
    for tensor in dynamic:
        shape = tuple(shapes[tensor.name])
        profile.set_shape(tensor.name, shape, shape, shape)
    config.add_optimization_profile(profile)


# ---------------------------------------------------------------- running it


class Session:
    """An execution context with device buffers for every input and output."""

    def __init__(self, np, trt, cuda, engine):
        self.np, self.cuda, self.engine = np, cuda, engine
        self.context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        mode = trt.TensorIOMode.INPUT
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == mode]
        self.outputs = [n for n in names if engine.get_tensor_mode(n) != mode]
        self.dtypes = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in names}
        self.host = {}
        self.stream = cuda.new_stream()
        self.buffers = {}

    def feed(self, arrays):
        """Copy one sample's inputs (reference order) to the GPU and size the outputs."""
        for name, array in zip(self.inputs, arrays):
            array = self.np.ascontiguousarray(array, dtype=self.dtypes[name])
            self.context.set_input_shape(name, tuple(array.shape))
            self._bind(name, array.nbytes)
            self.host[name] = array
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            self.host[name] = self.np.empty(shape, self.dtypes[name])
            self._bind(name, self.host[name].nbytes)

    def _bind(self, name, size):
        if name not in self.buffers or self.buffers[name][1] < size:
            self.buffers[name] = (self.cuda.malloc(size), size)
        self.context.set_tensor_address(name, self.buffers[name][0])

    def run_once(self):
        """Inputs to the GPU, one inference, outputs back: what an application pays."""
        for name in self.inputs:
            array = self.host[name]
            self.cuda.copy(self.buffers[name][0], array.ctypes.data, array.nbytes, _H2D)
        if not self.context.execute_async_v3(self.stream):
            raise AgentError("tensorrt: execute_async_v3 failed")
        self.cuda.sync(self.stream)
        for name in self.outputs:
            array = self.host[name]
            self.cuda.copy(array.ctypes.data, self.buffers[name][0], array.nbytes, _D2H)
        return [self.host[name] for name in self.outputs]


def check_outputs(np, session, settings, samples):
    """Every reference sample run; AgentError naming the output that agrees least below its
    threshold. The session stays fed with the first sample (for timing)."""
    if not samples:
        raise AgentError("tensorrt: the companion holds no reference sample", status=2)
    order = [session.outputs.index(n) if n in session.outputs else i
             for i, n in enumerate(settings["outputs"])]
    agreed = [1.0] * len(settings["outputs"])
    for inputs, expected in reversed(samples):
        session.feed([inputs[settings["inputs"].index(n)] for n in session.inputs])
        got = session.run_once()
        for j, want in enumerate(expected):
            agreed[j] = min(agreed[j], agreement(np, got[order[j]], want))
    worst = min(range(len(agreed)), key=lambda j: agreed[j] - settings["thresholds"][j])
    if agreed[worst] < settings["thresholds"][worst]:
        raise AgentError(f"tensorrt: the {settings['precision']} engine's output "
                         f"{settings['outputs'][worst]} differs from the reference: agreement "
                         f"{agreed[worst]:.6f} < {settings['thresholds'][worst]:.6f} over "
                         f"{len(samples)} samples")
    return dict(zip(settings["outputs"], agreed))


def agreement(np, got, want):
    """Cosine of float outputs (1.0 both zero), else the share of equal elements; 0.0: shapes."""
    got, want = np.asarray(got), np.asarray(want)
    if got.size != want.size:
        return 0.0
    if want.dtype.kind != "f":
        return float(np.mean(got.reshape(-1) == want.reshape(-1))) if want.size else 1.0
    a, b = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return 0.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        return 1.0 if not np.any(a) and not np.any(b) else 0.0
    return float(np.dot(a, b) / norm)
