"""Per-layer time of one artifact, measured on this host by the runtime that runs it.

* ONNX (``.onnx``): onnxruntime's profiler, per node, scaled to the optimized whole-model
  median (``partition.cost.measure_costs``).
* OpenVINO IR (``.xml`` + ``.bin``): the CPU plugin's performance counters (PERF_COUNT), the
  median real time per executed node, scaled to the median of an unprofiled compile.
* TFLite (``.tflite``, NNAPI-ready ones too, run here on the CPU): LiteRT's Python API has no
  per-operator profiler, so the time is derived from prefixes: the model cut after every
  operator is timed, in interleaved rounds, and an operator costs the difference between the
  medians of consecutive prefixes (clamped at 0), scaled to the whole-model median.

Random inputs: float inputs standard normal, everything else zeros; unknown dims 1.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from edge import progress
from edge.errors import UsageError, first_line

__all__ = ["LayerProfile", "LayerTime", "measure_layers", "measure_layers_on_device"]

#: TFLite: most prefixes timed; more operators are grouped into this many consecutive runs.
MAX_PREFIXES = 128
#: TFLite: fewest prefixes worth timing; a model that allows fewer is refused.
MIN_PREFIXES = 8
#: TFLite: bytes the prefix interpreters held at once may take (weights, about twice).
PREFIX_BUDGET_BYTES = 1 << 30
#: TFLite: seconds the timed rounds may take; fewer rounds (not fewer than MIN_ROUNDS) if more.
ROUNDS_BUDGET_S = 15.0
MIN_ROUNDS = 5
WARMUP = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerTime:
    """One layer's share of an inference (``detail``: the kernel or operator range, if any)."""

    name: str
    op: str
    ms: float
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerProfile:
    """Per-layer times of one artifact, slowest first; they sum to ``total_ms``."""

    runtime: str
    method: str
    total_ms: float
    layers: tuple[LayerTime, ...]


def measure_layers(path: Path, *, threads: int = 1, runs: int = 20) -> LayerProfile:
    """Measure the time per layer of an .onnx, OpenVINO .xml or .tflite file on this host."""
    path = Path(path)
    if threads < 1 or runs < 1:
        raise UsageError(f"threads ({threads}) and runs ({runs}) must be at least 1")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    backend = _BACKENDS.get(path.suffix.lower())
    if backend is None:
        raise UsageError(f"{path.name}: no per-layer timing for '{path.suffix}' files; "
                         f"choose one of {', '.join(_BACKENDS)}")
    return backend(path, threads, runs)


def _profile(runtime: str, method: str, total_ms: float,
             layers: Sequence[LayerTime]) -> LayerProfile:
    return LayerProfile(runtime=runtime, method=method, total_ms=total_ms,
                        layers=tuple(sorted(layers, key=lambda layer: -layer.ms)))


def _scaled(raw: Sequence[float], whole_ms: float) -> list[float]:
    """``raw`` scaled to sum to ``whole_ms`` (all zeros when they sum to 0)."""
    total = sum(raw)
    return [ms * whole_ms / total if total > 0 else 0.0 for ms in raw]


def _random(np: Any, rng: Any, shape: Sequence[Any], dtype: Any) -> Any:
    """Standard normal for float, zeros otherwise; dims that are not positive ints become 1."""
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(dims).astype(dtype)
    return np.zeros(dims, dtype)


def _threads(threads: int) -> str:
    return f"{threads} thread{'s' if threads > 1 else ''}"


# ---------------------------------------------------------------- ONNX Runtime
def _onnx(path: Path, threads: int, runs: int) -> LayerProfile:
    from partition.cost import measure_costs
    from partition.graph import load_named

    costs = measure_costs(path, threads=threads, runs=runs)
    ops = {node.name: node.op_type for node in load_named(path).graph.node}
    layers = [LayerTime(name=name, op=ops.get(name, "?"), ms=ms) for name, ms in costs.items()]
    method = (f"onnxruntime CPU profiler ({_threads(threads)}): mean kernel time per node over "
              f"{runs} runs without graph optimizations, scaled to the median of {runs} runs "
              "of the optimized model")
    return _profile(f"onnxruntime {version('onnxruntime')} CPU", method, sum(costs.values()),
                    layers)


