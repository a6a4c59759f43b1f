"""NNAPI (Android): the full-int8 TFLite model, checked against what the NNAPI delegate takes.

The artifact is the int8 .tflite an Android app hands to TFLite's NNAPI delegate. Conversion
reuses the TFLite target's onnx2tf run, then analyses every op against the delegate's rules for
the device's Android API level and refuses a model that NNAPI would run piecemeal (each CPU
fallback splits the graph and copies tensors between NNAPI and the CPU on every inference).

Why int8 I/O (onnx2tf's ``*_full_integer_quant.tflite``) rather than float I/O with QUANTIZE /
DEQUANTIZE at the edges: the delegate takes QUANTIZE only from API 29 and, with an int8 output,
from API 30; DEQUANTIZE of an int8 tensor with a non-zero zero point only from API 30. With int8
I/O there are no edge ops, so the whole graph is one partition from API 29 (the delegate
converts int8 to uint8 below API 30); the app quantizes inputs and dequantizes outputs with the
scale and zero point stored in the model, as the runner here does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision
from targets.tflite import TFLiteRunner, TFLiteTarget

__all__ = ["API_LEVELS", "DEFAULT_API_LEVEL", "RULES", "NNAPIReport", "NNAPITarget",
           "OpRule", "OpVerdict", "nnapi_report"]

#: The level assumed when the caller passes none (the profile schema has no Android API level;
#: Pixel 8 shipped with Android 14 = API 34).
DEFAULT_API_LEVEL = 34
#: Levels the table covers: NNAPI starts at 27 (Android 8.1); 35 (Android 15) deprecates it.
API_LEVELS = range(27, 36)
ARTIFACT = "model_nnapi_int8.tflite"
ONNX2TF_DIR = "."  # the TFLite target's workdir: shared, so onnx2tf runs once for both
DEFAULT_SETTINGS = ConvertSettings()

# ---------------------------------------------------------------- the delegate's rules (data)
#
# Source: TFLite's NNAPI delegate, NNAPIDelegateKernel::Validate() and NeedInt8Conversion() in
# tflite/delegates/nnapi/nnapi_delegate.cc (google-ai-edge/LiteRT @5c8a6d4; cross-checked with
# tensorflow/tensorflow @002e5f4, which still had comparisons, NEG and SELECT at API 28 where
# LiteRT now says 29). Its levels are NNAPI versions: 1.0 = 27, 1.1 = 28, 1.2 = 29, 1.3 = 30,
# feature level 5 = 31; feature levels 6 and 7 (values 1000006 / 1000007 in the source) are
# mapped here to Android 13 = API 33 and Android 14 = API 34 -- that mapping is from memory of
# the NDK docs, not read from the source. NNAPI is an updatable module from API 30, so a device
# may report a higher feature level than its API level suggests.
# Notable rules encoded below, all from the same Validate() unless noted:
# - int8 (signed) data: NNAPI has the signed type from API 30 (NNAPI 1.3); below that the
#   delegate converts int8 to uint8, but only for the ops NeedInt8Conversion() lists -- other
#   ops need 30. CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED take only float or uint8
#   below API 29, so an int8 model cannot run on API 27-28.
# - per-channel weights (TENSOR_QUANT8_SYMM_PER_CHANNEL) exist from API 29 and only for the
#   convolutions (NDK NeuralNetworksTypes.h operand tables); the delegate still maps any
#   per-channel tensor to that type, so a per-channel FULLY_CONNECTED fails (the TFLite
#   converter makes dense layers per-channel by default since 2024).
# - QUANTIZE needs 29 and a uint8 output before 30; DEQUANTIZE takes int8 from 29 only with
#   zero point 0, any int8 from 30.
# - ops absent from the table (GELU, SQUARE, GATHER_ND, BROADCAST_TO, CUSTOM / Flex ops, WHILE,
#   IF, ...) fall to the delegate's default branch: never taken, at any level.
# Not modelled (checked by the delegate on tensor values or device state): dilated or grouped
# convolutions before 29, align_corners / half_pixel_centers before 30, FULLY_CONNECTED
# keep_num_dims before 30, the quantized-scale condition before 29, large average-pool windows,
# non-zero BATCH_TO_SPACE crops, axis limits of PACK / UNPACK, and whether the device's drivers
# (rather than NNAPI's own CPU reference, which the delegate excludes from API 29) run an op.


@dataclass(frozen=True, kw_only=True, slots=True)
class OpRule:
    """What the NNAPI delegate needs to take one TFLite builtin op."""

    api: int  # first Android API level the delegate maps the op at
    types: tuple[tuple[str, int], ...]  # data tensor type -> first API level taking it
    max_version: int | None = None  # highest TFLite op version the delegate accepts
    data: int = 0  # the input whose type the delegate checks
    constant: tuple[int, ...] = ()  # inputs that must be constant (shapes, axes, ...)
    max_rank: int | None = None
    per_channel: bool = False  # takes per-channel quantized weights (from API 29)
    int8_output: int | None = None  # QUANTIZE: first level with an int8 output
    asymmetric_int8: int | None = None  # DEQUANTIZE: first level for a non-zero zero point

    def level_for(self, dtype: str) -> int | None:
        """The first API level taking ``dtype`` data, or None when never."""
        return dict(self.types).get(dtype)


def _rule(api: int, *, f32: bool = True, q8: int | None = None, i8: int | None = None,
          u8: int | None = None, i32: int | None = None, b8: int | None = None,
          **limits: Any) -> OpRule:
    """An OpRule; ``q8`` sets both int8 and uint8, ``i8`` / ``u8`` override one of them."""
    levels = {"FLOAT32": api if f32 else None, "INT8": i8 or q8, "UINT8": u8 or q8,
              "INT32": i32, "BOOL": b8}
    types = tuple((t, max(level, api)) for t, level in levels.items() if level is not None)
    return OpRule(api=api, types=types, **limits)


_FL6, _FL7 = 33, 34  # NNAPI feature levels 6 and 7 (see above)
_COMPARE = _rule(29, q8=29, i32=29, b8=29, max_version=2)
_UNARY_FLOAT = _rule(29, max_version=1)

#: TFLite builtin op name -> what the NNAPI delegate needs to take it.
RULES: dict[str, OpRule] = {
    "ABS": _UNARY_FLOAT, "COS": _UNARY_FLOAT, "EXP": _UNARY_FLOAT, "LOG": _UNARY_FLOAT,
    "POW": _UNARY_FLOAT, "SIN": _UNARY_FLOAT, "SQRT": _UNARY_FLOAT,
    "LOG_SOFTMAX": _UNARY_FLOAT, "REDUCE_PROD": _UNARY_FLOAT, "SUM": _UNARY_FLOAT,
    "ADD": _rule(27, q8=27, i32=30, max_version=2, max_rank=4),
    "ARG_MAX": _rule(29, q8=29, i32=29, max_version=2),
    "ARG_MIN": _rule(29, q8=29, i32=29, max_version=2),
    "AVERAGE_POOL_2D": _rule(27, q8=27, max_version=2),
    "BATCH_MATMUL": _rule(_FL6, i8=_FL6, i32=_FL6, max_version=2, max_rank=4),
    "BATCH_TO_SPACE_ND": _rule(28, q8=28, max_version=2),
    "BIDIRECTIONAL_SEQUENCE_LSTM": _rule(29, max_version=1),
    "CAST": _rule(29, u8=29, i8=30, i32=29, max_version=1),
    "CONCATENATION": _rule(27, q8=27, max_version=2, max_rank=4),
    "CONV_2D": _rule(27, u8=27, i8=29, max_version=5, per_channel=True),
    "DEPTH_TO_SPACE": _rule(27, q8=27),
    "DEPTHWISE_CONV_2D": _rule(27, u8=27, i8=29, max_version=3, per_channel=True),
    "DEQUANTIZE": _rule(27, f32=False, u8=27, i8=29, asymmetric_int8=30, max_version=2),
    "DIV": _rule(28, max_version=1, max_rank=4),
    "ELU": _rule(30, max_version=1),
    "EMBEDDING_LOOKUP": _rule(27, max_version=1, data=1),
    "EQUAL": _COMPARE, "NOT_EQUAL": _COMPARE, "GREATER": _COMPARE,
    "GREATER_EQUAL": _COMPARE, "LESS": _COMPARE, "LESS_EQUAL": _COMPARE,
    "EXPAND_DIMS": _rule(29, q8=29, i32=29, max_version=1, constant=(1,)),
    "FILL": _rule(30, f32=False, i32=30, max_version=1, constant=(0,)),
    "FLOOR": _rule(27, max_version=1),
    "FULLY_CONNECTED": _rule(27, u8=27, i8=29, max_version=5),
    "GATHER": _rule(29, q8=29, i32=29, max_version=2),
    "HARD_SWISH": _rule(27, q8=27),
    "HASHTABLE_LOOKUP": _rule(27, f32=False, i32=27, max_version=1),
    "L2_NORMALIZATION": _rule(27, q8=29, max_version=2),
    "L2_POOL_2D": _rule(27, max_version=1),
    "LEAKY_RELU": _rule(29, q8=29, max_version=1),
    "LOCAL_RESPONSE_NORMALIZATION": _rule(27, max_version=1),
    "LOGICAL_AND": _rule(29, f32=False, b8=29, max_version=1),
    "LOGICAL_NOT": _rule(29, f32=False, b8=29, max_version=1),
    "LOGICAL_OR": _rule(29, f32=False, b8=29, max_version=1),
    "LOGISTIC": _rule(27, q8=27, max_version=2),
    "LSH_PROJECTION": _rule(27, max_version=1),
    "LSTM": _rule(28, max_version=3),
    "MAX_POOL_2D": _rule(27, q8=27, max_version=2),
    "MAXIMUM": _rule(29, q8=29, i32=29, max_version=3),
    "MEAN": _rule(28, q8=29, max_version=2, max_rank=4),
    "MINIMUM": _rule(29, q8=29, i32=29, max_version=3),
    "MIRROR_PAD": _rule(_FL7, q8=_FL7, i32=_FL7, max_version=2),
    "MUL": _rule(27, q8=27, i32=30, max_version=2, max_rank=4),
    "NEG": _rule(29, i32=29, max_version=2),
    "PACK": _rule(30, i8=30, u8=_FL6, i32=_FL6, max_version=2),
    "PAD": _rule(28, q8=29, max_version=2),
    "PADV2": _rule(29, q8=29, max_version=2),
    "PRELU": _rule(29, q8=29, max_version=1),
    "QUANTIZE": _rule(29, q8=29, int8_output=30, max_version=2),
    "REDUCE_ANY": _rule(29, f32=False, b8=29, max_version=2),
    "REDUCE_MAX": _rule(29, q8=29, max_version=2),
    "REDUCE_MIN": _rule(29, q8=29, max_version=2),
    "RELU": _rule(27, q8=27, max_version=2),
    "RELU6": _rule(27, q8=27, max_version=2),
    "RELU_N1_TO_1": _rule(27, q8=27, max_version=2),
    "RESHAPE": _rule(27, q8=27, i32=_FL6, max_version=1, max_rank=4, constant=(1,)),
    "RESIZE_BILINEAR": _rule(27, q8=29, max_version=3, constant=(1,)),
    "RESIZE_NEAREST_NEIGHBOR": _rule(29, q8=29, max_version=3, constant=(1,)),
    "REVERSE_V2": _rule(_FL7, q8=_FL7, i32=_FL7, max_version=3),
    "RNN": _rule(27, max_version=1),
    "RSQRT": _rule(29, q8=_FL7, max_version=2),
    "SELECT": _rule(29, q8=29, i32=29, max_version=2, data=1),
    "SLICE": _rule(29, q8=29, i32=29, max_version=2),
    "SOFTMAX": _rule(27, q8=27, max_version=2, max_rank=4),
    "SPACE_TO_BATCH_ND": _rule(28, q8=28, max_version=2),
    "SPACE_TO_DEPTH": _rule(27, q8=27, max_version=2),
    "SPLIT": _rule(29, u8=29, i8=30, i32=29, max_version=3, data=1, constant=(0,)),
    "SPLIT_V": _rule(30, q8=30, i32=30, max_version=2, constant=(1, 2)),
    "SQUARED_DIFFERENCE": _rule(28, u8=29, i8=30, i32=30, max_version=2, max_rank=4),
    "SQUEEZE": _rule(28, u8=28, i8=30, max_version=1),
    "STRIDED_SLICE": _rule(28, q8=28, max_version=2),
    "SUB": _rule(28, q8=29, i32=30, max_version=3, max_rank=4),
    "SVDF": _rule(28, max_version=1),
    "TANH": _rule(27, q8=29, max_version=2),
    "TILE": _rule(29, q8=29, i32=29, max_version=1),
    "TOPK_V2": _rule(29, q8=29, i32=29, max_version=2, constant=(1,)),
    "TRANSPOSE": _rule(28, q8=28, max_version=2, constant=(1,)),
    "TRANSPOSE_CONV": _rule(29, q8=29, max_version=4, data=2, per_channel=True,
                            constant=(0, 1)),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _rule(29, max_version=2),
    "UNIDIRECTIONAL_SEQUENCE_RNN": _rule(29, max_version=1),
    "UNPACK": _rule(30, q8=30, max_version=2, max_rank=4),
}

# ---------------------------------------------------------------- the report (values)


@dataclass(frozen=True, kw_only=True, slots=True)
class OpVerdict:
    """One op in execution order, and why the delegate would leave it to the CPU (or None)."""

    index: int
    op: str
    version: int
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        """Whether NNAPI would run this op."""
        return self.reason is None


@dataclass(frozen=True, kw_only=True, slots=True)
class NNAPIReport:
    """Which ops the NNAPI delegate would take at one API level, and the partitions that gives."""

    api_level: int
    ops: tuple[OpVerdict, ...]
    partitions: int  # contiguous runs of accepted ops, in execution order

    @property
    def accepted(self) -> tuple[OpVerdict, ...]:
        """Ops NNAPI would run."""
        return tuple(v for v in self.ops if v.accepted)

    @property
    def rejected(self) -> tuple[OpVerdict, ...]:
        """Ops that would fall back to the CPU."""
        return tuple(v for v in self.ops if not v.accepted)

    @property
    def delegable(self) -> bool:
        """Whether the whole model runs as one NNAPI partition."""
        return self.partitions == 1 and not self.rejected

    def summary(self) -> str:
        """One line: the verdict and, when not delegable, every distinct fallback reason."""
        head = f"NNAPI (API {self.api_level})"
        if self.delegable:
            return f"{head} takes all {len(self.ops)} ops in 1 partition"
        if not self.accepted:
            return f"{head} would run nothing: CPU fallback for {_fallbacks(self.rejected)}"
        return (f"{head} would delegate {len(self.accepted)} of {len(self.ops)} ops in "
                f"{self.partitions} partition{'s' * (self.partitions != 1)}; "
                f"CPU fallback for {_fallbacks(self.rejected)}")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with the derived verdict and summary for readers."""
        return {"api_level": self.api_level, "partitions": self.partitions,
                "delegable": self.delegable, "summary": self.summary(),
                "ops": [{"index": v.index, "op": v.op, "version": v.version,
                         "reason": v.reason} for v in self.ops]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """Rebuild from ``to_json`` output."""
        ops = tuple(OpVerdict(index=o["index"], op=o["op"], version=o["version"],
                              reason=o["reason"]) for o in data["ops"])
        return cls(api_level=data["api_level"], ops=ops, partitions=data["partitions"])


def _fallbacks(rejected: tuple[OpVerdict, ...]) -> str:
    """'OP (reason)' for each distinct op and reason, with a count when it repeats."""
    counts: dict[tuple[str, str], int] = {}
    for v in rejected:
        key = (v.op, v.reason or "")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{op}{f' x{n}' if n > 1 else ''} ({why})"
                     for (op, why), n in counts.items())


