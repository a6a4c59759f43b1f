"""OpenVINO's int8 recipes with NNCF: post-training static int8 (``quantize``: settings by model
type, the nodes and operator types kept float) and int8-dynamic (``compress``: int8 weights of
the matrix products, activations quantized by the CPU plugin at run time)."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge.core.errors import first_line
from edge.core.model import layer_owner, node_bases
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.openvino.agent import DYNAMIC_OPTION

__all__ = ["DYNAMIC_KEY", "GROUP_SIZE", "MATRIX_OPS", "OV_TYPES", "compress",
           "is_transformer_like", "nncf_options", "ov_types", "quantize"]

#: Activations quantized at run time in groups of this many channels (the IR records it as a
#: runtime option, which every compile of it reads: here, on the device, in a serving engine).
GROUP_SIZE = 64
#: ONNX operators whose constant weights int8-dynamic compresses and computes in int8.
MATRIX_OPS = ("MatMul", "Gemm")
#: OpenVINO operators whose weights NNCF would also compress, which the CPU plugin only
#: decompresses back to float (no int8 compute there: rounding for nothing).
NOT_DYNAMIC = ("Convolution", "GroupConvolution", "ConvolutionBackpropData",
               "GroupConvolutionBackpropData", "Gather")


def is_transformer_like(ops: dict[str, int]) -> bool:
    """MatMul-heavy (at least 4, more than Conv) with Softmax or LayerNormalization."""
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    attention = ops.get("Softmax", 0) + ops.get("LayerNormalization", 0)
    return attention > 0 and matmuls >= 4 and matmuls > ops.get("Conv", 0)


def quantize(ov_model: Any, model: ModelInfo, calib: Dataset, settings: ConvertSettings,
              log: Path) -> tuple[Any, tuple[str, ...]]:
    """NNCF post-training static int8, settings chosen by model type; returns (model, notes)."""
    import nncf

    if not len(calib):
        raise ConversionError("int8 needs calibration samples; none were given")
    names, float_notes = _keep_float(ov_model, model, settings.keep_float)
    kwargs, notes = nncf_options(model, settings)
    dataset = nncf.Dataset([{k: np.asarray(v) for k, v in f.items()} for f in calib.feeds])
    try:
        with _quiet(log):
            quantized = nncf.quantize(ov_model, dataset, subset_size=len(calib),
                                      ignored_scope=nncf.IgnoredScope(
                                          names=names, types=ov_types(settings.float_ops),
                                          validate=False),
                                      **kwargs)
    except Exception as exc:  # NNCF raises many types; report one line
        raise ConversionError(f"NNCF int8 quantization failed: {first_line(exc)} "
                              f"(log: {log})") from None
    if settings.float_ops:
        float_notes += (f"kept float by type: {', '.join(ov_types(settings.float_ops))}",)
    return quantized, (*notes, f"{len(calib)} calibration samples", *float_notes)


def compress(ov_model: Any, model: ModelInfo, settings: ConvertSettings,
              log: Path) -> tuple[Any, tuple[str, ...]]:
    """int8-dynamic: NNCF's int8 weight compression (asymmetric, per output channel) of the
    matrix products, the CPU plugin's run-time quantization of their activations recorded in
    the IR; returns (model, notes)."""
    import nncf

    if not any(model.ops.get(op, 0) for op in MATRIX_OPS):
        raise ConversionError("no matrix products (MatMul, Gemm): OpenVINO's int8-dynamic "
                              "quantizes only those")
    names, float_notes = _keep_float(ov_model, model, settings.keep_float)
    try:
        with _quiet(log):
            compressed = nncf.compress_weights(
                ov_model, mode=nncf.CompressWeightsMode.INT8_ASYM,
                ignored_scope=nncf.IgnoredScope(names=names, types=list(NOT_DYNAMIC),
                                                validate=False))
    except Exception as exc:  # NNCF raises many types; report one line
        raise ConversionError(f"NNCF int8 weight compression failed: {first_line(exc)} "
                              f"(log: {log})") from None
    if not any(op.get_type_name() == "Constant" and op.get_element_type().get_type_name()
               in ("u8", "i8") for op in compressed.get_ordered_ops()):
        raise ConversionError("no matrix product has constant weights to compress (each "
                              "multiplies two activations, or was kept float): "
                              "int8-dynamic would be the fp32 model")
    compressed.set_rt_info(str(GROUP_SIZE), DYNAMIC_OPTION)
    return compressed, (f"NNCF {version('nncf')} weight compression: int8 weights "
                        "(asymmetric, per output channel) of the matrix products; OpenVINO's CPU "
                        f"plugin quantizes their activations to int8 at run time, {GROUP_SIZE} "
                        f"channels a scale ({DYNAMIC_KEY}={GROUP_SIZE}, recorded in the IR), "
                        "and computes them in int8: no calibration", *float_notes)


#: The runtime option (read from the IR's rt_info "runtime_options") of the group size.
DYNAMIC_KEY = DYNAMIC_OPTION[-1]


#: The OpenVINO operator types convert_model makes of an ONNX operator (NNCF ignores by these).
OV_TYPES = {"Abs": ("Abs",), "Add": ("Add",), "Concat": ("Concat",), "Div": ("Divide",),
            "Erf": ("Erf",), "Exp": ("Exp",), "InstanceNormalization": ("MVN",),
            "LayerNormalization": ("MVN",), "Log": ("Log",), "Max": ("Maximum",),
            "Min": ("Minimum",), "Mul": ("Multiply",), "Neg": ("Negative",), "Pow": ("Power",),
            "Reciprocal": ("Power", "Divide"), "ReduceL2": ("ReduceL2",),
            "ReduceMax": ("ReduceMax",), "ReduceMean": ("ReduceMean",),
            "ReduceMin": ("ReduceMin",), "ReduceSum": ("ReduceSum",),
            "ReduceSumSquare": ("ReduceSum", "Multiply"), "Softmax": ("SoftMax", "Softmax"),
            "Sqrt": ("Sqrt",), "Sub": ("Subtract",), "Tanh": ("Tanh",)}


def ov_types(onnx_ops: Sequence[str]) -> list[str]:
    """The OpenVINO operator types made of ``onnx_ops`` (an unknown one by its own name)."""
    return sorted({t for op in onnx_ops for t in OV_TYPES.get(op, (op,))})


def nncf_options(model: ModelInfo, settings: ConvertSettings) -> tuple[dict[str, Any],
                                                                        tuple[str, ...]]:
    """nncf.quantize keyword arguments for this model and the notes that describe them."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    estimator, how = _range_estimator(settings.calibration)
    if is_transformer_like(model.ops):
        advanced = AdvancedQuantizationParameters(
            activations_range_estimator_params=estimator,
            smooth_quant_alphas=AdvancedSmoothQuantParameters(convolution=-1, matmul=-1))
        kwargs = {"model_type": nncf.ModelType.TRANSFORMER,
                  "preset": nncf.QuantizationPreset.MIXED, "advanced_parameters": advanced}
        kind = ("transformer-like model: NNCF model_type TRANSFORMER, preset MIXED "
                "(asymmetric activations), SmoothQuant off (it lost accuracy)")
    else:
        kwargs = {"preset": nncf.QuantizationPreset.PERFORMANCE,
                  "advanced_parameters": AdvancedQuantizationParameters(
                      activations_range_estimator_params=estimator)}
        kind = "CNN settings: NNCF preset PERFORMANCE (symmetric int8 activations)"
    return kwargs, (f"NNCF {version('nncf')} post-training static int8: weights int8 per "
                    f"channel, activations int8 per tensor", kind, how, "fast bias correction")