def measure_layers_on_device(path: Path, device: Any, *, threads: int = 1,
                             runs: int = 20) -> LayerProfile:
    """Per-layer time of an .onnx, .tflite or OpenVINO .xml artifact measured ON a device (an
    opened ``devices.deploy.Device``) by its agent: onnxruntime's profiler there, the TFLite
    operator prefixes (built here) timed there in interleaved rounds, or the OpenVINO CPU
    plugin's performance counters there."""
    from partition.cost import measure_costs_on_device
    from partition.graph import load_named

    path = Path(path)
    if path.suffix.lower() == ".tflite":
        return _tflite(path, threads, runs, _device_timer(device))
    if path.suffix.lower() == ".xml":
        return _openvino_on_device(path, device, threads, runs)
    if path.suffix.lower() != ".onnx":
        raise UsageError(f"{path.name}: per-layer times on the device are measured for ONNX "
                         "Runtime, TFLite and OpenVINO artifacts")
    costs = measure_costs_on_device(path, device, threads=threads, runs=runs)
    ops = {node.name: node.op_type for node in load_named(path).graph.node}
    layers = [LayerTime(name=name, op=ops.get(name, "?"), ms=ms) for name, ms in costs.items()]
    where = device.transport.label
    method = (f"measured ON {where} by the edge agent with onnxruntime's profiler "
              f"({_threads(threads)}): mean kernel time per node over {runs} runs without graph "
              "optimizations, scaled to the median of the optimized model there")
    return _profile(f"onnxruntime on {where}", method, sum(costs.values()), layers)


def _device_timer(device: Any) -> _Timer:
    """Times the prefixes ON the device: files pushed, interleaved rounds run by its agent."""
    import tempfile

    from devices.deploy import time_models_on_device

    def timer(contents: Sequence[bytes], threads: int, runs: int
              ) -> tuple[list[float], int, str, str]:
        with tempfile.TemporaryDirectory(prefix="edge-layers-") as tmp:
            files = []
            for k, content in enumerate(contents):
                files.append(Path(tmp) / f"prefix{k}.tflite")
                files[-1].write_bytes(content)
            reply = time_models_on_device(device, files, threads=threads, rounds=runs,
                                          budget_s=ROUNDS_BUDGET_S * 4)
        where = reply["where"]
        return (list(map(float, reply["medians_ms"])), int(reply["rounds"]),
                f"tflite {reply.get('runtime_version', '')} on {where}".replace("  ", " "),
                f"timed ON {where} by the edge agent with the device's TFLite runtime "
                f"({_threads(threads)})")
    return timer


# ---------------------------------------------------------------- OpenVINO
def _openvino(path: Path, threads: int, runs: int) -> LayerProfile:
    import numpy as np
    import openvino as ov

    if not path.with_suffix(".bin").is_file():
        raise UsageError(f"{path.with_suffix('.bin')} is missing: an OpenVINO IR needs its "
                         ".bin beside the .xml")
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
              "PERFORMANCE_HINT": "LATENCY"}
    plain = core.compile_model(str(path), "CPU", config).create_infer_request()
    profiled = core.compile_model(str(path), "CPU", config | {"PERF_COUNT": True}
                                  ).create_infer_request()
    feeds = [_random(np, np.random.default_rng(0),
                     [d.get_length() if d.is_static else 1 for d in port.get_partial_shape()],
                     port.get_element_type().to_dtype()) for port in plain.model_inputs]
    for request in (plain, profiled):
        for i, value in enumerate(feeds):
            request.set_input_tensor(i, ov.Tensor(value))
    whole, nodes = _openvino_rounds(plain, profiled, runs)
    names = [n for n in nodes if statistics.median(nodes[n][2]) > 0]
    scaled = _scaled([statistics.median(nodes[n][2]) for n in names], whole)
    layers = [LayerTime(name=n, op=nodes[n][0], detail=nodes[n][1], ms=ms)
              for n, ms in zip(names, scaled, strict=True)]
    method = (f"OpenVINO CPU performance counters (PERF_COUNT, {_threads(threads)}, f32 "
              f"precision hint as edge runs it): median real time per executed node over "
              f"{runs} runs, scaled to the median of {runs} unprofiled runs")
    return _profile(f"OpenVINO {version('openvino')} CPU", method, whole, layers)


