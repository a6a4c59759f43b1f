"""Accuracy recovery when int8 breaks fidelity: keep the most sensitive nodes in float.

An attempt passes when every output passes its own metric (``edge.core.verify.judge`` with
the same thresholds and ``--metric`` kinds as the candidate it recovers).

Sensitivity is layer-wise: each tensor the int8 model quantizes (activations and weights) is
fake-quantized with the int8 model's own scale and zero point, on the *float* model's values
for the calibration samples, and compared per channel with the float values. Errors are not
accumulated along the graph (that would rank the last layers first), and they are averaged
over channels (a whole-tensor SQNR hides channels crushed by one outlier channel). A node's
score is the worst error among the tensors it quantizes; keeping it float removes those.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from edge.core.model import sha256_file
from edge.core.values import Dataset, Fidelity, ModelInfo
from edge.core.verify import Outputs, Thresholds, judge, measure, run_all
from targets.base import ConversionError, ConvertSettings
from targets.onnxruntime import OnnxRuntimeTarget, constants_to_initializers, name_nodes, node_name
from targets.tflite.litert_rank import rank_sensitive_ops

if TYPE_CHECKING:
    from targets.base import Target

__all__ = ["ARITHMETIC", "Recovery", "arithmetic_nodes", "attempt_sizes", "rank_sensitive_nodes",
           "recover"]

log = logging.getLogger("edge")

_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_Q_INPUT = "_QuantizeLinear_Input"  # the quantizer's rename of a quantized graph output
_W_SUFFIX = "_quantized"  # the quantizer's name for a quantized initializer

#: Arithmetic an int8 grid can break while int8 barely speeds it up: normalizations written out
#: as operators (mean, square, square root, reciprocal), activations' polynomials (GELU's tanh
#: form), softmax, residual and scaling sums, concatenations of unlike ranges. The last rung of
#: recovery keeps all of them float and leaves int8 to the convolutions and matrix products.
ARITHMETIC = frozenset({
    "Abs", "Add", "Concat", "Div", "Erf", "Exp", "InstanceNormalization", "LayerNormalization",
    "Log", "Max", "Min", "Mul", "Neg", "Pow", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceSum", "ReduceSumSquare", "Softmax", "Sqrt", "Sub", "Tanh"})


class Recovery(NamedTuple):
    """A recovered artifact: it passes ``judge`` with ``kept_float`` nodes left in float."""

    file: Path
    notes: tuple[str, ...]
    fidelity: Fidelity
    kept_float: tuple[str, ...]
    float_ops: tuple[str, ...] = ()  # operator types kept float wherever they occur


@dataclass(frozen=True, slots=True)
class _Quant:
    """How the int8 model quantizes one float tensor, and which of its nodes touch it."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int
    consumers: frozenset[str]  # nodes reading the int8 value
    producer: str | None  # the node writing it, when the QDQ format quantizes its output
    weight: bool


# ---------------------------------------------------------------- recovery loop


def recover(
    target: Target, model: ModelInfo, precision: str, calib: Dataset, held_out: Dataset,
    reference: Outputs, limits: Thresholds, workdir_for: Callable[[ConvertSettings], Path],
    *, settings: ConvertSettings | None = None, max_fraction: float = 0.25,
    threads: int | None = None,
) -> Recovery | None:
    """Keep the 1, 2, 4, ... most sensitive nodes float until ``judge`` passes; failing that,
    every arithmetic operator (``_arithmetic_float``); else None."""
    base = settings or ConvertSettings()
    try:
        naive, _ = target.convert(model, precision, calib=calib, workdir=workdir_for(base),
                                  settings=base)
        ranking = _ranking(target, model, precision, calib, naive, base, workdir_for)
    except Exception as exc:  # recovery is best effort: a failed ranking is no recovery
        log.warning("cannot rank %s nodes for recovery: %s", model.path, exc)
        return None
    names = _quantized_by(target, model, precision,
                          [name for name, _ in ranking if name not in base.keep_float])
    cap = min(len(names), max(1, math.ceil(max_fraction * len(ranking))))
    naive_sha = sha256_file(naive)
    for size in attempt_sizes(cap):
        kept = (*base.keep_float, *names[:size])
        tried = _attempt(target, model, precision, calib, held_out, reference, limits,
                         workdir_for, replace(base, keep_float=kept), threads)
        if tried is None:
            continue
        file, notes, fidelity, failure = tried
        if size == 1 and sha256_file(file) == naive_sha:
            log.info("%s ignored keep_float (artifact unchanged)", target.name)
            break
        if failure is None:
            return Recovery(file, (*notes, _note(ranking, names[:size], cap)), fidelity, kept)
    log.info("recovery of %s %s failed with up to %d node(s) float", target.name, precision, cap)
    found = _arithmetic_float(target, model, precision, calib, held_out, reference, limits,
                              workdir_for, base, threads)
    return None if found is None or sha256_file(found.file) == naive_sha else found


