"""Which operators the Edge TPU runs: Coral's supported-operations table, as data, and the
fallbacks it predicts for a model's operators (an int8 .tflite's, or the reference ONNX's).

Source: coral.ai/docs/edgetpu/models-intro, "Supported operations" (Edge TPU Compiler 16.0,
runtime version 14, the last release). The names, minimum runtime versions and limitations
below are that table's, written down from it here; the first half (Add .. ResizeBilinear) was
cross-checked against Axis's copy for the ARTPEC-7 DLPU (an Edge TPU), the rest is from the
Coral page alone. The same page's model requirements, applied by the prediction:
- tensors quantized to 8 bits (int8 or uint8), sizes and parameters constant at compile time;
- the compiler makes ONE Edge TPU subgraph: at the first operator it cannot map, it stops, and
  every operator after it runs on the CPU even when the table supports it (the compiler's log
  says "More than one subgraph is not supported" for those).
The limitations are not checked (they depend on tensor values and shapes the compiler sees):
a predicted "all on the Edge TPU" is an upper bound the compiler's own log confirms or not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_RUNTIME", "ONNX_TO_TFLITE", "SUPPORTED", "SupportedOp", "onnx_ops",
           "predict", "tflite_ops"]

#: libedgetpu 16.0 (Mendel's and the last apt release) is Edge TPU runtime version 14.
DEFAULT_RUNTIME = 14
_ALL = 10  # "All" in the table: every runtime version


@dataclass(frozen=True, kw_only=True, slots=True)
class SupportedOp:
    """One row of Coral's table: a TFLite builtin the Edge TPU runs."""

    runtime: int  # minimum Edge TPU runtime version (_ALL: every version)
    limits: str = ""  # the table's "Known limitations", as it words them


def _op(runtime: int = _ALL, limits: str = "") -> SupportedOp:
    return SupportedOp(runtime=runtime, limits=limits)


_NO_FUSED = "No fused activation function."
_RESIZE = ("Input/output is a 3-dimensional tensor. Depending on input/output size, this "
           "operation may not be mapped to the Edge TPU to avoid loss in precision.")

#: TFLite builtin name -> its row of Coral's "Supported operations" table (source above).
SUPPORTED: dict[str, SupportedOp] = {
    "ADD": _op(),
    "AVERAGE_POOL_2D": _op(limits=_NO_FUSED),
    "CONCATENATION": _op(limits=f"{_NO_FUSED} If any input is a compile-time constant tensor, "
                                "there must be only 2 inputs, and this constant tensor must be "
                                "all zeroes (effectively, a zero-padding op)."),
    "CONV_2D": _op(limits="Must use the same dilation in x and y dimensions."),
    "DEPTHWISE_CONV_2D": _op(limits="Must use the same dilation in x and y dimensions "
                                    "(runtime 13+; dilated kernels not at all before)."),
    "EXPAND_DIMS": _op(13),
    "FULLY_CONNECTED": _op(limits="Only the default format is supported for fully-connected "
                                  "weights. Output tensor is one-dimensional."),
    "L2_NORMALIZATION": _op(),
    "LOGISTIC": _op(),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _op(14, "Unidirectional LSTM only."),
    "MAXIMUM": _op(),
    "MAX_POOL_2D": _op(limits=_NO_FUSED),
    "MEAN": _op(limits="No reduction in batch dimension. If a z-reduction, the z-dimension "
                       "must be multiple of 4 (runtime 13+; x/y reductions only before)."),
    "MINIMUM": _op(),
    "MUL": _op(),
    "PACK": _op(13, "No packing in batch dimension."),
    "PAD": _op(13, "No padding in batch dimension."),
    "PRELU": _op(13, "Alpha needs to be a compile-time constant; 1-dimensional (only the "
                     "innermost dimension may be > 1)."),
    "QUANTIZE": _op(13),
    "REDUCE_MAX": _op(14, "Cannot operate on the batch dimension."),
    "REDUCE_MIN": _op(14, "Cannot operate on the batch dimension."),
    "RELU": _op(),
    "RELU6": _op(),
    "RELU_N1_TO_1": _op(),
    "RESHAPE": _op(limits="Certain reshapes might not be mapped for large tensor sizes."),
    "RESIZE_BILINEAR": _op(limits=_RESIZE),
    "RESIZE_NEAREST_NEIGHBOR": _op(limits=_RESIZE),
    "RSQRT": _op(14),
    "SLICE": _op(),
    "SOFTMAX": _op(limits="Supports only 1-D input tensor with a max of 16,000 elements."),
    "SPACE_TO_DEPTH": _op(),
    "SPLIT": _op(limits="No splitting in batch dimension."),
    "SQUARED_DIFFERENCE": _op(14),
    "SQUEEZE": _op(),
    "STRIDED_SLICE": _op(limits="Supported only when all strides are equal to 1 (effectively "
                                "a Slice op), with ellipsis-axis-mask == 0 and "
                                "new-axis-mask == 0."),
    "SUB": _op(),
    "SUM": _op(13, "Cannot operate on the batch dimension."),
    "TANH": _op(),
    "TRANSPOSE": _op(14),
    "TRANSPOSE_CONV": _op(13),
}

