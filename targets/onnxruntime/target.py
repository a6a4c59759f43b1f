"""ONNX Runtime: fp32 reference, fp16, dynamic int8 (MatMul/Gemm only) and static int8 QDQ."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, version_converter
from onnxconverter_common import float16
from onnxruntime import quantization as q
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.quantization.registry import QLinearOpsRegistry
from onnxruntime.quantization.shape_inference import quant_pre_process

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.files import no_space_as
from edge.core.ortrun import run_within
from edge.core.values import Dataset, ModelInfo
from targets.base import (
    ConversionError,
    ConvertSettings,
    cached_notes,
    check_precision,
    missing_modules,
    scratch_dir,
)

DEFAULT_SETTINGS = ConvertSettings()

__all__ = ["FILES", "OnnxRuntimeTarget", "OrtRunner", "constants_to_initializers",
           "float_kinds", "gemms_to_matmuls", "map_keep_float", "name_nodes", "node_name"]

#: precision -> artifact file name inside the workdir (the workdir encodes the settings).
FILES: dict[str, str] = {
    "fp32": "model_fp32.onnx",
    "fp16": "model_fp16.onnx",
    "int8-dynamic": "model_int8_dynamic.onnx",
    "int8": "model_int8_qdq.onnx",
}
#: ConvertSettings.calibration -> onnxruntime.quantization.CalibrationMethod member name.
CALIBRATION: dict[str, str] = {"minmax": "MinMax", "entropy": "Entropy",
                               "percentile": "Percentile"}
#: Entropy and Percentile build activation histograms; fewer samples give noisy ranges.
MIN_HISTOGRAM_SAMPLES = 100
#: DequantizeLinear's ``axis`` (per-channel weights) exists from this default-domain opset on.
PER_CHANNEL_OPSET = 13
#: Op types quantized dynamically. Conv is left out on purpose: ConvInteger ran 7x slower.
DYNAMIC_OPS = ("MatMul", "Gemm")
ATTENTION_OPS = ("Attention",)  # com.microsoft fused attention, quantized dynamically by ORT
_NOTES_SUFFIX = ".notes.json"


class OrtRunner:
    """An ONNX Runtime session on the CPU. One run may take the deadline of a model's first run
    (edge.core.ortrun): a Loop that never ends is one line, where edge waited for ever."""

    def __init__(self, path: Path, *, threads: int) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._path = path
        self._session = ort.InferenceSession(str(path), options,
                                             providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the model's order."""
        return run_within(self._session, None, feeds, self._path.name)


class OnnxRuntimeTarget:
    """ONNX Runtime on the device CPU."""

    name: ClassVar[str] = "onnxruntime"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="onnxruntime", precisions=("fp32", "fp16", "int8-dynamic", "int8"),
        suffix=".onnx", keeps_float=True, layer_plan="kinds",
        modules=("onnxruntime", "onnxconverter_common"), formats=("onnx",),
        converters=("onnxruntime", "onnx", "onnxconverter-common"), recipe=1)

    def missing(self) -> str | None:
        """ONNX Runtime is a core dependency; report if it is absent anyway."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Write (or reuse) this precision's artifact in ``workdir``; return (file, notes)."""
        check_precision(self, precision)
        out = Path(workdir) / FILES[precision]
        notes = cached_notes(out)
        if notes is not None:
            return out, notes
        # a full disk: one line naming out
        with no_space_as(out), scratch_dir(Path(workdir), ".ort-") as scratch:
            partial = scratch / out.name
            notes = _BUILDERS[precision](model, calib, settings, partial, scratch)
            _publish(partial, out, notes)
        return out, notes

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> OrtRunner:
        """A CPU session with ``threads`` intra-op threads."""
        return OrtRunner(artifact, threads=threads)


# ---------------------------------------------------------------- cache (atomic, with notes)


