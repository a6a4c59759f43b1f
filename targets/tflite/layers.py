"""LiteRT's per-layer profiler (``.tflite`` files, NNAPI-ready ones too, run on the CPU).

LiteRT's Python API has no per-operator profiler, so the time is derived from prefixes: the
model cut after every operator is timed, all prefixes in interleaved rounds
(``devices.measure``), and an operator costs the difference between the medians of consecutive
prefixes (clamped at 0), scaled to the whole-model median; on this host or ON a device.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from devices.device import Device, store
from devices.layers import LayerProfile, LayerTime, profile_of, scaled, threads_text, where
from devices.measure import Rounds, time_files_here, time_on_device
from edge.core.errors import UsageError
from edge.core.values import BenchResult

__all__ = ["measure"]

#: most prefixes timed; more operators are grouped into this many consecutive runs.
MAX_PREFIXES = 128
#: fewest prefixes worth timing; a model that allows fewer is refused.
MIN_PREFIXES = 8
#: bytes the prefix interpreters held at once may take (weights, about twice).
PREFIX_BUDGET_BYTES = 1 << 30
#: seconds the timed rounds may take here (on a device: four times as long); fewer
#: rounds (not fewer than MIN_ROUNDS) if the first round says more.
ROUNDS_BUDGET_S = 15.0
MIN_ROUNDS = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class _Step:
    """Operators [start, end) of the main subgraph, timed as one step."""

    start: int
    end: int
    name: str
    op: str


def measure(path: Path, threads: int, runs: int, device: Device | None) -> LayerProfile:
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
    shares = scaled(deltas, medians[-1])
    layers = [LayerTime(name=s.name, op=s.op, ms=ms,
                        detail=f"op {s.start}" if s.end == s.start + 1
                        else f"ops {s.start}-{s.end - 1}")
              for s, ms in zip(steps, shares, strict=True)]
    grouped = len(steps) < len(graph.operators)
    method = ("derived from prefix timings (LiteRT has no per-operator profiler in Python): "
              f"the model cut after every {'group of operators' if grouped else 'operator'} "
              f"({len(steps)} prefixes{' of consecutive operators' if grouped else ''}) and "
              f"the whole model, timed {where(device)} with the TFLite interpreter "
              f"({threads_text(threads)}) in {rounds} interleaved rounds; a layer's time is the "
              "difference between the medians of consecutive prefixes, clamped at 0 and scaled "
              "to the whole-model median")
    runtime = (f"LiteRT {version('ai-edge-litert')} CPU" if device is None else
               f"tflite {timed[-1].device['runtime_version']} on {device.label}")
    return profile_of(runtime, method, medians[-1], layers)


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
            timed = time_files_here(files, rounds, threads=threads, observe=False)
        else:
            stored = {k: store(device, file)[0] for k, file in files.items()}
            timed = time_on_device(device, stored, rounds, threads=threads, observe=False,
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