#: ONNX op type -> the TFLite builtin onnx2tf makes of it ("" when it leaves none: folded into
#: a neighbour or a constant). An ONNX op absent here keeps its own name, which the table
#: never has: it is predicted on the CPU (the int8 .tflite's own ops say for sure).
ONNX_TO_TFLITE: dict[str, str] = {
    "Add": "ADD", "AveragePool": "AVERAGE_POOL_2D", "Concat": "CONCATENATION",
    "Conv": "CONV_2D", "ConvTranspose": "TRANSPOSE_CONV", "Gemm": "FULLY_CONNECTED",
    "MatMul": "FULLY_CONNECTED", "Sigmoid": "LOGISTIC", "Max": "MAXIMUM",
    "MaxPool": "MAX_POOL_2D", "GlobalAveragePool": "MEAN", "ReduceMean": "MEAN",
    "Min": "MINIMUM", "Mul": "MUL", "Pad": "PAD", "PRelu": "PRELU", "ReduceMax": "REDUCE_MAX",
    "ReduceMin": "REDUCE_MIN", "Relu": "RELU", "Reshape": "RESHAPE", "Flatten": "RESHAPE",
    "Unsqueeze": "EXPAND_DIMS", "Squeeze": "SQUEEZE", "Resize": "RESIZE_BILINEAR",
    "Upsample": "RESIZE_NEAREST_NEIGHBOR", "Slice": "STRIDED_SLICE", "Softmax": "SOFTMAX",
    "SpaceToDepth": "SPACE_TO_DEPTH", "Split": "SPLIT", "Sub": "SUB", "ReduceSum": "SUM",
    "Tanh": "TANH", "Transpose": "TRANSPOSE", "Div": "DIV", "LeakyRelu": "LEAKY_RELU",
    "HardSwish": "HARD_SWISH", "Exp": "EXP", "Log": "LOG", "Sqrt": "SQRT", "Pow": "POW",
    "Gather": "GATHER", "Erf": "GELU", "Cast": "CAST", "Neg": "NEG", "Abs": "ABS",
    "Clip": "RELU6", "DepthToSpace": "DEPTH_TO_SPACE", "LSTM": "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "Identity": "", "Constant": "", "Dropout": "", "BatchNormalization": "",
    "QuantizeLinear": "", "DequantizeLinear": "",
}


def predict(ops: Iterable[str], runtime: int = DEFAULT_RUNTIME) -> tuple[str, ...]:
    """The distinct ops (in order) that would run on the CPU: those the table lacks (or only
    from a later runtime), and every op after the first of them (one Edge TPU subgraph)."""
    fallen: list[str] = []
    for op in ops:
        row = SUPPORTED.get(op)
        if fallen or row is None or row.runtime > runtime:
            fallen.append(op)
    return tuple(dict.fromkeys(fallen))


def tflite_ops(path: Path) -> tuple[str, ...]:
    """The main subgraph's builtin op names in execution order (CUSTOM(name) for custom ops)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items()
             if not k.startswith("_") and isinstance(v, int)}
    return tuple(_name(model.operatorCodes[op.opcodeIndex], names)
                 for op in model.subgraphs[0].operators or ())


def _name(code: Any, names: dict[int, str]) -> str:
    number = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    name = names.get(number, f"BUILTIN_{number}")
    if name != "CUSTOM":
        return name
    custom = code.customCode
    return f"CUSTOM({custom.decode() if isinstance(custom, bytes) else custom})"


def onnx_ops(path: Path) -> tuple[str, ...]:
    """The ONNX graph's nodes in order, as the TFLite builtins onnx2tf makes of them."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    mapped = (_tflite_name(node) for node in graph.node)
    return tuple(name for name in mapped if name)


def _tflite_name(node: Any) -> str:
    """A depthwise Conv (group = channels > 1) is DEPTHWISE_CONV_2D; the rest by the table."""
    if node.op_type == "Conv" and _group(node) > 1:
        return "DEPTHWISE_CONV_2D"
    return ONNX_TO_TFLITE.get(node.op_type, node.op_type)


def _group(node: Any) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "group"), 1)