def _publish(partial: Path, out: Path, notes: tuple[str, ...]) -> None:
    """Rename the finished artifact into place, then its notes (the completion marker)."""
    notes_file = out.with_name(out.name + _NOTES_SUFFIX)
    tmp_notes = partial.with_name(partial.name + _NOTES_SUFFIX)
    tmp_notes.write_text(json.dumps(list(notes)))
    os.replace(partial, out)
    os.replace(tmp_notes, notes_file)




# ---------------------------------------------------------------- builders, one per precision


Builder = Callable[[ModelInfo, Dataset, ConvertSettings, Path, Path], tuple[str, ...]]


def _build_fp32(model: ModelInfo, calib: Dataset, settings: ConvertSettings, dst: Path,
                scratch: Path) -> tuple[str, ...]:
    """The source model itself."""
    shutil.copyfile(model.path, dst)
    notes = ["source model; ONNX Runtime optimizes the graph at load"]
    if settings.keep_float:
        notes.append("keep_float has no effect at fp32: every node is float")
    return tuple(notes)


def _build_fp16(model: ModelInfo, calib: Dataset, settings: ConvertSettings, dst: Path,
                scratch: Path) -> tuple[str, ...]:
    """onnxconverter-common float16 conversion with float32 inputs and outputs."""
    proto = name_nodes(onnx.load(model.path))
    block, keep_notes = map_keep_float(proto, proto, settings.keep_float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            half = float16.convert_float_to_float16(proto, keep_io_types=True,
                                                    node_block_list=block)
            onnx.checker.check_model(half)
        except Exception as exc:  # the converter and the checker raise many types
            raise ConversionError(f"onnxruntime fp16 conversion failed: {first_line(exc)}") from exc
    onnx.save(half, str(dst))
    notes = ["float16 weights and compute (onnxconverter-common), float32 inputs and outputs; "
             "no speed-up on x86 CPUs without fp16 arithmetic", *keep_notes]
    clipped = [str(w.message) for w in caught if "truncated" in str(w.message)]
    if clipped:
        notes.append(f"{len(clipped)} weight tensor(s) had values outside float16's range "
                     "or below its smallest normal: clipped")
    return tuple(notes)


def _build_dynamic(model: ModelInfo, calib: Dataset, settings: ConvertSettings, dst: Path,
                   scratch: Path) -> tuple[str, ...]:
    """quantize_dynamic of MatMul (Gemm rewritten as MatMul+Add) and attention, int8 weights."""
    if not any(model.ops.get(op) for op in (*DYNAMIC_OPS, *ATTENTION_OPS)):
        raise ConversionError("no MatMul/Gemm to quantize dynamically; int8 dynamic would "
                              "change nothing")
    reference, prepared, notes = _prepare(model, scratch)
    prepared, per_channel, opset_notes = _per_channel_ready(prepared)
    rewritten = gemms_to_matmuls(prepared)
    exclude, keep_notes = map_keep_float(reference, prepared, settings.keep_float)
    exclude, keep_notes = by_type(prepared, settings.float_ops, exclude, keep_notes)
    ops = [*DYNAMIC_OPS, *(op for op in ATTENTION_OPS if model.ops.get(op))]
    source = _save(prepared, scratch / "matmul.onnx")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints about unquantized tensors
            quantize_dynamic(str(source), str(dst), op_types_to_quantize=ops,
                             per_channel=per_channel, weight_type=QuantType.QInt8,
                             nodes_to_exclude=exclude)
    except Exception as exc:  # the quantizer raises many types; report one line
        raise ConversionError(f"onnxruntime int8-dynamic quantization failed: "
                              f"{first_line(exc)}") from exc
    _check_loads(dst, "int8-dynamic")
    quantized = _count_ops(dst, ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention"))
    if not quantized:
        raise ConversionError("int8 dynamic quantized no node (every MatMul/Gemm is kept float "
                              "or has no constant weight)")
    keep_notes += _lost(dst, exclude)
    return (f"dynamic int8: {quantized} MatMul/Gemm/attention node(s) with int8 weights "
            f"{_granularity(per_channel)}, activations quantized at run time; Conv and the rest "
            "stay float", *([f"{rewritten} Gemm node(s) rewritten as MatMul+Add to quantize them"]
                            if rewritten else []), *notes, *opset_notes, *keep_notes)


def _build_static(model: ModelInfo, calib: Dataset, settings: ConvertSettings, dst: Path,
                  scratch: Path) -> tuple[str, ...]:
    """Static QDQ: int8 weights per channel, int8 activations calibrated on ``calib``; when the
    pre-processed graph fails to quantize, the graph as given is tried before giving up."""
    if not len(calib):
        raise ConversionError("int8 needs calibration samples; none were given")
    if settings.calibration not in CALIBRATION:
        raise ConversionError(f"unknown calibration {settings.calibration!r}; choose one of "
                              f"{', '.join(CALIBRATION)}")
    reference, prepared, notes = _prepare(model, scratch)
    try:
        made = _static_attempt(reference, prepared, calib, settings, dst, scratch)
    except _QuantizeFailed as first:
        if any(n.startswith("quant_pre_process failed") for n in notes):  # nothing to retry
            raise ConversionError(f"onnxruntime int8 quantization failed: {first}; try the "
                                  "int8-dynamic or OpenVINO's NNCF int8 candidate") from None
        made = _static_retry(reference, first, calib, settings, dst, scratch)
    return (made[0], *notes, *made[1:])


class _QuantizeFailed(Exception):
    """quantize_static raised: the one-line reason."""


def _static_attempt(reference: onnx.ModelProto, prepared: onnx.ModelProto, calib: Dataset,
                    settings: ConvertSettings, dst: Path, scratch: Path) -> tuple[str, ...]:
    """Quantize ``prepared`` to ``dst``; the notes (description, histogram warning, ...)."""
    prepared, per_channel, opset_notes = _per_channel_ready(prepared)
    exclude, keep_notes = map_keep_float(reference, prepared, settings.keep_float)
    exclude, keep_notes = by_type(prepared, settings.float_ops, exclude, keep_notes)
    method = CALIBRATION[settings.calibration]
    source = _save(prepared, scratch / "prepared.onnx")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # histogram calibrators print progress
            _quantize_static(source, dst, calib, exclude, method, per_channel=per_channel)
    except Exception as exc:  # the quantizer raises many types; report one line
        raise _QuantizeFailed(first_line(exc)) from exc
    _check_loads(dst, "int8")
    keep_notes += _lost(dst, exclude)
    return (f"static QDQ (U8S8), int8 weights {_granularity(per_channel)}, uint8 activations, "
            f"{method} calibration on {len(calib)} samples",
            *_histogram_note(settings.calibration, len(calib)), *opset_notes, *keep_notes)


def _static_retry(reference: onnx.ModelProto, first: _QuantizeFailed, calib: Dataset,
                  settings: ConvertSettings, dst: Path, scratch: Path) -> tuple[str, ...]:
    """Quantize the graph without quant_pre_process after the pre-processed one failed."""
    plain = onnx.load(str(scratch / "normalized.onnx"))
    try:
        made = _static_attempt(reference, plain, calib, settings, dst, scratch)
    except _QuantizeFailed as second:
        raise ConversionError(
            f"onnxruntime int8 quantization failed with ONNX Runtime's pre-processing "
            f"({first}) and without it ({second}); the other candidates (int8-dynamic, "
            "OpenVINO's NNCF int8) quantize differently: try those, or report the model to "
            "ONNX Runtime") from None
    return (made[0], f"the pre-processed graph (quant_pre_process) failed to quantize "
            f"({first}); quantized the graph without that pre-processing", *made[1:])


def _quantize_static(source: Path, dst: Path, calib: Dataset, exclude: list[str],
                     method: str, *, per_channel: bool) -> None:
    """quantize_static to QDQ: per-channel int8 weights, uint8 activations (U8S8).

    U8S8 is the CPU execution provider's fused path on x86 and ARM64; with int8 activations
    ORT 1.31 left depthwise convolutions and residual adds in float (a MobileNetV2 ran 1.1x
    fp32 instead of 1.65x; see docs/benchmarks.md).
    """
    q.quantize_static(str(source), str(dst), _Reader(calib), quant_format=q.QuantFormat.QDQ,
                      per_channel=per_channel, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8, nodes_to_exclude=exclude,
                      calibrate_method=getattr(q.CalibrationMethod, method))


_BUILDERS: dict[str, Builder] = {"fp32": _build_fp32, "fp16": _build_fp16,
                                 "int8-dynamic": _build_dynamic, "int8": _build_static}


class _Reader:
    """Feeds calibration samples to onnxruntime.quantization."""

    def __init__(self, data: Dataset) -> None:
        self._iter = iter(data.feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)


def _histogram_note(calibration: str, samples: int) -> tuple[str, ...]:
    """Warn when a histogram calibration has few samples."""
    if calibration == "minmax" or samples >= MIN_HISTOGRAM_SAMPLES:
        return ()
    return (f"{CALIBRATION[calibration]} calibration builds activation histograms: "
            f"{samples} samples is few (want >= {MIN_HISTOGRAM_SAMPLES}); ranges may be noisy",)


# ---------------------------------------------------------------- graph preparation


def _prepare(model: ModelInfo, scratch: Path) -> tuple[onnx.ModelProto, onnx.ModelProto,
                                                        tuple[str, ...]]:
    """(reference with named nodes, pre-processed copy, notes) ready for the quantizer."""
    reference = name_nodes(onnx.load(model.path))
    normalized = onnx.ModelProto()
    normalized.CopyFrom(reference)
    moved = constants_to_initializers(normalized)
    notes = [f"{moved} Constant-node tensor(s) moved to initializers"] if moved else []
    src = _save(normalized, scratch / "normalized.onnx")
    try:
        quant_pre_process(str(src), str(scratch / "pre.onnx"), skip_symbolic_shape=True)
        return reference, name_nodes(onnx.load(str(scratch / "pre.onnx"))), tuple(notes)
    except Exception as exc:  # pre-processing is an optimization: quantize without it
        notes.append(f"quant_pre_process failed ({first_line(exc)}); quantized the graph as is")
        return reference, normalized, tuple(notes)


def _per_channel_ready(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool, tuple[str, ...]]:
    """(model, per_channel, notes): per-channel weights need DequantizeLinear's ``axis``
    (opset 13); an older model is upgraded to opset 13, else quantized per tensor."""
    opset = _default_opset(proto)
    if opset >= PER_CHANNEL_OPSET:
        return proto, True, ()
    try:
        upgraded = version_converter.convert_version(proto, PER_CHANNEL_OPSET)
        onnx.checker.check_model(upgraded)
    except Exception as exc:  # the converter and the checker raise many types
        return proto, False, (f"opset {opset} model: per-channel weights need opset "
                              f"{PER_CHANNEL_OPSET} and the upgrade failed ({first_line(exc)}); "
                              "weights quantized per tensor",)
    return name_nodes(upgraded), True, (f"opset {opset} model upgraded to opset "
                                        f"{PER_CHANNEL_OPSET} for per-channel weights",)


def _default_opset(proto: onnx.ModelProto) -> int:
    """The model's default-domain (ai.onnx) opset version."""
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def _granularity(per_channel: bool) -> str:
    return "per channel" if per_channel else "per tensor"


def _check_loads(path: Path, precision: str) -> None:
    """Raise ConversionError when ONNX Runtime cannot load what the quantizer wrote."""
    try:
        OrtRunner(path, threads=1)
    except Exception as exc:  # ORT raises its own exception types; report the reason
        raise ConversionError(f"onnxruntime {precision} quantization wrote a model ONNX Runtime "
                              f"cannot load: {first_line(exc)}") from None


#: Never kept float by a mixed plan's trial: the kinds int8 is for (their weights and
#: products), the activations the quantizer folds into a convolution's int8 output range (in
#: float they would split every fused int8 convolution kernel), and kinds that only move data.
_NOT_FLOATED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Relu", "Clip", "Reshape",
                          "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather", "Split",
                          "Concat", "Pad", "Where", "ArgMax"})