def _arithmetic_float(
    target: Target, model: ModelInfo, precision: str, calib: Dataset, held_out: Dataset,
    reference: Outputs, limits: Thresholds, workdir_for: Callable[[ConvertSettings], Path],
    base: ConvertSettings, threads: int | None,
) -> Recovery | None:
    """The last rung, for static int8 from an ONNX reference: every ``ARITHMETIC`` operator
    float (int8-dynamic quantizes matrix products only: nothing to keep)."""
    if precision != "int8" or target.caps.reads == ".tflite":  # a .tflite has no ONNX nodes
        return None
    try:
        nodes = arithmetic_nodes(model)
    except Exception as exc:  # noqa: BLE001 - recovery is best effort
        log.info("no arithmetic rung for %s: %s", model.path, exc)
        return None
    if not nodes:
        return None
    settings = replace(base, float_ops=tuple(sorted(ARITHMETIC)))
    tried = _attempt(target, model, precision, calib, held_out, reference, limits,
                     workdir_for, settings, threads)
    if tried is None or tried[3] is not None:
        log.info("%s %s with its arithmetic float: %s", target.name, precision,
                 "no artifact" if tried is None else tried[3])
        return None
    file, notes, fidelity, _ = tried
    return Recovery(file, (*notes, _arithmetic_note(nodes)), fidelity, base.keep_float,
                    settings.float_ops)


def _quantized_by(target: Target, model: ModelInfo, precision: str,
                  names: list[str]) -> list[str]:
    """``names`` (ranked) that ``precision`` of ``target`` quantizes: for an int8-dynamic that
    quantizes only some operators (``caps.dynamic_ops``), the nodes of those."""
    ops = target.caps.dynamic_ops if precision == "int8-dynamic" else ()
    if not ops:
        return names
    proto = name_nodes(onnx.load(model.path, load_external_data=False))
    kept = {node_name(n) for n in proto.graph.node if n.op_type in ops}
    return [name for name in names if name in kept]


def arithmetic_nodes(model: ModelInfo) -> list[onnx.NodeProto]:
    """The ONNX reference model's ``ARITHMETIC`` nodes, in graph order, named."""
    proto = name_nodes(onnx.load(model.path, load_external_data=False))
    return [n for n in proto.graph.node if n.op_type in ARITHMETIC]


def _arithmetic_note(nodes: list[onnx.NodeProto]) -> str:
    """What the last rung kept float and why."""
    kinds = Counter(n.op_type for n in nodes)
    listed = ", ".join(f"{count} {op}" for op, count in kinds.most_common())
    return (f"accuracy recovery: no few nodes sufficed, so the arithmetic was kept float "
            f"({listed}, and what the runtime made of them); the convolutions and matrix "
            "products stay int8")


def attempt_sizes(cap: int) -> list[int]:
    """1, 2, 4, ... below ``cap``, then ``cap`` itself."""
    sizes = [1 << i for i in range(max(cap, 1).bit_length()) if 1 << i < cap]
    return [*sizes, cap] if cap > 0 else []


def _attempt(
    target: Target, model: ModelInfo, precision: str, calib: Dataset, held_out: Dataset,
    reference: Outputs, limits: Thresholds, workdir_for: Callable[[ConvertSettings], Path],
    settings: ConvertSettings, threads: int | None,
) -> tuple[Path, tuple[str, ...], Fidelity, str | None] | None:
    """Convert with ``settings`` and judge it: (file, notes, fidelity, failure) or None."""
    start = time.perf_counter()
    try:
        file, notes = target.convert(model, precision, calib=calib,
                                     workdir=workdir_for(settings), settings=settings)
        runner = target.load(file, model, threads=threads or os.cpu_count() or 1)
    except ConversionError as exc:
        log.info("recovery attempt keep_float=%s failed: %s", settings.keep_float, exc)
        return None
    fidelity = measure(reference, run_all(runner, held_out), held_out, limits,
                       [o.name for o in model.outputs], declared=model.outputs)
    failure = judge(fidelity, limits)
    log.info("recovery attempt keep_float=%s: %s (%.1f s)", settings.keep_float,
             failure or "passes", time.perf_counter() - start)
    return file, notes, fidelity, failure


def _note(ranking: list[tuple[str, float]], kept: list[str], cap: int) -> str:
    """What recovery kept float and why."""
    score = dict(ranking)
    listed = ", ".join(f"{name} (int8 error {score[name]:.2f})" for name in kept)
    return (f"accuracy recovery: kept {len(kept)} of {len(ranking)} quantized node(s) float "
            f"(cap {cap}), most sensitive first: {listed}")