def nnapi_report(tflite_path: Path, api_level: int = DEFAULT_API_LEVEL) -> NNAPIReport:
    """Check every op of a .tflite's main graph against the delegate's rules at ``api_level``."""
    if api_level not in API_LEVELS:
        raise ValueError(f"api_level {api_level}: NNAPI covers Android API levels "
                         f"{API_LEVELS.start}..{API_LEVELS.stop - 1}")
    verdicts = tuple(OpVerdict(index=i, op=op.name, version=op.version,
                               reason=_verdict(op, api_level))
                     for i, op in enumerate(_read_ops(Path(tflite_path))))
    return NNAPIReport(api_level=api_level, ops=verdicts, partitions=_partitions(verdicts))


def _partitions(verdicts: tuple[OpVerdict, ...]) -> int:
    """Maximal runs of accepted ops in execution order.

    TFLite partitions by data dependencies, so on a branched graph a CPU op on a side branch
    may split less than this count says; on a chain the two agree.
    """
    return sum(1 for i, v in enumerate(verdicts)
               if v.accepted and (i == 0 or not verdicts[i - 1].accepted))


# ---------------------------------------------------------------- reading the flatbuffer


@dataclass(frozen=True, kw_only=True, slots=True)
class _Tensor:
    """What the rules look at in one tensor."""

    dtype: str
    rank: int
    constant: bool
    channels: int  # number of quantization scales (>1: per-channel)
    zero_point: int