def float_kinds(reference: onnx.ModelProto,
                kept: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """Kind -> the reference's nodes (keep_float's names) of the kinds the quantizer runs in
    int8 (``QLinearOpsRegistry``: a kind outside it stays float anyway), but for
    ``_NOT_FLOATED`` and the nodes already ``kept`` float: what a mixed plan may keep float."""
    kinds: dict[str, list[str]] = {}
    for node in reference.graph.node:
        if node.op_type in QLinearOpsRegistry and node.op_type not in _NOT_FLOATED \
                and node_name(node) not in kept:
            kinds.setdefault(node.op_type, []).append(node_name(node))
    return {kind: tuple(nodes) for kind, nodes in sorted(kinds.items())}


def node_name(node: onnx.NodeProto) -> str:
    """A node's name, or ``<op_type>(<first output>)`` for an unnamed node."""
    return node.name or f"{node.op_type}({node.output[0] if node.output else ''})"


def name_nodes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Give every unnamed top-level node its ``node_name``; return the same proto."""
    for node in proto.graph.node:
        if not node.name:
            node.name = node_name(node)
    return proto


def constants_to_initializers(proto: onnx.ModelProto) -> int:
    """Move top-level Constant nodes' tensors into initializers; return how many moved."""
    outputs = {o.name for o in proto.graph.output}
    kept, moved = [], 0
    for node in proto.graph.node:
        tensor = _constant_tensor(node) if node.op_type == "Constant" else None
        if tensor is None or node.output[0] in outputs:
            kept.append(node)
            continue
        tensor.name = node.output[0]
        proto.graph.initializer.append(tensor)
        moved += 1
    if moved:
        del proto.graph.node[:]
        proto.graph.node.extend(kept)
        onnx.checker.check_model(proto)
    return moved


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a Constant node yields (dense tensor or numeric value_* attributes)."""
    for attr in node.attribute:
        if attr.name == "value":
            tensor = type(attr.t)()
            tensor.CopyFrom(attr.t)
            return tensor
        if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            value = helper.get_attribute_value(attr)
            dtype = np.float32 if "float" in attr.name else np.int64
            return numpy_helper.from_array(np.asarray(value, dtype=dtype))
    return None  # sparse or string constants stay nodes


def gemms_to_matmuls(proto: onnx.ModelProto) -> int:
    """Rewrite Gemm(A, constant B, constant C) as MatMul(+Add) so ORT can quantize it
    dynamically (its integer registry has no Gemm); the MatMul keeps the Gemm's name."""
    inits = {i.name: i for i in proto.graph.initializer}
    nodes, count = [], 0
    for node in proto.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "Gemm" or attrs.get("transA", 0) or not _constant_inputs(node, inits):
            nodes.append(node)
            continue
        nodes += _gemm_as_matmul(proto, node, attrs, inits)
        count += 1
    if count:
        del proto.graph.node[:]
        proto.graph.node.extend(nodes)
        _drop_unused_initializers(proto)
    return count


def _drop_unused_initializers(proto: onnx.ModelProto) -> None:
    """Remove initializers no node reads (subgraphs included) and no graph output names."""
    used = _used_names(proto.graph) | {o.name for o in proto.graph.output}
    kept = [i for i in proto.graph.initializer if i.name in used]
    if len(kept) < len(proto.graph.initializer):
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(kept)


def _used_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads."""
    names = {name for node in graph.node for name in node.input}
    for node in graph.node:
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _used_names(sub)
    return names


def _constant_inputs(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    """B and (if present) C are initializers."""
    return all(name in inits for name in node.input[1:] if name)


def _gemm_as_matmul(proto: onnx.ModelProto, node: onnx.NodeProto, attrs: dict[str, Any],
                    inits: dict[str, onnx.TensorProto]) -> list[onnx.NodeProto]:
    """MatMul(A, alpha * B') then Add(beta * C); new initializers are appended to ``proto``."""
    weight = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
    weight = (weight.T if attrs.get("transB", 0) else weight) * float(attrs.get("alpha", 1.0))
    w_name = f"{node.input[1]}__matmul_{node.name}"
    proto.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), w_name))
    has_bias = len(node.input) > 2 and bool(node.input[2])
    mm_out = f"{node.output[0]}__matmul" if has_bias else node.output[0]
    out = [helper.make_node("MatMul", [node.input[0], w_name], [mm_out], name=node.name)]
    if has_bias:
        bias = numpy_helper.to_array(inits[node.input[2]]) * float(attrs.get("beta", 1.0))
        b_name = f"{node.input[2]}__bias_{node.name}"
        proto.graph.initializer.append(numpy_helper.from_array(bias.astype(np.float32), b_name))
        out.append(helper.make_node("Add", [mm_out, b_name], [node.output[0]],
                                    name=f"{node.name}/bias"))
    return out