def _range_estimator(calibration: str) -> tuple[Any, str]:
    """NNCF's activation range estimator for edge's calibration method, and a note."""
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet as Sets

    choices = {
        "minmax": (Sets.MINMAX, "calibration minmax: NNCF MINMAX (global min/max)"),
        "percentile": (Sets.MEAN_QUANTILE, "calibration percentile: NNCF MEAN_QUANTILE "
                                           "(mean of 0.01%/99.99% quantiles)"),
        "entropy": (Sets.HISTOGRAM, "calibration entropy: NNCF HISTOGRAM (range minimizing "
                                    "quantization error on a histogram)"),
    }
    if calibration not in choices:
        raise ConversionError(f"unknown calibration '{calibration}': choose one of "
                              f"{', '.join(choices)}")
    return choices[calibration]


def _keep_float(ov_model: Any, model: ModelInfo,
                keep: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """OpenVINO op names made from the ``keep`` ONNX nodes, and notes saying what was kept."""
    if not keep:
        return [], ()
    proto = _onnx_graph(model)
    bases, after = node_bases(proto), _single_consumers(proto)
    owners = _ov_owners(ov_model, set(bases.values()))
    names: list[str] = []
    kept: list[str] = []
    for wanted in keep:
        ops = _ops_of(wanted, bases, after, owners)
        names += ops
        kept += [f"{wanted} (OpenVINO ops {', '.join(ops)})"] if ops else []
    notes: tuple[str, ...] = (f"kept in float: {'; '.join(kept)}",) if kept else ()
    unknown = [k for k in keep if k not in bases]
    if unknown:
        notes += (f"keep_float names not in the model, ignored: {', '.join(unknown)}",)
    return names, notes


#: ONNX nodes followed downstream to find the ops a node was fused into (Conv -> BatchNorm).
FUSED_HOPS = 3


def _ops_of(wanted: str, bases: dict[str, str], after: dict[str, str],
            owners: dict[str, str]) -> list[str]:
    """The OpenVINO ops of ONNX node ``wanted``; a node the importer fused into the next one
    (a Conv whose BatchNormalization was folded in) has none of its own: those of the node it
    was fused into, its single consumer."""
    node = wanted
    for _ in range(FUSED_HOPS + 1):
        ops = sorted(n for n, base in owners.items() if base == bases.get(node))
        if ops or node not in after:
            return ops
        node = after[node]
    return []


def _onnx_graph(model: ModelInfo) -> onnx.ModelProto:
    """The reference ONNX model, for the names convert_model gives its ops: a node's ops are
    named after the node (its first output when unnamed), e.g. Conv '/0/Conv' becomes
    Convolution '/0/Conv/WithoutBiases' and Add '/0/Conv'."""
    try:
        return onnx.load(model.path, load_external_data=False)
    except Exception as exc:  # onnx raises several types for a bad file
        raise ConversionError(f"cannot read node names for keep_float: {first_line(exc)}") from None


def _single_consumers(proto: onnx.ModelProto) -> dict[str, str]:
    """ONNX node name -> the one node reading its outputs (nodes with one consumer only)."""
    readers: dict[str, list[str]] = {}
    for node in proto.graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node.name)
    found: dict[str, str] = {}
    for node in proto.graph.node:
        users = {u for out in node.output for u in readers.get(out, [])}
        if node.name and len(users) == 1 and (user := next(iter(users))):
            found[node.name] = user
    return found