@dataclass(frozen=True, kw_only=True, slots=True)
class _Op:
    """One operator: its name, version and tensors."""

    name: str
    version: int
    inputs: tuple[_Tensor | None, ...]  # None: an omitted optional input
    outputs: tuple[_Tensor, ...]


def _read_ops(path: Path) -> tuple[_Op, ...]:
    """The main subgraph's ops in execution order (the flatbuffer's operator order)."""
    from ai_edge_litert.tools import flatbuffer_utils

    try:
        model = flatbuffer_utils.read_model(str(path))
        graph = model.subgraphs[0]
    except Exception as exc:  # noqa: BLE001 - any parse failure is "not a TFLite model"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConversionError(f"cannot read {path} as a TFLite model: {reason}") from None
    tensors = [_tensor(t, model.buffers) for t in graph.tensors]
    return tuple(_op(o, model.operatorCodes, tensors) for o in graph.operators or ())


def _tensor(t: Any, buffers: list[Any]) -> _Tensor:
    """The rule-relevant facts of a flatbuffer TensorT."""
    q = t.quantization
    scales = list(q.scale) if q is not None and q.scale is not None else []
    zeros = list(q.zeroPoint) if q is not None and q.zeroPoint is not None else [0]
    data = buffers[t.buffer].data if 0 < t.buffer < len(buffers) else None
    return _Tensor(dtype=_type_names()[t.type], rank=len(t.shape) if t.shape is not None else 0,
                   constant=data is not None and len(data) > 0,
                   channels=len(scales), zero_point=int(zeros[0]) if len(zeros) else 0)