def _ranking(target: Target, model: ModelInfo, precision: str, calib: Dataset, naive: Path,
             settings: ConvertSettings,
             workdir_for: Callable[[ConvertSettings], Path]) -> list[tuple[str, float]]:
    """The nodes ``naive`` quantizes, most sensitive first: a target converting the original
    .tflite ranks its own operators (there is no ONNX model)."""
    if target.caps.reads == ".tflite":
        return rank_sensitive_ops(model, precision, calib, naive)
    return rank_sensitive_nodes(model, calib, _ranking_model(naive, model, calib, settings,
                                                             workdir_for))


def _ranking_model(artifact: Path, model: ModelInfo, calib: Dataset, settings: ConvertSettings,
                   workdir_for: Callable[[ConvertSettings], Path]) -> Path:
    """The artifact if it is a QDQ ONNX model, else ONNX Runtime's static int8 as a proxy."""
    if artifact.suffix == ".onnx" and _has_activation_qdq(artifact):
        return artifact
    proxy = ConvertSettings(calibration=settings.calibration, keep_float=settings.keep_float)
    file, _ = OnnxRuntimeTarget().convert(model, "int8", calib=calib, settings=proxy,
                                          workdir=workdir_for(settings) / "ort-int8-ranking")
    return file


def _has_activation_qdq(path: Path) -> bool:
    """Whether a model quantizes activations with QuantizeLinear nodes."""
    proto = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}
    return any(n.op_type == "QuantizeLinear" and n.input[0] not in inits
               for n in proto.graph.node)


# ---------------------------------------------------------------- ranking


def rank_sensitive_nodes(model: ModelInfo, calib: Dataset, quantized: Path, *,
                         samples: int = 32) -> list[tuple[str, float]]:
    """(reference node name, layer-wise int8 error in [0, 1]) for each node the QDQ model
    ``quantized`` quantizes, most sensitive first."""
    reference = name_nodes(onnx.load(model.path))
    constants_to_initializers(reference)  # weights that were Constant nodes, by output name
    qdq = name_nodes(onnx.load(str(quantized)))
    quant = _quantized_tensors(qdq)
    errors = _tensor_errors(reference, quant, calib, samples)
    scores: dict[str, tuple[float, int]] = {}  # node -> (error, 1 if it reads the tensor)
    for tensor, error in errors.items():
        writer = quant[tensor].producer
        users = [(c, 1) for c in quant[tensor].consumers] + ([(writer, 0)] if writer else [])
        for user, role in users:
            scores[user] = max(scores.get(user, (0.0, 0)), (error, role))
    return _by_reference(scores, reference, qdq)


def _quantized_tensors(qdq: onnx.ModelProto) -> dict[str, _Quant]:
    """Float tensor name -> its quantization in ``qdq`` (activations via QuantizeLinear,
    weights via DequantizeLinear of a quantized initializer)."""
    inits = {i.name: i for i in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in qdq.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found: dict[str, _Quant] = {}
    for node in qdq.graph.node:
        weight = node.op_type == "DequantizeLinear" and node.input[0] in inits
        if not weight and not (node.op_type == "QuantizeLinear" and node.input[0] not in inits):
            continue
        dqs = [node] if weight else [c for c in consumers.get(node.output[0], [])
                                     if c.op_type == "DequantizeLinear"]
        readers = frozenset(node_name(c) for dq in dqs for c in consumers.get(dq.output[0], [])
                            if c.op_type not in _QDQ_OPS)
        source = producer.get(node.input[0])
        writer = node_name(source) if source is not None and source.op_type not in _QDQ_OPS \
            else None
        quant = _quant_params(node, inits, (readers, None if weight else writer), weight)
        if quant is not None:
            found[_float_name(node.input[0], weight)] = quant
    return found


def _quant_params(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto],
                  users: tuple[frozenset[str], str | None], weight: bool) -> _Quant | None:
    """Scale, zero point and axis of a Q or DQ node whose parameters are initializers."""
    if len(node.input) < 2 or node.input[1] not in inits:
        return None
    scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
    if len(node.input) > 2 and node.input[2] in inits:
        zero_point = numpy_helper.to_array(inits[node.input[2]])
    else:  # spec default: uint8 for Q; the quantized tensor's type for DQ
        dtype = numpy_helper.to_array(inits[node.input[0]]).dtype if weight else np.uint8
        zero_point = np.zeros(scale.shape, dtype=dtype)
    if zero_point.dtype.kind not in "iu":
        return None  # int4 / float8 formats: not measured
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return _Quant(scale, zero_point, axis, users[0], users[1], weight)


def _float_name(name: str, weight: bool) -> str:
    """The float model's name for a tensor the quantizer renamed."""
    suffix = _W_SUFFIX if weight else _Q_INPUT
    return name[: -len(suffix)] if name.endswith(suffix) else name


