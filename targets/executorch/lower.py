"""A model made into an ExecuTorch program: the reference ONNX read into PyTorch
(``edge.core.torch_graph``) and captured with ``torch.export`` or, when the reader cannot read
it and the user gave a TorchScript module, that module (torch's TorchScript-to-ExportedProgram
converter); then int8 through PT2E with the XNNPACK quantizer (symmetric, per channel,
calibrated on edge's calibration set), lowered to the XNNPACK delegate
(``to_edge_transform_and_lower`` with ``XnnpackPartitioner``) and serialized as a ``.pte``. The
operators the delegate leaves to ExecuTorch's portable kernels are counted from the lowered
program's graph: its call nodes outside the delegate's subgraphs.

torch, torchao and executorch load here only (the ``executorch`` extra).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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
from torch._export.converter import TS2EPConverter
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from edge.core.errors import PruneError, first_line
from edge.core.intake.pytorch import is_torchscript
from edge.core.model import sha256_file
from edge.core.torch_graph import to_torch
from edge.core.values import Dataset, ModelInfo, Origin
from targets.base import ConversionError

__all__ = ["Lowered", "lower"]

#: Graph nodes that are the delegate's plumbing, not operators left outside it.
_PLUMBING = ("executorch_call_delegate", "getitem")


class Lowered:
    """A serialized program and what the delegate took."""

    def __init__(self, buffer: bytes, delegated: int, outside: dict[str, int],
                 source: str) -> None:
        self.buffer = buffer
        self.source = source  # what was lowered: the original module or the reference
        self.delegated = delegated  # operators inside the XNNPACK subgraphs
        self.outside = outside  # operator -> count left to the portable kernels


def lower(model: ModelInfo, precision: str, calib: Dataset,
          origin: Origin | None = None) -> Lowered:
    """The model as a ``.pte`` program lowered to XNNPACK at ``precision`` (fp32, int8): from
    the reference, or from the user's TorchScript ``origin`` when the reader cannot read it."""
    example = _example(model, calib)
    with _quiet():
        graph, source = _captured(model, origin, example)
        try:
            if precision == "int8":
                graph = torch.export.export(_quantized(graph.module(), model, calib), example)
            edge = to_edge_transform_and_lower(graph, partitioner=[XnnpackPartitioner()])
            delegated, outside = _split(edge.exported_program().graph_module)
            buffer = edge.to_executorch().buffer
        except Exception as exc:  # export, quantizer and lowering raise many types
            raise ConversionError(f"executorch {precision} lowering failed: "
                                  f"{first_line(exc)}") from exc
    return Lowered(buffer, delegated, outside, source)


def _captured(model: ModelInfo, origin: Origin | None,
              example: tuple[torch.Tensor, ...]) -> tuple[Any, str]:
    """(the exported program, where it came from): the reference read into PyTorch (its
    programs delegate best: torch's TorchScript converter leaves symbolic shape arithmetic
    outside the delegate), else the user's original TorchScript module."""
    try:
        module = _module(model)
    except _Unreadable as unreadable:
        if origin is None:
            raise ConversionError(f"{unreadable}; the other runtimes' candidates convert the "
                                  "ONNX model itself") from None
        return _from_origin(origin, example, unreadable), \
            f"the original TorchScript {Path(origin.path).name} ({unreadable.op})"
    try:
        return torch.export.export(module, example), "the reference ONNX read into PyTorch"
    except Exception as exc:  # torch.export raises many types
        raise ConversionError(f"executorch export failed: {first_line(exc)}") from exc


class _Unreadable(Exception):
    """edge's ONNX-to-PyTorch reader cannot read the reference (``op``: what it lacks)."""

    def __init__(self, op: str) -> None:
        super().__init__("executorch needs the model in PyTorch, and edge's ONNX-to-PyTorch "
                         f"reader cannot read this one: {op}")
        self.op = op


def _from_origin(origin: Origin, example: tuple[torch.Tensor, ...],
                 unreadable: _Unreadable) -> Any:
    """The user's TorchScript module as an ExportedProgram (torch's TorchScript converter). A
    pickled module was unpickled once, at intake (--trust-model-code), and is not again."""
    path = Path(origin.path)
    if origin.args:
        why = "forward's --arg values are baked into the reference only"
    elif not is_torchscript(path):
        why = "a pickled module is unpickled only once, by edge's intake (save it as TorchScript)"
    elif sha256_file(path) != origin.sha256:
        why = f"{path.name} changed since edge read it"
    else:
        try:
            return TS2EPConverter(torch.jit.load(str(path), map_location="cpu"),
                                  example).convert()
        except Exception as exc:  # torch's TorchScript converter raises many types
            why = f"torch's TorchScript converter failed on {path.name}: {first_line(exc)}"
    raise ConversionError(f"{unreadable}, and the original cannot be used instead: {why}")


def _module(model: ModelInfo) -> torch.nn.Module:
    """The reference ONNX as a PyTorch module, or _Unreadable naming what it cannot read."""
    try:
        return to_torch(onnx.load(model.path), fold_shapes=True).eval()
    except PruneError as exc:
        raise _Unreadable(str(exc)) from None


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