def _op(o: Any, codes: list[Any], tensors: list[_Tensor]) -> _Op:
    """A flatbuffer OperatorT with its code resolved and tensors looked up."""
    code = codes[o.opcodeIndex]
    return _Op(name=_op_name(code), version=int(code.version),
               inputs=tuple(tensors[i] if i >= 0 else None for i in (o.inputs or ())),
               outputs=tuple(tensors[i] for i in (o.outputs or ())))


def _op_name(code: Any) -> str:
    """The builtin name, or CUSTOM(name) for custom and Flex ops."""
    number = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    name = _op_names().get(number, f"BUILTIN_{number}")
    if name == "CUSTOM":
        custom = code.customCode
        return f"CUSTOM({custom.decode() if isinstance(custom, bytes) else custom})"
    return name


@cache
def _op_names() -> dict[int, str]:
    """BuiltinOperator value -> name."""
    from ai_edge_litert import schema_py_generated as schema

    return _enum_names(schema.BuiltinOperator)


@cache
def _type_names() -> dict[int, str]:
    """TensorType value -> name."""
    from ai_edge_litert import schema_py_generated as schema

    return _enum_names(schema.TensorType)


def _enum_names(enum: type) -> dict[int, str]:
    """Value -> name of a flatbuffer enum class."""
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


