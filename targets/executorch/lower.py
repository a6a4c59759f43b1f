"""The reference ONNX made into an ExecuTorch program: read into PyTorch
(``edge.core.torch_graph``), captured with ``torch.export``, int8 through PT2E with the XNNPACK
quantizer (symmetric, per channel, calibrated on edge's calibration set), lowered to the XNNPACK
delegate (``to_edge_transform_and_lower`` with ``XnnpackPartitioner``) and serialized as a
``.pte``. The operators the delegate leaves to ExecuTorch's portable kernels are counted from the
lowered program's graph: its call nodes outside the delegate's subgraphs.

torch, torchao and executorch load here only (the ``executorch`` extra).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from edge.core.errors import PruneError, first_line
from edge.core.torch_graph import to_torch
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError

__all__ = ["Lowered", "lower"]

#: Graph nodes that are the delegate's plumbing, not operators left outside it.
_PLUMBING = ("executorch_call_delegate", "getitem")


class Lowered:
    """A serialized program and what the delegate took."""

    def __init__(self, buffer: bytes, delegated: int, outside: dict[str, int]) -> None:
        self.buffer = buffer
        self.delegated = delegated  # operators inside the XNNPACK subgraphs
        self.outside = outside  # operator -> count left to the portable kernels


def lower(model: ModelInfo, precision: str, calib: Dataset) -> Lowered:
    """The reference as a ``.pte`` program lowered to XNNPACK at ``precision`` (fp32, int8)."""
    module = _module(model)
    example = _example(model, calib)
    with _quiet():
        try:
            graph = torch.export.export(module, example)
            if precision == "int8":
                graph = torch.export.export(_quantized(graph.module(), model, calib), example)
            edge = to_edge_transform_and_lower(graph, partitioner=[XnnpackPartitioner()])
            delegated, outside = _split(edge.exported_program().graph_module)
            buffer = edge.to_executorch().buffer
        except Exception as exc:  # export, quantizer and lowering raise many types
            raise ConversionError(f"executorch {precision} lowering failed: "
                                  f"{first_line(exc)}") from exc
    return Lowered(buffer, delegated, outside)


def _module(model: ModelInfo) -> torch.nn.Module:
    """The reference ONNX as a PyTorch module, or ConversionError naming what it cannot read."""
    try:
        return to_torch(onnx.load(model.path), fold_shapes=True).eval()
    except PruneError as exc:
        raise ConversionError(f"executorch needs the model in PyTorch, and edge's "
                              f"ONNX-to-PyTorch reader cannot read this one: {exc}; the other "
                              "runtimes' candidates convert the ONNX model itself") from None


def _example(model: ModelInfo, calib: Dataset) -> tuple[torch.Tensor, ...]:
    """One calibration sample (or zeros of the reference's shapes) as export's example."""
    if len(calib):
        return _tensors(model, calib.feeds[0])
    return tuple(torch.zeros(spec.static_shape, dtype=getattr(torch, spec.dtype))
                 for spec in model.inputs)


def _tensors(model: ModelInfo, feed: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    """A feed as the module's positional inputs, in the reference's input order."""
    return tuple(torch.from_numpy(_plain(feed[spec.name])) for spec in model.inputs)


def _plain(array: np.ndarray) -> np.ndarray:
    """A fresh C-ordered copy: a sample sliced from a batch may carry a 0 stride on its batch
    dim, which ExecuTorch's memory planning refuses."""
    return np.array(array, order="C", copy=True)


def _quantized(module: Any, model: ModelInfo, calib: Dataset) -> Any:
    """PT2E: the XNNPACK quantizer's symmetric per-channel int8, calibrated on ``calib``."""
    if not len(calib):
        raise ConversionError("executorch int8 needs calibration samples; none were given")
    config = get_symmetric_quantization_config(is_per_channel=True)
    prepared = prepare_pt2e(module, XNNPACKQuantizer().set_global(config))
    with torch.no_grad():
        for feed in calib.feeds:
            prepared(*_tensors(model, feed))
    return convert_pt2e(prepared)


def _split(graph_module: Any) -> tuple[int, dict[str, int]]:
    """(operators inside the delegate's subgraphs, operator -> count outside them)."""
    inside = sum(_calls(lowered.original_module.graph_module)
                 for lowered in _lowered_modules(graph_module))
    outside = Counter(_op_name(node) for node in graph_module.graph.nodes
                      if node.op == "call_function" and _op_name(node) not in _PLUMBING)
    return inside, dict(sorted(outside.items()))


def _lowered_modules(graph_module: Any) -> Iterator[Any]:
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.target.startswith("lowered_module"):
            yield getattr(graph_module, node.target)


def _calls(graph_module: Any) -> int:
    return sum(node.op == "call_function" and _op_name(node) not in _PLUMBING
               for node in graph_module.graph.nodes)


def _op_name(node: Any) -> str:
    """``aten.convolution`` for ``aten.convolution.default``; plain names as they are."""
    name = getattr(node.target, "__name__", str(node.target))
    overload = getattr(node.target, "_overloadname", None)
    return name.removesuffix(f".{overload}") if overload else name


@contextmanager
def _quiet() -> Iterator[None]:
    """export's and the quantizer's warnings and info logs stay out of edge's output."""
    level = logging.root.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.root.setLevel(max(level, logging.WARNING))
        try:
            yield
        finally:
            logging.root.setLevel(level)