def _openvino_on_device(path: Path, device: Any, threads: int, runs: int) -> LayerProfile:
    from devices.deploy import perf_on_device

    reply = perf_on_device(device, path, threads=threads, runs=runs)
    nodes = {name: n for name, n in reply["nodes"].items() if float(n["ms"]) > 0}
    scaled = _scaled([float(n["ms"]) for n in nodes.values()], float(reply["whole_ms"]))
    layers = [LayerTime(name=name, op=n["op"], detail=n["kernel"], ms=ms)
              for (name, n), ms in zip(nodes.items(), scaled, strict=True)]
    where = reply["where"]
    method = (f"measured ON {where} by the edge agent from the OpenVINO CPU performance "
              f"counters (PERF_COUNT, {_threads(threads)}, f32 precision hint): median real "
              f"time per executed node over {runs} runs, scaled to the median of {runs} "
              "unprofiled runs there")
    return _profile(f"OpenVINO {reply.get('runtime_version', '')} on {where}", method,
                    float(reply["whole_ms"]), layers)


def _openvino_rounds(plain: Any, profiled: Any,
                     runs: int) -> tuple[float, dict[str, tuple[str, str, list[float]]]]:
    """Whole-model median ms, and node -> (type, kernel, real ms per run) of executed nodes."""
    for _ in range(WARMUP):
        plain.infer()
        profiled.infer()
    times: list[float] = []
    nodes: dict[str, tuple[str, str, list[float]]] = {}
    for _ in range(runs):
        with progress.hold():
            start = time.perf_counter()
            plain.infer()
            times.append((time.perf_counter() - start) * 1e3)
        profiled.infer()
        for info in profiled.get_profiling_info():
            if info.status.name != "EXECUTED":
                continue
            entry = nodes.setdefault(info.node_name, (info.node_type, info.exec_type, []))
            entry[2].append(info.real_time.total_seconds() * 1e3)
    return statistics.median(times), nodes


# ---------------------------------------------------------------- TFLite (LiteRT)
@dataclass(frozen=True, kw_only=True, slots=True)
class _Step:
    """Operators [start, end) of the main subgraph, timed as one step."""

    start: int
    end: int
    name: str
    op: str


#: Times model contents in interleaved rounds: (contents, threads, runs) -> (medians, rounds,
#: runtime label, where it ran).
_Timer = Callable[[Sequence[bytes], int, int], tuple[list[float], int, str, str]]


def _host_timer(contents: Sequence[bytes], threads: int, runs: int
                ) -> tuple[list[float], int, str, str]:
    medians, rounds = _tflite_rounds(contents, threads, runs)
    return (medians, rounds, f"LiteRT {version('ai-edge-litert')} CPU",
            f"timed with the LiteRT interpreter ({_threads(threads)}, default XNNPACK delegate)")


def _tflite(path: Path, threads: int, runs: int, timer: _Timer = _host_timer) -> LayerProfile:
    from ai_edge_litert.tools import flatbuffer_utils as fb

    model = fb.read_model(str(path))
    graph = model.subgraphs[0]
    if not graph.operators:
        raise UsageError(f"{path.name}: the model has no operators to time")
    steps = _tflite_steps(model, fb, _prefix_limit(path))
    contents = [_prefix(model, fb, 0)] + [_prefix(model, fb, s.end) for s in steps[:-1]]
    medians, rounds, runtime, how = timer([*contents, path.read_bytes()], threads, runs)
    deltas = [max(0.0, b - a) for a, b in itertools.pairwise(medians)]
    scaled = _scaled(deltas, medians[-1])
    layers = [LayerTime(name=s.name, op=s.op, ms=ms,
                        detail=f"op {s.start}" if s.end == s.start + 1
                        else f"ops {s.start}-{s.end - 1}")
              for s, ms in zip(steps, scaled, strict=True)]
    grouped = len(steps) < len(graph.operators)
    method = ("derived from prefix timings (LiteRT has no per-operator profiler in Python): "
              f"the model cut after every {'group of operators' if grouped else 'operator'} "
              f"({len(steps)} prefixes{' of consecutive operators' if grouped else ''}) and "
              f"the whole model, {how} in {rounds} interleaved rounds; a layer's time is the "
              "difference between the medians of consecutive prefixes, clamped at 0 and scaled "
              "to the whole-model median")
    return _profile(runtime, method, medians[-1], layers)


def _prefix_limit(path: Path) -> int:
    """How many prefixes fit PREFIX_BUDGET_BYTES: one holds half the weights on average and
    XNNPACK packs a second copy, so about the file's size each."""
    limit = PREFIX_BUDGET_BYTES // max(path.stat().st_size, 1)
    if limit < MIN_PREFIXES:
        raise UsageError(f"{path.name}: {path.stat().st_size / 2**20:.0f} MB is too large to "
                         f"time by prefixes here (fewer than {MIN_PREFIXES} fit "
                         f"{PREFIX_BUDGET_BYTES >> 20} MB)")
    return min(MAX_PREFIXES, limit)