def map_keep_float(reference: onnx.ModelProto, prepared: onnx.ModelProto,
                   keep: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """Node names of ``prepared`` to exclude for the reference names in ``keep``, and notes.

    A name pre-processing removed is followed through its output tensor to the node that
    now produces it (e.g. a BatchNormalization fused into its Conv).
    """
    if not keep:
        return [], ()
    ref = {node_name(n): n for n in reference.graph.node}
    unknown = [k for k in keep if k not in ref]
    if unknown:
        raise ConversionError(f"keep_float names not in the model: {', '.join(unknown[:5])}")
    names = {node_name(n) for n in prepared.graph.node}
    producer = {o: node_name(n) for n in prepared.graph.node for o in n.output}
    exclude: list[str] = []
    notes: list[str] = []
    for k in keep:
        target = k if k in names else next(
            (producer[o] for o in ref[k].output if o in producer), None)
        if target is None:
            notes.append(f"keep_float: {k} was folded away by pre-processing; nothing to keep")
        elif target not in exclude:
            exclude.append(target)
            if target != k:
                notes.append(f"keep_float: {k} was fused into {target}; {target} stays float")
    if exclude:
        notes.insert(0, f"kept float (keep_float): {', '.join(exclude)}")
    return exclude, tuple(notes)


def by_type(prepared: onnx.ModelProto, float_ops: Sequence[str], exclude: list[str],
            notes: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
    """``exclude`` and every node of ``prepared`` whose operator type is in ``float_ops``."""
    wanted, excluded = set(float_ops), set(exclude)
    typed = [n for n in prepared.graph.node
             if n.op_type in wanted and node_name(n) not in excluded]
    if not typed:
        return exclude, notes
    kinds = ", ".join(sorted({n.op_type for n in typed}))
    return [*exclude, *(node_name(n) for n in typed)], (
        *notes, f"kept float by type: {len(typed)} node(s) ({kinds})")


# ---------------------------------------------------------------- small helpers


def _save(proto: onnx.ModelProto, path: Path) -> Path:
    """Write a model, with external data when it is too big for one protobuf."""
    big = sum(len(i.raw_data) for i in proto.graph.initializer) > 1_800_000_000
    onnx.save(proto, str(path), save_as_external_data=big)
    return path


def _lost(path: Path, exclude: Sequence[str]) -> tuple[str, ...]:
    """A note naming excluded nodes the quantizer did not keep under their name."""
    names = {n.name for n in onnx.load(str(path), load_external_data=False).graph.node}
    lost = [name for name in exclude if name not in names]
    return (f"keep_float: {', '.join(lost)} not found by name in the quantized graph",) if lost \
        else ()


def _count_ops(path: Path, op_types: Sequence[str]) -> int:
    """How many nodes of ``op_types`` a model file has."""
    proto = onnx.load(str(path), load_external_data=False)
    return sum(n.op_type in op_types for n in proto.graph.node)

