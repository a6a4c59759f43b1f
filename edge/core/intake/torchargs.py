"""A PyTorch forward's non-tensor arguments (``forward(x: Tensor, sr: int)``): their values come
from ``--arg NAME=VALUE`` and are baked into the exported reference as constants."""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edge.core.errors import UsageError
from edge.core.intake.branches import inline_branch

log = logging.getLogger("edge")

#: Forward argument types a value may be given for, and how the text becomes one.
SCALARS = {"int": int, "float": float, "bool": None, "str": str}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_arg_flags(texts: Sequence[str]) -> dict[str, str]:
    """``--arg NAME=VALUE`` flags (repeatable) as {name: value text}; the forward's schema
    decides the value's type when the module is read."""
    values: dict[str, str] = {}
    for text in texts:
        name, eq, value = text.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise UsageError(f"--arg {text!r}: expected NAME=VALUE, e.g. --arg sr=16000")
        if name.strip() in values:
            raise UsageError(f"--arg {text}: argument '{name.strip()}' is given twice")
        values[name.strip()] = value.strip()
    return values


def baked_args(module: Any, values: Mapping[str, str], pins: Mapping[str, Any],
               source: Path) -> dict[str, Any]:
    """The typed values of forward's non-tensor arguments: every required one must be given
    (--arg), and --arg names only non-tensor arguments of forward."""
    types = forward_types(module)
    for name in values:
        if name not in types:
            raise UsageError(f"--arg {name}=...: {source.name}'s forward() has no argument "
                             f"'{name}'; its arguments: {', '.join(types)}")
        if types[name][0] not in SCALARS:
            raise UsageError(f"--arg {name}=...: forward's '{name}' is a {types[name][0]}, not "
                             f"an int, float, bool or str; give a tensor's dims with --shape "
                             f"{name}=DIMS")
    for name, (kind, required) in types.items():
        if kind in SCALARS and name not in values and (required or name in pins):
            raise UsageError(f"{source.name}: forward takes {name}: {kind}, not a tensor; give "
                             f"its value with --arg {name}=VALUE (it is baked into the "
                             "exported model)")
    return {n: _typed(n, v, types[n][0]) for n, v in values.items()}