def _ov_owners(ov_model: Any, bases: set[str]) -> dict[str, str]:
    """OpenVINO op name -> the longest ONNX base it equals or extends with '/...'; an op the
    importer made and named itself (``Multiply_11074``: a Convolution with its BatchNormalization
    folded in) belongs to the node its single consumer belongs to."""
    ops = [op for op in ov_model.get_ordered_ops()
           if op.get_type_name() not in ("Constant", "Parameter", "Result")]
    owners = {name: base for op in ops
              if (base := layer_owner(name := op.get_friendly_name(), bases)) is not None}
    for op in reversed(ops):
        users = {t.get_node().get_friendly_name() for out in op.outputs()
                 for t in out.get_target_inputs()}
        name = op.get_friendly_name()
        if name not in owners and len(users) == 1 and (user := next(iter(users))) in owners:
            owners[name] = owners[user]
    return owners


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """Send NNCF's progress bars and log records to ``log`` instead of the terminal."""
    logger = logging.getLogger("nncf")
    saved = logger.handlers[:], logger.propagate
    with open(log, "w") as handle, contextlib.redirect_stdout(io.StringIO()) as bars:
        logger.handlers = [logging.StreamHandler(handle)]
        logger.propagate = False
        try:
            yield
        finally:
            logger.handlers, logger.propagate = saved
            handle.write(bars.getvalue())
