"""If branches that pinned input dims rule out.

Pinning dims lets ONNX Runtime infer static shapes through every branch of every ``If`` when it
loads a model, and a branch built for other input shapes then fails to infer, so the whole model
is refused although that branch could never run at these shapes. silero-vad 5 is the case: its
``If`` on the 0-d ``sr`` input holds a 16 kHz and an 8 kHz network, and at 512 samples (the
16 kHz chunk) the 8 kHz one hands its LSTM a rank-5 tensor, at run time as at load time.

``loadable_at_pins`` keeps such a model usable: a main-graph ``If`` exactly one of whose
branches loads is replaced by that branch (inlined), one ``If`` at a time until ONNX Runtime
loads the model. Inputs the dropped branch would have taken (another ``sr``) failed in the
source at these shapes; they now run the kept branch. What was dropped is a warning, and is
written in the model's metadata (``NOTES_KEY``) so a cached copy says it again (``repeat_notes``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import helper

from edge.core.errors import UsageError, first_line

log = logging.getLogger("edge")

_BRANCHES = ("then_branch", "else_branch")

#: metadata_props key of the reference's notes on the If branches it dropped (one a line)
NOTES_KEY = "edge.dropped_if_branches"

_PROTOBUF_LIMIT = 2**31 - 1  # a bigger model cannot be handed to ONNX Runtime from memory


def loadable_at_pins(model: onnx.ModelProto, source: Path, pinned: bool) -> onnx.ModelProto:
    """``model`` (dims pinned when ``pinned``) as ONNX Runtime loads it: unchanged when it
    loads or has no main-graph ``If``; else with the ``If`` branches the pins rule out
    dropped. A model that still does not load is a UsageError naming ONNX Runtime's reason."""
    if not has_ifs(model) or model.ByteSize() > _PROTOBUF_LIMIT:
        return model
    problem, notes = load_error(model), []
    while problem is not None and pinned:
        step = _drop_one_branch(model)
        if step is None:
            break
        model, note = step
        notes.append(note)
        problem = load_error(model)
    if problem is not None:
        at = " at the pinned input dims" if pinned else ""
        raise UsageError(f"{source}: onnxruntime cannot load the reference ONNX{at} "
                         f"({problem})")
    if notes:
        helper.set_model_props(model, {**_props(model), NOTES_KEY: "\n".join(notes)})
        _warn(notes)
    return model


def repeat_notes(reference: Path) -> None:
    """Warn again about the If branches a cached reference dropped (its metadata says)."""
    _warn(list(dropped_branches(reference)))


def dropped_branches(reference: Path) -> tuple[str, ...]:
    """The notes on the If branches the reference ONNX dropped at its pinned dims (none: ())."""
    model = onnx.load(str(reference), load_external_data=False)
    return tuple(line for line in _props(model).get(NOTES_KEY, "").splitlines() if line)


def has_ifs(model: onnx.ModelProto) -> bool:
    return bool(_ifs(model))


def _props(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _warn(notes: list[str]) -> None:
    for note in notes:
        log.warning("%s", note)


def load_error(model: onnx.ModelProto) -> str | None:
    """Why ONNX Runtime refuses to load ``model`` (one line), or None when it loads. Its graph
    optimizations stay on, as every runner has them: constant folding turns the Shape of a
    pinned input into constants, and the refusal comes from re-inferring shapes after it."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its shape-merge warnings would only repeat the reason
    try:
        ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        return first_line(exc)
    return None


def _ifs(model: onnx.ModelProto) -> list[int]:
    """Indices of the main graph's If nodes."""
    return [i for i, n in enumerate(model.graph.node) if n.op_type == "If"]


def _drop_one_branch(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str] | None:
    """The model with the first main-graph If whose branches alone exactly one loads replaced
    by that branch, and a note saying so; None when there is no such If."""
    for index in _ifs(model):
        variants = {name: inline_branch(model, index, name) for name in _BRANCHES}
        loading = [name for name, variant in variants.items() if load_error(variant) is None]
        if len(loading) == 1:
            return variants[loading[0]], _note(model.graph.node[index], loading[0])
    return None


def _note(node: onnx.NodeProto, kept: str) -> str:
    """What keeping ``kept`` of the If ``node`` means, in one line."""
    keep = kept.split("_")[0]
    drop, value = ("else", "false") if keep == "then" else ("then", "true")
    label = node.name or f"the If computing {node.output[0]}"
    return (f"{label}: its {drop} branch cannot run at the pinned input dims (onnxruntime "
            f"refuses the model with it), so only its {keep} branch is kept: where its "
            f"condition {node.input[0]} is {value} the reference runs the {keep} branch too")


def inline_branch(model: onnx.ModelProto, index: int, branch: str) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph node ``index`` (an If) is replaced by the nodes of
    its ``branch`` subgraph, their results renamed to the If's outputs by Identity nodes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[index]
    body = next(a.g for a in node.attribute if a.name == branch)
    renames = [helper.make_node("Identity", [inner.name], [outer],
                                name=f"{node.name or 'If'}/{branch}/{outer}")
               for inner, outer in zip(body.output, node.output, strict=True) if outer]
    staged = onnx.GraphProto()  # copies, before the If (and its branches) leave the graph
    staged.node.extend([*out.graph.node[:index], *body.node, *renames,
                        *out.graph.node[index + 1:]])
    out.graph.initializer.extend(body.initializer)
    out.graph.sparse_initializer.extend(body.sparse_initializer)
    out.graph.value_info.extend(body.value_info)
    del out.graph.node[:]
    out.graph.node.extend(staged.node)
    return out
