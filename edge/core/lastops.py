"""The last op behind each graph output, read at intake: a hint for the output's kind.

Walking back from a graph output through ops that only move or retype values (Identity,
Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Cast, Slice, Gather, ...) reaches the op that
computed it: Softmax, LogSoftmax, Sigmoid, ArgMax, TopK, or anything else. An output fed by a
graph input or a weight has no last op ('').
"""

from __future__ import annotations

import onnx

__all__ = ["SHAPE_ONLY", "last_ops"]

#: ops that change where values sit or their type, not what they are
SHAPE_ONLY = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                        "Cast", "Slice", "Gather", "Expand", "Dropout", "DepthToSpace",
                        "SpaceToDepth"})

_MAX_STEPS = 64  # a chain of shape-only ops longer than this is not followed further


def last_ops(model: onnx.ModelProto) -> dict[str, str]:
    """The op type behind every graph output, by output name ('' when none)."""
    producers = {out: node for node in model.graph.node for out in node.output if out}
    return {value.name: _behind(value.name, producers) for value in model.graph.output}


def _behind(name: str, producers: dict[str, onnx.NodeProto]) -> str:
    """The first op that is not shape-only on the way back from ``name``."""
    for _ in range(_MAX_STEPS):
        node = producers.get(name)
        if node is None:
            return ""
        if node.op_type not in SHAPE_ONLY or not node.input:
            return node.op_type
        name = node.input[0]
    return ""