def _tensor_errors(reference: onnx.ModelProto, quant: dict[str, _Quant], calib: Dataset,
                   samples: int) -> dict[str, float]:
    """Per-channel relative int8 error of each quantized tensor on float values."""
    sums: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    inits = {i.name: i for i in reference.graph.initializer}
    for name, params in quant.items():
        if name in inits:
            sums[name] = _channel_sums(numpy_helper.to_array(inits[name]), params)
    activations = [n for n in quant if n not in inits]
    for values in _activations(reference, activations, calib, samples):
        for name, value in values.items():
            norm2, err2 = _channel_sums(value, quant[name])
            old = sums.get(name)
            sums[name] = (norm2, err2) if old is None or old[0].shape != norm2.shape else (
                old[0] + norm2, old[1] + err2)
    return {name: e for name, (n2, e2) in sums.items() if (e := _mean_error(n2, e2)) is not None}


def _activations(reference: onnx.ModelProto, names: list[str], calib: Dataset,
                 samples: int) -> Iterator[dict[str, np.ndarray]]:
    """For each of the first ``samples`` calibration feeds, the float values of ``names``."""
    produced = {o for n in reference.graph.node for o in n.output}
    outputs = {o.name for o in reference.graph.output}
    augmented = onnx.ModelProto()
    augmented.CopyFrom(reference)
    wanted = [n for n in names if n in produced]
    for name in wanted:
        if name not in outputs:
            augmented.graph.output.append(
                onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(augmented.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    for feed in calib.feeds[:samples]:
        values = dict(zip(wanted, session.run(wanted, feed) if wanted else [], strict=True))
        values.update({n: np.asarray(feed[n]) for n in names if n in feed})
        yield values


def _channel_sums(value: np.ndarray, quant: _Quant) -> tuple[np.ndarray, np.ndarray]:
    """Per channel: squared norm of the float values and of their int8 rounding error."""
    value = np.asarray(value, dtype=np.float64)
    error = _fake_quant(value, quant) - value
    axis = _channel_axis(value.ndim, quant)
    if axis is None:
        return np.array([np.sum(value ** 2)]), np.array([np.sum(error ** 2)])
    other = tuple(i for i in range(value.ndim) if i != axis)
    return np.sum(value ** 2, axis=other), np.sum(error ** 2, axis=other)


def _channel_axis(ndim: int, quant: _Quant) -> int | None:
    """Per-channel weights: their axis; activations: 1 for NCHW-like, else the last axis."""
    if quant.scale.size > 1:
        return quant.axis % ndim
    if quant.weight or ndim < 2:
        return None
    return 1 if ndim >= 4 else ndim - 1


def _fake_quant(value: np.ndarray, quant: _Quant) -> np.ndarray:
    """Quantize and dequantize as QuantizeLinear/DequantizeLinear do (round half to even)."""
    shape = [1] * value.ndim
    if quant.scale.size > 1:
        shape[quant.axis % value.ndim] = -1
    scale = quant.scale.reshape(shape)
    scale = np.where(scale == 0, 1.0, scale)
    zero = quant.zero_point.astype(np.float64).reshape(shape)
    info = np.iinfo(quant.zero_point.dtype)
    return (np.clip(np.rint(value / scale) + zero, info.min, info.max) - zero) * scale


def _mean_error(norm2: np.ndarray, err2: np.ndarray) -> float | None:
    """Mean over live channels of min(1, |error| / |value|); None for an all-zero tensor."""
    live = norm2 > max(float(norm2.max(initial=0.0)) * 1e-12, 0.0)
    if not live.any():
        return None
    return float(np.mean(np.minimum(1.0, np.sqrt(err2[live] / norm2[live]))))


def _by_reference(scores: dict[str, tuple[float, int]], reference: onnx.ModelProto,
                  qdq: onnx.ModelProto) -> list[tuple[str, float]]:
    """Scores keyed by reference node names (a renamed node maps via its output), ranked.

    On equal error a node that reads the int8 tensor goes before the one that writes it:
    every int8 format quantizes a node's inputs, only QDQ also quantizes outputs.
    """
    order = {node_name(n): i for i, n in enumerate(reference.graph.node)}
    producer = {o: node_name(n) for n in reference.graph.node for o in n.output}
    qdq_nodes = {node_name(n): n for n in qdq.graph.node}
    ranked: dict[str, tuple[float, int]] = {}
    for name, score in scores.items():
        ref = name if name in order else next(
            (producer[t] for o in qdq_nodes[name].output
             if (t := _float_name(o, False)) in producer), None)
        if ref is not None:
            ranked[ref] = max(ranked.get(ref, (0.0, 0)), score)
    best = sorted(ranked.items(), key=lambda item: (-item[1][0], -item[1][1], order[item[0]]))
    return [(name, error) for name, (error, _) in best]
