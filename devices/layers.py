"""Per-layer time of one artifact, measured by the runtime that runs it: on this host, or ON
a device by its edge agent (``device``: an opened ``devices.device.Device``).

* ONNX (``.onnx``): onnxruntime's profiler, per node (``devices.profiling.node_profile``),
  scaled to the optimized whole-model median.
* OpenVINO IR (``.xml`` + ``.bin``): the CPU plugin's performance counters (PERF_COUNT), the
  median real time per executed node, scaled to the median of an unprofiled compile timed in
  interleaved rounds beside it (``devices.profiling.openvino_counters``).
* TFLite (``.tflite``, NNAPI-ready ones too, run on the CPU): LiteRT's Python API has no
  per-operator profiler, so the time is derived from prefixes: the model cut after every
  operator is timed, all prefixes in interleaved rounds (``devices.measure``), and an operator
  costs the difference between the medians of consecutive prefixes (clamped at 0), scaled to
  the whole-model median.

Random inputs as the agent makes them.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from devices.device import Device, store
from devices.measure import Rounds, time_files_here, time_on_device
from devices.profiling import node_profile, openvino_counters
from edge.core.errors import UsageError
from edge.core.model import load_named, save_onnx_atomic
from edge.core.values import BenchResult

__all__ = ["LayerProfile", "LayerTime", "measure_layers"]

#: TFLite: most prefixes timed; more operators are grouped into this many consecutive runs.
MAX_PREFIXES = 128
#: TFLite: fewest prefixes worth timing; a model that allows fewer is refused.
MIN_PREFIXES = 8
#: TFLite: bytes the prefix interpreters held at once may take (weights, about twice).
PREFIX_BUDGET_BYTES = 1 << 30
#: TFLite: seconds the timed rounds may take here (on a device: four times as long); fewer
#: rounds (not fewer than MIN_ROUNDS) if the first round says more.
ROUNDS_BUDGET_S = 15.0
MIN_ROUNDS = 5


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


def measure_layers(path: Path, *, threads: int = 1, runs: int = 20,
                   device: Device | None = None) -> LayerProfile:
    """Measure the time per layer of an .onnx, OpenVINO .xml or .tflite file on this host, or
    ON ``device`` by its agent."""
    path = Path(path)
    if threads < 1 or runs < 1:
        raise UsageError(f"threads ({threads}) and runs ({runs}) must be at least 1")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    backend = _BACKENDS.get(path.suffix.lower())
    if backend is None:
        raise UsageError(f"{path.name}: no per-layer timing for '{path.suffix}' files; "
                         f"choose one of {', '.join(_BACKENDS)}")
    return backend(path, threads, runs, device)


def _profile(runtime: str, method: str, total_ms: float,
             layers: Sequence[LayerTime]) -> LayerProfile:
    return LayerProfile(runtime=runtime, method=method, total_ms=total_ms,
                        layers=tuple(sorted(layers, key=lambda layer: -layer.ms)))


def _scaled(raw: Sequence[float], whole_ms: float) -> list[float]:
    """``raw`` scaled to sum to ``whole_ms`` (all zeros when they sum to 0)."""
    total = sum(raw)
    return [ms * whole_ms / total if total > 0 else 0.0 for ms in raw]


def _threads(threads: int) -> str:
    return f"{threads} thread{'s' if threads > 1 else ''}"


def _where(device: Device | None) -> str:
    """How a method sentence names where it ran."""
    return "this host" if device is None else f"ON {device.label} by the edge agent"


# ---------------------------------------------------------------- ONNX Runtime
def _onnx(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
    with tempfile.TemporaryDirectory(prefix="edge-layers-") as tmp:
        named = Path(tmp) / path.name  # every node named: unnamed nodes' time is not lost
        save_onnx_atomic(load_named(path), named)
        measured = node_profile(named, threads=threads, runs=runs, device=device)
    names = list(measured.nodes)
    scaled = _scaled([measured.nodes[n] for n in names], measured.whole_ms)
    layers = [LayerTime(name=name, op=measured.ops.get(name, "?"), ms=ms)
              for name, ms in zip(names, scaled, strict=True)]
    runtime = (f"onnxruntime {measured.runtime_version} CPU" if device is None
               else f"onnxruntime on {device.label}")
    method = (f"measured {_where(device)} with the onnxruntime CPU profiler "
              f"({_threads(threads)}): mean kernel time per node over {runs} runs without graph "
              f"optimizations, scaled to the median of {runs} runs of the optimized model")
    return _profile(runtime, method, measured.whole_ms, layers)


# ---------------------------------------------------------------- OpenVINO
def _openvino(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
    if not path.with_suffix(".bin").is_file():
        raise UsageError(f"{path.with_suffix('.bin')} is missing: an OpenVINO IR needs its "
                         ".bin beside the .xml")
    reply = openvino_counters(path, threads=threads, runs=runs, device=device)
    runtime = (f"OpenVINO {reply['runtime_version']} CPU" if device is None
               else f"OpenVINO {reply['runtime_version']} on {device.label}")
    nodes = {name: n for name, n in reply["nodes"].items() if float(n["ms"]) > 0}
    scaled = _scaled([float(n["ms"]) for n in nodes.values()], float(reply["whole_ms"]))
    layers = [LayerTime(name=name, op=n["op"], detail=n["kernel"], ms=ms)
              for (name, n), ms in zip(nodes.items(), scaled, strict=True)]
    method = (f"measured {_where(device)} from the OpenVINO CPU performance counters "
              f"(PERF_COUNT, {_threads(threads)}, the precision hint the IR records, as edge "
              f"runs it): median "
              f"real time per executed node over {runs} runs, scaled to the median of {runs} "
              "unprofiled runs timed in interleaved rounds beside them")
    return _profile(runtime, method, float(reply["whole_ms"]), layers)


# ---------------------------------------------------------------- TFLite (LiteRT)
@dataclass(frozen=True, kw_only=True, slots=True)
class _Step:
    """Operators [start, end) of the main subgraph, timed as one step."""

    start: int
    end: int
    name: str
    op: str


def _tflite(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
    from ai_edge_litert.tools import flatbuffer_utils as fb

    model = fb.read_model(str(path))
    graph = model.subgraphs[0]
    if not graph.operators:
        raise UsageError(f"{path.name}: the model has no operators to time")
    steps = _tflite_steps(model, fb, _prefix_limit(path))
    contents = [_prefix(model, fb, 0)] + [_prefix(model, fb, s.end) for s in steps[:-1]]
    timed = _time_prefixes([*contents, path.read_bytes()], threads, runs, device)
    medians = [bench.p50_ms for bench in timed]
    rounds = int(timed[-1].device["interleaved_rounds"])
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
              f"the whole model, timed {_where(device)} with the TFLite interpreter "
              f"({_threads(threads)}) in {rounds} interleaved rounds; a layer's time is the "
              "difference between the medians of consecutive prefixes, clamped at 0 and scaled "
              "to the whole-model median")
    runtime = (f"LiteRT {version('ai-edge-litert')} CPU" if device is None else
               f"tflite {timed[-1].device['runtime_version']} on {device.label}")
    return _profile(runtime, method, medians[-1], layers)


def _time_prefixes(contents: Sequence[bytes], threads: int, runs: int,
                   device: Device | None) -> list[BenchResult]:
    """The prefix models timed together in ``runs`` interleaved rounds of one call each, here or
    on the device (the files pushed there sha256-checked), in the order given."""
    on_device = device is not None
    rounds = Rounds(rounds=runs, calls=runs, warmup=1, idle_s=0.0, min_rounds=MIN_ROUNDS,
                    budget_s=ROUNDS_BUDGET_S * (4 if on_device else 1))
    with tempfile.TemporaryDirectory(prefix="edge-layers-") as tmp:
        files = {f"prefix{k}": Path(tmp) / f"prefix{k}.tflite" for k in range(len(contents))}
        for file, content in zip(files.values(), contents, strict=True):
            file.write_bytes(content)
        if device is None:
            timed = time_files_here(files, rounds, threads=threads)
        else:
            stored = {k: store(device, file)[0] for k, file in files.items()}
            timed = time_on_device(device, stored, rounds, threads=threads,
                                   timeout=max(600.0, 8 * ROUNDS_BUDGET_S))
    return [timed[k] for k in files]


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


_BACKENDS: dict[str, Callable[[Path, int, int, Device | None], LayerProfile]] = {
    ".onnx": _onnx, ".xml": _openvino, ".tflite": _tflite}