# ---------------------------------------------------------------- applying the rules


def _verdict(op: _Op, api: int) -> str | None:
    """Why the delegate would not take ``op`` at ``api``, or None when it would."""
    rule = RULES.get(op.name)
    if rule is None:
        return "not supported by the NNAPI delegate at any API level"
    return next(_problems(op, rule, api), None)


def _problems(op: _Op, rule: OpRule, api: int) -> Iterator[str]:
    """Every broken rule, most basic first."""
    if api < rule.api:
        yield f"needs API {rule.api}+"
    if rule.max_version is not None and op.version > rule.max_version:
        yield f"op version {op.version}, the delegate takes up to {rule.max_version}"
    yield from _type_problems(op, rule, api)
    yield from _quantization_problems(op, rule, api)
    yield from _shape_problems(op, rule)


def _type_problems(op: _Op, rule: OpRule, api: int) -> Iterator[str]:
    """The data tensor's type (and QUANTIZE's output type) against the rule's levels."""
    data = op.inputs[rule.data] if rule.data < len(op.inputs) else None
    if data is None:
        return
    level = rule.level_for(data.dtype)
    if level is None:
        yield f"{_type_label(data.dtype)} data not supported"
    elif api < level:
        yield f"{_type_label(data.dtype)} data needs API {level}+"
    output = op.outputs[0] if op.outputs else None
    if rule.int8_output and output is not None and output.dtype == "INT8" \
            and api < rule.int8_output:
        yield f"int8 output needs API {rule.int8_output}+"


