"""Structured pruning with distillation: a smaller model made from the reference, which then
competes through the normal convert -> verify -> measure -> select path.

The reference ONNX model is read into PyTorch (``edge.core.torch_graph``), torch-pruning
removes whole output channels (filters) of the convolution and linear layers by group
magnitude, leaving whole the layers whose channels a model output or a fixed reshape depends
on, the student is distilled from the reference on the calibration data (``prune_distill``),
and exported to ONNX. Its candidates are verified against the ORIGINAL reference's outputs like
any other. Results are cached by the model, the calibration data and the options.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from edge.core.cache import cache_key, cache_root
from edge.core.data import dataset_digest
from edge.core.errors import PruneError
from edge.core.files import write_atomic
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo, Pruning

__all__ = ["PruneOptions", "Pruned", "prune_model", "prunable_layers"]

log = logging.getLogger("edge")

#: Bump when the pruning or distillation recipe changes: cached pruned models are rebuilt.
RECIPE = 1
#: Ops a channel passes through unchanged (the walk from a layer's output goes on).
_PASS = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Clip",
                   "MaxPool", "AveragePool", "GlobalAveragePool", "Identity", "Dropout", "Pad",
                   "BatchNormalization", "PRelu"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
_WEIGHTED = ("Conv", "Gemm", "MatMul")


@dataclass(frozen=True, kw_only=True, slots=True)
class PruneOptions:
    """What ``--prune`` asked for."""

    ratio: float = 0.5  # the fraction of channels removed from each prunable layer
    budget_s: float = 180.0  # distillation time budget
    max_steps: int | None = None  # and step cap (tests)
    seed: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Pruned:
    """The pruned and distilled model, and how it was made."""

    model: ModelInfo
    pruning: Pruning


def prune_model(model: ModelInfo, calib: Dataset, options: PruneOptions) -> Pruned:
    """Prune and distill ``model`` (cached); raises ``PruneError`` when it cannot."""
    import torch

    workdir = cache_root() / "prune" / _key(model, calib, options)
    path, record = workdir / "pruned.onnx", workdir / "pruning.json"
    cached = _cached(path, record)
    if cached is not None:
        return cached
    threads = torch.get_num_threads()
    torch.set_num_threads(_threads(model))
    try:
        pruning = _prune_and_distill(model, calib, options, workdir / "tmp.onnx")
    finally:
        torch.set_num_threads(threads)
    write_atomic(record, json.dumps(pruning.to_json()))  # whole, before the model is renamed
    os.replace(workdir / "tmp.onnx", path)
    return Pruned(model=inspect_model(path), pruning=pruning)


def _cached(path: Path, record: Path) -> Pruned | None:
    """The pruned model an earlier run kept, or None (also for an entry it left unreadable:
    torn by a full disk or a crash; it is made again)."""
    if not (path.is_file() and record.is_file()):
        return None
    try:
        return Pruned(model=inspect_model(path),
                      pruning=Pruning.from_json(json.loads(record.read_text())))
    except Exception:  # noqa: BLE001 - a torn model or record: any reader's error
        log.warning("%s: a broken cache entry (unreadable); making it again", path.parent)
        return None


def _threads(model: ModelInfo) -> int:
    """Torch threads for distillation: one for a small model (below ~100M MACs a step is too
    short to repay the threads' synchronisation: 2x faster on one thread here), else all."""
    return 1 if model.macs < 100_000_000 else os.cpu_count() or 1


def _key(model: ModelInfo, calib: Dataset, options: PruneOptions) -> str:
    return cache_key(model.sha256, dataset_digest(calib), options.ratio, options.budget_s,
                     options.max_steps, options.seed, _source_digest(), recipe=RECIPE,
                     converters=["torch", "torch-pruning", "onnx", "numpy"])


def _source_digest() -> str:
    """sha256 (16 hex) of the pruning modules' code: an edit never reuses an old result."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in (here / "prune.py", here.parent / "core" / "torch_graph.py",
                 here / "prune_distill.py"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _prune_and_distill(model: ModelInfo, calib: Dataset, options: PruneOptions,
                       out: Path) -> Pruning:
    """Prune, distill and export to ``out``; what was done."""
    from edge.core.torch_graph import to_torch
    from edge.flows.prune_distill import distill

    proto = onnx.load(model.path)
    teacher, student = to_torch(proto), to_torch(proto)
    inputs = _stacked(model, calib)
    whole = _prune(student, [x[:1] for x in inputs], options.ratio)
    log.info("pruned %s; distilling for up to %.0f s on %d samples", Path(model.path).name,
             options.budget_s, len(calib))
    done = distill(student, teacher, inputs, budget_s=options.budget_s,
                   max_steps=options.max_steps, seed=options.seed)
    _export(student, model, [x[:1] for x in inputs], out)
    after = inspect_model(out)
    return Pruning(
        ratio=options.ratio, layers_pruned=_layer_count(teacher) - whole,
        layers_whole=whole, channels_before=_channels(teacher),
        channels_after=_channels(student), params_before=model.params,
        params_after=after.params, sparsity=round(1 - after.params / max(model.params, 1), 4),
        macs_before=model.macs, macs_after=after.macs, distill_seconds=round(done.seconds, 2),
        distill_steps=done.steps, distill_samples=done.samples,
        loss_before=round(done.loss_before, 6), loss_after=round(done.loss_after, 6),
        sha256=after.sha256)


def _stacked(model: ModelInfo, calib: Dataset) -> list[Any]:
    """One float32 tensor per model input: the calibration samples stacked on axis 0."""
    import torch

    stacked = []
    for spec in model.inputs:
        if not spec.dtype.startswith("float"):
            raise PruneError(f"input {spec.name} is {spec.dtype}: pruning reads float inputs")
        rows = [np.asarray(feed[spec.name], dtype=np.float32) for feed in calib.feeds]
        stacked.append(torch.from_numpy(np.concatenate(
            [r.reshape(spec.static_shape) for r in rows])))
    return stacked


# ---------------------------------------------------------------- which channels, and pruning


def _prune(student: Any, example: list[Any], ratio: float) -> int:
    """Remove ``ratio`` of the channels of every prunable layer group; the number of weighted
    layers left whole."""
    import torch
    import torch_pruning as tp

    _refuse_channel_pads(student)
    want = [tuple(o.shape) for o in student(*example)]
    keep = prunable_layers(student)
    whole = [_weighted(student.layers[key]) for key in _weighted_keys(student)
             if key not in keep]
    pruner = tp.pruner.MetaPruner(student, tuple(example), importance=tp.importance.
                                  GroupMagnitudeImportance(p=2), pruning_ratio=ratio,
                                  ignored_layers=whole)
    pruner.step()
    with torch.no_grad():
        got = [tuple(o.shape) for o in student(*example)]
    if got != want:
        raise PruneError(f"pruning changed the output shapes {want} to {got}")
    return len(whole)


def _refuse_channel_pads(module: Any) -> None:
    """A Pad that adds channels (a residual widened by zeros, as in MediaPipe's blocks) ties
    channel counts torch-pruning cannot follow: refused by name."""
    for node in module.nodes:
        if node.op == "Pad" and len(node.inputs) > 1 and node.inputs[1] in module.consts:
            pads = module.consts[node.inputs[1]].tolist()
            rank = len(pads) // 2
            if rank > 1 and (pads[1] or pads[rank + 1]):
                raise PruneError(f"Pad {node.outputs[0]} adds channels: channel pruning "
                                 "cannot follow it")


def prunable_layers(module: Any) -> set[str]:
    """Keys of the weighted layers whose output channels can go: every path from their output
    reaches another weighted layer through channel-wise ops (activations, pools, batch norm,
    element-wise ops with another activation or a scalar), or a flatten into a linear layer;
    never a model output, a fixed reshape, a transpose or a concatenation."""
    consumers: dict[str, list[Any]] = {}
    for node in module.nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    return {node.layer for node in module.nodes if node.layer in _weighted_keys(module)
            and _reaches_layers(node.outputs[0], consumers, module)}


def _reaches_layers(tensor: str, consumers: dict[str, list[Any]], module: Any) -> bool:
    stack, seen = [(tensor, False)], set()
    while stack:
        name, flat = stack.pop()
        if name in module.output_names:
            return False
        for node in consumers.get(name, []):
            step = _step(node, name, flat, module)
            if step is None:
                return False
            if step != "end" and (node.outputs[0], step == "flat") not in seen:
                seen.add((node.outputs[0], step == "flat"))
                stack.append((node.outputs[0], step == "flat"))
    return True


def _step(node: Any, tensor: str, flat: bool, module: Any) -> str | None:
    """How the walk goes through ``node`` reading ``tensor``: ``end`` (a weighted layer reads
    the channels), ``pass``, ``flat`` (flattened), or None (the channels are fixed here)."""
    if node.op in _WEIGHTED and node.layer is not None and node.inputs[0] == tensor:
        return "end" if (node.op != "Conv" or not flat) else None
    if node.op in _PASS and node.inputs[0] == tensor and not flat:
        return "pass"
    if node.op in _BINARY:
        other = [n for n in node.inputs if n != tensor]
        consts = [module.consts[n] for n in other if n in module.consts]
        return "pass" if all(c.numel() == 1 for c in consts) else None
    if node.op == "Flatten" and node.attrs.get("axis", 1) == 1:
        return "flat"
    if node.op == "Reshape" and node.inputs[1] in module.consts and len(
            module.consts[node.inputs[1]]) == 2:
        return "flat"
    if node.op == "Squeeze" and not flat:
        axes = module.consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
        axes = axes.tolist() if axes is not None else node.attrs.get("axes")
        return "pass" if axes and all(a >= 2 or -2 <= a < 0 for a in axes) else None
    return None


def _weighted_keys(module: Any) -> list[str]:
    return [n.layer for n in module.nodes if n.layer is not None and n.op in _WEIGHTED]


def _weighted(layer: Any) -> Any:
    """The Conv/Linear inside a padded layer."""
    return getattr(layer, "inner", layer)


def _layer_count(module: Any) -> int:
    return len(_weighted_keys(module))


def _channels(module: Any) -> int:
    """Output channels of all weighted layers."""
    total = 0
    for key in _weighted_keys(module):
        layer = _weighted(module.layers[key])
        total += int(getattr(layer, "out_channels", 0) or getattr(layer, "out_features", 0))
    return total


def _export(student: Any, model: ModelInfo, example: list[Any], out: Path) -> None:
    """The student as an ONNX model with the reference's input and output names."""
    import torch

    out.parent.mkdir(parents=True, exist_ok=True)
    student.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on constant shapes
        torch.onnx.export(student, tuple(example), str(out),
                          input_names=[i.name for i in model.inputs],
                          output_names=[o.name for o in model.outputs],
                          opset_version=17, dynamo=False, do_constant_folding=True)
    _fold_constants(out)


def _fold_constants(path: Path) -> None:
    """Fold the exporter's constant subgraphs in place (onnxruntime's basic level: constant
    folding and redundant nodes only, standard ONNX ops out). F.pad's pads leave the exporter as
    a ConstantOfShape/Concat/Slice chain, which hides every later shape from shape inference:
    the pruned MediaPipe hand model counted 0.6M MACs instead of 87.5M."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    folded = path.with_name(path.stem + ".folded.onnx")
    options.optimized_model_filepath = str(folded)
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    proto = onnx.load(folded)
    used = {n.domain for n in proto.graph.node} | {""}
    kept = [o for o in proto.opset_import if o.domain in used]  # onnxruntime lists them all
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
    onnx.save(proto, path)
    folded.unlink()