def _typed(name: str, text: str, kind: str) -> Any:
    """``text`` as forward's ``kind`` (int, float, bool or str)."""
    if kind == "bool":
        if text.lower() not in _TRUE + _FALSE:
            raise UsageError(f"--arg {name}={text}: '{name}' is a bool; give true or false")
        return text.lower() in _TRUE
    try:
        value = SCALARS[kind](text)  # type: ignore[misc]
    except ValueError:
        raise UsageError(f"--arg {name}={text}: forward's '{name}' is {_a(kind)}; give "
                         f"{_a(kind)} value, e.g. --arg {name}="
                         f"{'16000' if kind == 'int' else '0.5'}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"--arg {name}={text}: give a finite number (NaN and infinities "
                         "cannot be baked into the exported model)")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise UsageError(f"--arg {name}={text}: out of the int64 range the exported model "
                         "holds")
    return value


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def forward_types(module: Any) -> dict[str, tuple[str, bool]]:
    """{name: (type, required)} of forward's positional arguments, without self; the type is
    ``Tensor``, a scalar name of SCALARS, or another type's text."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        args = module.forward.schema.arguments[1:]  # type: ignore[attr-defined]
        return {a.name: (_bare(str(a.type)), not a.has_default_value()) for a in args}
    sig = inspect.signature(module.forward)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return {p.name: (_annotated(p.annotation), p.default is inspect.Parameter.empty)
            for p in sig.parameters.values() if p.kind in kinds}


def _bare(text: str) -> str:
    """``Optional[int]`` -> ``int``: a value given for an optional argument has its type."""
    inner = text.removeprefix("Optional[").removesuffix("]") if text.startswith("Optional[") \
        else text
    return inner.removesuffix("?")


def _annotated(annotation: Any) -> str:
    """An eager forward's annotation as a type name; unannotated arguments are tensors."""
    if annotation is inspect.Parameter.empty:
        return "Tensor"
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return name if name in SCALARS else "Tensor"


def positional(module: Any, given: Mapping[str, Any]) -> tuple[tuple[Any, ...], list[str]]:
    """Forward's positional arguments up to the last one ``given`` (tensors and --arg values;
    one skipped takes its default), and the names the exporter gives its graph inputs: a
    TorchScript module's scalars become inputs too (bake_inputs makes them constants), an
    eager module's are traced as constants."""
    import torch

    scripted = isinstance(module, torch.jit.ScriptModule)
    order = list(forward_types(module))
    last = max(order.index(n) for n in given)
    args = tuple(given[n] if n in given else _default(module, n) for n in order[: last + 1])
    names = [n for n, a in zip(order, args, strict=False) if scripted or torch.is_tensor(a)]
    return args, names


def _default(module: Any, name: str) -> Any:
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        schema = module.forward.schema.arguments[1:]  # type: ignore[attr-defined]
        return next(a.default_value for a in schema if a.name == name)
    return inspect.signature(module.forward).parameters[name].default


def bake_inputs(model: onnx.ModelProto, baked: Mapping[str, Any]) -> onnx.ModelProto:
    """The exported model with the graph inputs of the --arg values made constants."""
    graph = model.graph
    for value in [v for v in graph.input if v.name in baked]:
        kind = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        graph.input.remove(value)
        graph.initializer.append(
            numpy_helper.from_array(np.asarray(baked[value.name], dtype=kind), value.name))
    return model


def fold_baked_ifs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each main-graph If whose condition follows from constants alone (a
    baked --arg, as ``sr == 16000``) replaced by the branch it takes, until none is left."""
    while True:
        step = next(((i, c) for i in _ifs(model) if (c := _constant_cond(model, i)) is not None),
                    None)
        if step is None:
            return _without_dead(model)
        index, cond = step
        model = inline_branch(model, index, "then_branch" if cond else "else_branch")


def _without_dead(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the nodes and initializers no graph output depends on (the branch
    not taken: the 8 kHz network of a model baked at sr=16000)."""
    graph = model.graph
    live = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if live.intersection(node.output):
            kept.append(node)
            live.update(_used(node))
    staged = list(reversed(kept))
    del graph.node[:]
    graph.node.extend(staged)
    weights = [w for w in graph.initializer if w.name in live]
    del graph.initializer[:]
    graph.initializer.extend(weights)
    return model


def _used(node: onnx.NodeProto) -> set[str]:
    """The names ``node`` reads, its subgraphs' (outer-scope) reads included."""
    names = set(node.input)
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            names.update(n for inner in sub.node for n in _used(inner))
    return names


def _ifs(model: onnx.ModelProto) -> list[int]:
    return [i for i, n in enumerate(model.graph.node) if n.op_type == "If"]


def _constant_cond(model: onnx.ModelProto, index: int) -> bool | None:
    """The value of the If ``index``'s condition when only initializers feed it, else None."""
    graph = model.graph
    known = {i.name for i in graph.initializer} | {""}
    feeding = []
    for node in graph.node[:index]:
        if node.op_type not in ("If", "Loop", "Scan") and set(node.input) <= known:
            feeding.append(node)
            known.update(node.output)
    cond = graph.node[index].input[0]
    if cond not in known:
        return None
    probe = helper.make_model(
        helper.make_graph(feeding, "cond", [], [helper.make_tensor_value_info(cond, 0, None)],
                          initializer=list(graph.initializer)),
        opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        (value,) = ReferenceEvaluator(probe).run(None, {})
    except Exception:  # noqa: BLE001 - an op the evaluator lacks: the If stays
        return None
    return bool(np.asarray(value).reshape(-1)[0])


@contextlib.contextmanager
def int_not() -> Iterator[None]:
    """While exporting: Python's ``not`` on an int (``aten::__not_``; TorchScript code such as
    ``not len(state)``) as ONNX Not of the value cast to bool; the exporter refuses it else."""
    import torch

    def symbolic(g: Any, value: Any) -> Any:
        return g.op("Not", g.op("Cast", value, to_i=onnx.TensorProto.BOOL))

    torch.onnx.register_custom_op_symbolic("aten::__not_", symbolic, 9)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::__not_", 9)


def warn_state(module: Any, source: Path) -> None:
    """One warning when the TorchScript module sets its own attributes in forward (state kept
    between calls, as a streaming model's reset_states): the export holds the state as it is
    at load time, as constants."""
    import torch

    if not isinstance(module, torch.jit.ScriptModule):
        return
    try:
        graph = str(module.inlined_graph)
    except (RuntimeError, AttributeError):
        return
    if "prim::SetAttr" in graph:
        log.warning("%s: its forward keeps state between calls (it sets module attributes); "
                    "the export holds that state as constants, as after loading: each call of "
                    "the converted model starts from a fresh state", source.name)
