"""Which ONNX operators rknn-toolkit2 2.5.0 leaves on the CPU, before any conversion (the plan,
``--dry-run``). After a conversion the build's own layer table says it (targets.rknn.convert).

``CPU_OPS`` is measured, not copied from a list: targets/rknn/probe_ops.py built one tiny
float graph per operator (a 1x8x8x8 tensor through it, opset 18) fp16 for rk3588 and read
where the compiler placed each layer. Of 66 operators probed, these 22 compiled to CPU
layers (LayerNormalization's build raised: left out). Context can move others (a Reshape
feeding a graph output was a CPU layer in the digits CNN), and int8 or another SoC may
differ: the prediction is a lower bound.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CPU_OPS", "PROBED", "predict_cpu_ops"]

CPU_OPS = frozenset({
    "Ceil", "Celu", "Cos", "Erf", "Exp", "Floor", "LRN", "Log", "LogSoftmax", "Min", "Mish",
    "Pow", "Reciprocal", "ReduceMax", "ReduceMin", "ReduceProd", "Round", "Selu", "Sign", "Sin",
    "Softsign", "SpaceToDepth",
})
#: Every operator the probe placed (those not in CPU_OPS ran on the NPU).
PROBED = CPU_OPS | frozenset({
    "Abs", "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Conv",
    "ConvTranspose", "DepthToSpace", "Div", "Elu", "Flatten", "Gather", "GlobalAveragePool",
    "GlobalMaxPool", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "InstanceNormalization",
    "LeakyRelu", "MatMul", "Max", "MaxPool", "Mul", "Neg", "PRelu", "Pad", "ReduceL2",
    "ReduceMean", "ReduceSum", "Relu", "Reshape", "Resize", "Sigmoid", "Slice", "Softmax",
    "Softplus", "Sqrt", "Sub", "Tanh", "Tile", "Transpose",
})


def predict_cpu_ops(ops: Mapping[str, int]) -> tuple[str, ...]:
    """The operator types of a model (``ModelInfo.ops``) the compiler puts on the CPU, sorted."""
    return tuple(sorted(op for op, count in ops.items() if count and op in CPU_OPS))