def _type_label(dtype: str) -> str:
    """A tensor type as the reasons name it."""
    return {"INT8": "int8 (signed)", "UINT8": "uint8"}.get(dtype, dtype.lower())


def _quantization_problems(op: _Op, rule: OpRule, api: int) -> Iterator[str]:
    """Per-channel weights outside convolutions or before API 29; DEQUANTIZE's zero point."""
    per_channel = [t for t in op.inputs
                   if t is not None and t.dtype in ("INT8", "UINT8") and t.channels > 1]
    if per_channel and not rule.per_channel:
        yield "per-channel quantized weights (NNAPI takes them only in convolutions)"
    elif per_channel and api < 29:
        yield "per-channel quantized weights need API 29+"
    data = op.inputs[0] if op.inputs else None
    if rule.asymmetric_int8 and data is not None and data.dtype == "INT8" \
            and data.zero_point != 0 and api < rule.asymmetric_int8:
        yield f"asymmetric int8 input needs API {rule.asymmetric_int8}+"


def _shape_problems(op: _Op, rule: OpRule) -> Iterator[str]:
    """Rank limits and inputs the delegate needs constant."""
    if rule.max_rank is not None and any(t is not None and t.rank > rule.max_rank
                                         for t in (*op.inputs, *op.outputs)):
        yield f"tensors of rank > {rule.max_rank}"
    for i in rule.constant:
        tensor = op.inputs[i] if i < len(op.inputs) else None
        if tensor is not None and not tensor.constant:
            yield f"input {i} must be constant"


# ---------------------------------------------------------------- making NNAPI's weights