def _tflite_steps(model: Any, fb: Any, limit: int) -> list[_Step]:
    """Every operator as a step, or at most ``limit`` runs of consecutive operators."""
    graph = model.subgraphs[0]
    n = len(graph.operators)
    ends = sorted({round(n * (i + 1) / limit) for i in range(limit)} if n > limit
                  else range(1, n + 1))
    steps = []
    for start, end in zip([0, *ends[:-1]], ends, strict=True):
        ops = graph.operators[start:end]
        codes = list(dict.fromkeys(_op_name(model, fb, op) for op in ops))
        steps.append(_Step(start=start, end=end, name=_output_name(graph, ops[-1]),
                           op="+".join(codes)))
    return steps


def _op_name(model: Any, fb: Any, op: Any) -> str:
    """The builtin operator's name (CONV_2D), or the custom code of a custom operator."""
    code = model.operatorCodes[op.opcodeIndex]
    if code.customCode:
        return bytes(code.customCode).decode(errors="replace")
    return fb.opcode_to_name(model, op.opcodeIndex) or "?"


def _output_name(graph: Any, op: Any) -> str:
    outputs = [i for i in op.outputs if i >= 0]
    if not outputs:
        return "(no output)"
    name = graph.tensors[outputs[0]].name
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _prefix(model: Any, fb: Any, end: int) -> bytes:
    """The model running only operators [0, end) of its main subgraph, their outputs exposed."""
    graph = model.subgraphs[0]
    saved = graph.operators, graph.outputs, model.buffers, model.signatureDefs
    ops = graph.operators[:end]
    produced = {i for op in ops for i in op.outputs if i >= 0}
    last = [i for i in ops[-1].outputs if i >= 0] if ops else list(graph.inputs)
    kept = [i for i in graph.outputs if i in produced and i not in last]
    try:
        graph.operators, graph.outputs, model.signatureDefs = ops, [*last, *kept], []
        model.buffers = _used_buffers(model, ops, fb)
        return bytes(fb.convert_object_to_bytearray(model))
    finally:
        graph.operators, graph.outputs, model.buffers, model.signatureDefs = saved


def _used_buffers(model: Any, ops: Sequence[Any], fb: Any) -> list[Any]:
    """The model's buffers with those no kept operator reads replaced by empty ones."""
    graph, others = model.subgraphs[0], model.subgraphs[1:]
    used = {graph.tensors[i].buffer for op in ops for i in op.inputs if i >= 0}
    used |= {t.buffer for g in others for t in g.tensors or ()}
    used |= {m.buffer for m in model.metadata or ()}
    return [b if k in used else fb.BufferT() for k, b in enumerate(model.buffers)]


def _tflite_rounds(contents: Sequence[bytes], threads: int,
                   runs: int) -> tuple[list[float], int]:
    """Median ms per model over interleaved rounds (each timed run follows an untimed one)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(0)
    interpreters = []
    for content in contents:
        try:
            interpreter = Interpreter(model_content=content, num_threads=threads)
            interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            raise UsageError(f"LiteRT cannot load a prefix of the model: {first_line(exc)}"
                             ) from None
        interpreters.append(interpreter)
    feeds = [_random(np, rng, d["shape"].tolist(), d["dtype"])
             for d in interpreters[-1].get_input_details()]
    for interpreter in interpreters:
        for detail, value in zip(interpreter.get_input_details(), feeds, strict=True):
            interpreter.set_tensor(detail["index"], value)
    times = [[t] for t in _one_round(interpreters, WARMUP)]
    per_round = 2 * sum(row[0] for row in times) / 1e3
    rounds = min(runs, max(MIN_ROUNDS, int(ROUNDS_BUDGET_S / max(per_round, 1e-9))))
    for _ in range(rounds - 1):
        for row, t in zip(times, _one_round(interpreters, 1), strict=True):
            row.append(t)
    return [statistics.median(row) for row in times], rounds


def _one_round(interpreters: Sequence[Any], untimed: int) -> list[float]:
    """Ms of one timed invoke per interpreter, each after ``untimed`` invokes."""
    out = []
    with progress.hold():
        for interpreter in interpreters:
            for _ in range(untimed):
                interpreter.invoke()
            start = time.perf_counter()
            interpreter.invoke()
            out.append((time.perf_counter() - start) * 1e3)
    return out


_BACKENDS: dict[str, Callable[[Path, int, int], LayerProfile]] = {
    ".onnx": _onnx, ".xml": _openvino, ".tflite": _tflite}
