#!/usr/bin/env python3
"""edge's on-device agent: a standalone script (stdlib + numpy + one runtime) run by the
device's own python. It verifies and installs artifacts, switches releases atomically, and
benchmarks a model ON the device, printing one JSON document on stdout.

    python3 edge_agent.py probe
    python3 edge_agent.py install SRC DEST --sha256 HEX
    python3 edge_agent.py activate WORK_DIR RELEASE
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
    activate = sub.add_parser("activate")
    activate.add_argument("work_dir")
    activate.add_argument("release")
    activate.set_defaults(func=cmd_activate)
    bench = sub.add_parser("bench")
    bench.add_argument("model")
    bench.add_argument("--runs", type=int, default=50)
    bench.add_argument("--warmup", type=int, default=5)
    bench.add_argument("--threads", type=int, default=0)
    bench.set_defaults(func=cmd_bench)
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
    """Move an uploaded file into place only if its sha256 matches."""
    actual = sha256_file(args.src)
    if actual != args.sha256:
        os.unlink(args.src)
        raise AgentError(f"checksum mismatch for {args.src}: got {actual}", status=3)
    os.makedirs(os.path.dirname(args.dest) or ".", exist_ok=True)
    os.replace(args.src, args.dest)
    _fsync_dir(os.path.dirname(args.dest) or ".")
    return {"installed": args.dest, "sha256": actual}


def cmd_activate(args):
    """Point WORK_DIR/current at WORK_DIR/releases/RELEASE atomically (symlink + rename)."""
    if "/" in args.release or args.release in ("", ".", ".."):
        raise AgentError(f"bad release name {args.release!r}", status=2)
    target = os.path.join("releases", args.release)
    if not os.path.isdir(os.path.join(args.work_dir, target)):
        raise AgentError(f"release {args.release} is not installed", status=2)
    tmp = os.path.join(args.work_dir, f".current-{os.getpid()}")
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(args.work_dir, "current"))
    _fsync_dir(args.work_dir)
    return {"active": args.release}


def cmd_bench(args):
    """Load a model, warm up, time N runs; report percentiles, load time, peak RSS."""
    if args.runs < 1 or args.warmup < 0:
        raise AgentError("--runs must be >= 1 and --warmup >= 0", status=2)
    if not os.path.isfile(args.model):
        raise AgentError(f"model {args.model} not found", status=2)
    runtime = SUFFIX_RUNTIME.get(os.path.splitext(args.model)[1])
    if runtime is None:
        raise AgentError(f"no runtime for {args.model}", status=2)
    _numpy()
    _import(*RUNTIME_MODULES[runtime])  # import time is not load time
    cores = os.cpu_count() or 1
    threads = min(args.threads, cores) if args.threads > 0 else cores
    start = time.perf_counter()
    run, version = LOADERS[runtime](args.model, threads)
    load_ms = (time.perf_counter() - start) * 1e3
    for _ in range(args.warmup):
        run()
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        "runtime": runtime, "runtime_version": version, "runs": args.runs,
        "warmup": args.warmup, "threads": threads, "threads_requested": args.threads,
        "p50_ms": percentile(times, 50), "p90_ms": percentile(times, 90),
        "p99_ms": percentile(times, 99), "mean_ms": sum(times) / len(times),
        "load_ms": load_ms, "peak_rss_mb": peak_rss_mb(), "device": device_info(),
    }


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


def _fsync_dir(path):
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