def _write_nnapi_model(source: Path, target: Path) -> int:
    """Copy ``source`` with per-channel FULLY_CONNECTED weights made per-tensor; count them."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(source))
    users = _buffer_users(model)
    changed = sum(_per_tensor_dense(model, graph, op, users)
                  for graph in model.subgraphs for op in graph.operators or ()
                  if _op_name(model.operatorCodes[op.opcodeIndex]) == "FULLY_CONNECTED")
    flatbuffer_utils.write_model(model, str(target))
    return changed


def _buffer_users(model: Any) -> dict[int, int]:
    """How many tensors (in all subgraphs) point at each buffer."""
    users: dict[int, int] = {}
    for graph in model.subgraphs:
        for t in graph.tensors:
            users[t.buffer] = users.get(t.buffer, 0) + 1
    return users


def _per_tensor_dense(model: Any, graph: Any, op: Any, users: dict[int, int]) -> bool:
    """Requantize one dense layer's per-channel int8 weights (and int32 bias) per-tensor.

    The new scale is the largest channel scale, so every weight stays in range; the bias keeps
    its value under the new scale input_scale * weight_scale. Shared buffers are left alone
    (the report then names the layer).
    """
    inputs = list(op.inputs)
    weights = graph.tensors[inputs[1]]
    q = weights.quantization
    if weights.type != _type_code("INT8") or q is None or q.scale is None or len(q.scale) < 2:
        return False
    bias = graph.tensors[inputs[2]] if len(inputs) > 2 and inputs[2] >= 0 else None
    if users.get(weights.buffer, 0) > 1 or (bias is not None and (
            users.get(bias.buffer, 0) > 1 or bias.type != _type_code("INT32"))):
        return False
    scales = np.asarray(q.scale, np.float64)
    scale = float(scales.max())
    _rescale(model.buffers[weights.buffer], weights.shape, q.quantizedDimension,
             scales / scale, np.int8)
    _set_scale(q, scale)
    if bias is not None:
        input_scale = float(graph.tensors[inputs[0]].quantization.scale[0])
        old = np.asarray(bias.quantization.scale, np.float64)
        _rescale(model.buffers[bias.buffer], bias.shape, 0, old / (input_scale * scale),
                 np.int32)
        _set_scale(bias.quantization, input_scale * scale)
    return True


def _rescale(buffer: Any, shape: Any, axis: int, factors: np.ndarray,
             dtype: type[np.integer[Any]]) -> None:
    """Multiply a quantized constant by per-channel ``factors`` along ``axis``, in place."""
    values = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), dtype)
    values = values.reshape(tuple(shape)).astype(np.float64)
    view = [1] * values.ndim
    view[axis] = -1
    info = np.iinfo(dtype)
    low = -info.max if dtype is np.int8 else info.min  # int8 weights stay symmetric
    scaled = np.clip(np.round(values * factors.reshape(view)), low, info.max).astype(dtype)
    buffer.data = np.frombuffer(scaled.tobytes(), np.uint8)


def _set_scale(q: Any, scale: float) -> None:
    """Make a QuantizationParametersT per-tensor with ``scale``."""
    q.scale, q.zeroPoint, q.quantizedDimension = [scale], [0], 0


def _type_code(name: str) -> int:
    """The flatbuffer TensorType value of ``name``."""
    return next(k for k, v in _type_names().items() if v == name)


# ---------------------------------------------------------------- the target


class NNAPITarget:
    """TFLite's NNAPI delegate on Android: one int8 .tflite, refused unless NNAPI takes it whole."""

    name: ClassVar[str] = "nnapi"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="nnapi", precisions=("int8",), suffix=".tflite",
        converts_with="tflite",  # shares the TFLite target's work directory: one onnx2tf run
        archs=("aarch64", "armv7l", "x86_64"),  # Android devices (the NNAPI delegate)
        modules=TFLiteTarget.caps.modules, extra="tflite",
        converters=TFLiteTarget.caps.converters, recipe=1)

    def __init__(self, api_level: int = DEFAULT_API_LEVEL) -> None:
        if api_level not in API_LEVELS:
            raise ValueError(f"api_level {api_level}: NNAPI covers Android API levels "
                             f"{API_LEVELS.start}..{API_LEVELS.stop - 1}")
        self.api_level = api_level

    def missing(self) -> str | None:
        """The TFLite target's converter and runtime packages (NNAPI itself is on the device)."""
        return TFLiteTarget().missing()

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """The int8 model for NNAPI; ConversionError naming each op NNAPI leaves to the CPU."""
        check_precision(self, precision)
        source, run = TFLiteTarget().variant(model, "int8-io", calib=calib,
                                             workdir=Path(workdir) / ONNX2TF_DIR)
        artifact = Path(workdir) / ARTIFACT
        partial = artifact.with_name(f".{ARTIFACT}.{os.getpid()}.partial")  # per process
        try:
            with no_space_as(artifact):  # a full disk: one line naming the artifact
                dense = _write_nnapi_model(source, partial)
                report = nnapi_report(partial, self.api_level)
            if not report.delegable:
                raise ConversionError(report.summary())
            os.replace(partial, artifact)
        finally:
            partial.unlink(missing_ok=True)
        return artifact, _notes(run, dense, report, settings)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """Run the artifact on this host's CPU with the LiteRT interpreter.

        NNAPI exists only on Android, so this is not NNAPI: it runs the same int8 model, with
        the same int8 arithmetic, on LiteRT's CPU kernels. That is how edge verifies the
        artifact's fidelity here; speed must be measured on the device.
        """
        return TFLiteTarget().load(artifact, model, threads=threads)


def _notes(run: dict[str, Any], dense: int, report: NNAPIReport,
           settings: ConvertSettings) -> tuple[str, ...]:
    """What the artifact is, what was changed for NNAPI, and the delegation verdict."""
    notes = [f"onnx2tf {run['onnx2tf']}: {run['files']['int8-io']}, full-integer int8 with "
             "int8 I/O: the runner quantizes inputs and dequantizes outputs on the CPU",
             f"calibrated on {run['calibration_samples']} samples, as given (mean 0, std 1)"]
    if dense:
        notes.append(f"{dense} FULLY_CONNECTED weight tensor{'s' * (dense != 1)} requantized "
                     "per-tensor (NNAPI takes per-channel weights only in convolutions)")
    notes.append(f"{report.summary()}; per the TFLite NNAPI delegate's op rules, not a device "
                 "run: whether the device's drivers run every op shows only on the device")
    if report.api_level >= 35:
        notes.append("NNAPI is deprecated from Android 15 (API 35)")
    if settings != DEFAULT_SETTINGS:
        notes.append("calibration and keep_float settings are not applied: onnx2tf's min-max "
                     "calibration, every op int8 (a float op would leave NNAPI)")
    notes.append("NNAPI cannot run on this host: verified on the CPU with LiteRT (same model)")
    return tuple(notes)
