"""What a node reads: its inputs and the outer-scope values its subgraphs (If/Loop/Scan) read.
Ordering, costing and cutting a graph count both, so a cut never separates them."""

from __future__ import annotations

import onnx

__all__ = ["node_inputs"]


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Inputs of a node, including outer-scope names read by its subgraphs (If/Loop/Scan):
    the node depends on each, so ordering and cutting must keep them before it. (Names made
    inside a subgraph are listed too: ONNX forbids them to shadow an outer one.)"""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in graphs:
            for inner in sub.node:
                names.extend(node_inputs(inner))
    return names
