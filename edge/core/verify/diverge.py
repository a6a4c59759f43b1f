"""Is a converted fp32 the same computation as the reference? Label it by its measured error,
and where the error is large, find the first node whose output differs from the reference's.

The bound for "exact": fp32 rounds each operation to a relative 2**-24 (about 6e-8); a reduction
of n terms summed in another order (another runtime's kernels, fused or reordered operators)
differs by about sqrt(n) of that relative to the terms' magnitude. Over the few dozen layers of a
well-conditioned network this stays far below 1e-5 of an output's spread (converters measured
here give 1e-7 to 1e-6: onnx2tf and OpenVINO on convolutions, resizes, normalizations,
activations). 1e-4 of the spread leaves a 10-100x margin over round-off, while a changed
computation (an approximated operator, a precision lost in a rewrite, an ill-conditioned sum
regrouped) lands at 1e-3 and above.

Intermediate outputs are compared for ONNX artifacts here (ONNX Runtime, a core dependency) and
for other formats through their target's ``node_outputs`` (OpenVINO IRs keep the ONNX tensor
names); ``onnx`` and ``onnxruntime`` load lazily, only when a cause is searched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from edge.core.values import CandidateResult, Fidelity, OutputFidelity

__all__ = ["EXACT_REL_MAX", "EXACT_REL_RMS", "LARGE_REL_RMS", "exactness", "first_divergence",
           "labelled"]

#: RMS error over the output's spread within which an fp32 is float round-off (see above)
EXACT_REL_RMS = 1e-4
#: the largest error over the spread an exact fp32 may have: round-off's largest element is a
#: few times its RMS; one element this far off is a changed computation, however large the
#: output (its RMS alone would hide it)
EXACT_REL_MAX = 1e-3
#: beyond this (1 % of the spread) a not-exact fp32 gets its cause searched, as a rejected one
LARGE_REL_RMS = 1e-2
#: a target's runner of every node of an artifact: (artifact, feeds) -> tensor name -> values
NodeOutputs = Callable[[Path, Sequence[dict[str, np.ndarray]]], dict[str, list[np.ndarray]]]
#: how many held-out samples the node-by-node comparison runs (each node's outputs are kept)
SAMPLES = 2


def exactness(fid: Fidelity | None) -> str:
    """"exact", or "not exact: max error X, RMS Y of spread" from the worst output; "" when
    no output has an RMS error to judge by."""
    outs = [o for o in (fid.outputs if fid else ()) if o.rel_rms is not None or o.error]
    if not outs:
        return ""
    broken = next((o for o in outs if o.error or o.nonfinite), None)
    if broken is not None:
        return f"not exact: output '{broken.name}' {broken.error or 'has NaN/Inf'}"
    worst = max(outs, key=_excess)
    if _excess(worst) <= 1.0:
        return "exact"
    return "not exact: " + _error(worst, len(outs) > 1)


def _excess(out: OutputFidelity) -> float:
    """How far past round-off an output's error is (<= 1: within it), by its RMS and by its
    largest element (unknown for documents written before it was kept)."""
    return max((out.rel_rms or 0.0) / EXACT_REL_RMS, (out.rel_max or 0.0) / EXACT_REL_MAX)


def _error(out: OutputFidelity, named: bool) -> str:
    where = f" (output '{out.name}')" if named else ""
    max_abs = "" if out.max_abs is None else f"max error {out.max_abs:.3g}, "
    largest = "" if out.rel_max is None else f"largest {out.rel_max:.3g} of spread, "
    return f"{max_abs}{largest}RMS {out.rel_rms:.3g} of spread{where}"


def _large(result: CandidateResult, exact: str) -> bool:
    """Rejected, or not exact beyond ``LARGE_REL_RMS``: worth a search for the cause."""
    if exact == "exact":
        return False
    if result.status in ("rejected", "failed"):
        return True
    outs = result.fidelity.outputs if result.fidelity else ()
    return exact.startswith("not exact") and any((o.rel_rms or 0.0) > LARGE_REL_RMS
                                                 for o in outs)


def labelled(result: CandidateResult, reference: Path, artifact: Path | None,
             feeds: Sequence[dict[str, np.ndarray]],
             nodes: NodeOutputs | None = None) -> CandidateResult:
    """An fp32 candidate's result with its exactness label, and where its error is large, the
    first diverging node in its reason; other precisions unchanged."""
    if result.candidate.precision != "fp32" or result.fidelity is None:
        return result
    exact = exactness(result.fidelity)
    if not exact:
        return result
    shown = "exact (within float round-off)" if exact == "exact" else exact
    reason = f"{result.reason}; fp32 {shown}"
    if _large(result, exact) and artifact is not None:
        reason += "; " + first_divergence(reference, artifact, feeds[:SAMPLES], nodes)
    return replace(result, exactness=exact, reason=reason)


def first_divergence(reference: Path, artifact: Path, feeds: Sequence[dict[str, np.ndarray]],
                     nodes: NodeOutputs | None = None) -> str:
    """One line: the first node (in the reference's order) whose output differs from the
    reference's beyond round-off, or why it could not be found. ``nodes`` runs the artifact's
    nodes where it is not ONNX (its target's ``node_outputs``)."""
    if nodes is None and artifact.suffix == ".onnx":
        nodes = _intermediates
    if reference.suffix != ".onnx" or nodes is None:
        return ("the diverging node was not searched: edge compares intermediate outputs of "
                f"an ONNX reference with ONNX, OpenVINO and LiteRT artifacts only (this one is "
                f"{artifact.suffix or 'a folder'})")
    try:
        ref = _intermediates(reference, feeds)
        got = nodes(artifact, feeds)
    except Exception as exc:  # noqa: BLE001 - the search is a hint: say why it is missing
        return f"the diverging node was not found: {type(exc).__name__} running the nodes"
    graph = _nodes(reference)
    if any(node.tensor in got for node in graph):
        return _first(graph, ref, got)
    return _first_by_values(graph, ref, got)


def _first(nodes: list[_Node], ref: dict[str, list[np.ndarray]],
           got: dict[str, list[np.ndarray]]) -> str:
    """The first node whose output, kept by both graphs under its name, differs."""
    compared = 0
    for name, op, tensor, _ in nodes:
        if tensor not in ref or tensor not in got:
            continue
        rel = _rel_rms(ref[tensor], got[tensor])
        if rel is None:
            continue
        if rel > EXACT_REL_RMS:
            upstream = f"{compared} upstream node(s) match" if compared else "it is the first"
            return (f"fp32 differs from the original from node '{name}' ({op}) on: RMS "
                    f"error {rel:.3g} of spread there; {upstream}")
        compared += 1
    return (f"no diverging node found: {compared} node output(s) kept by both graphs match "
            "the original (the difference is in nodes the artifact renamed or fused)")


def _first_by_values(nodes: list[_Node], ref: dict[str, list[np.ndarray]],
                     got: dict[str, list[np.ndarray]]) -> str:
    """Where the artifact renamed its tensors: a reference node output matches when a tensor
    of the artifact holds its values (in its layout or channels-last) within round-off. The
    first diverging node is the first one unmatched from which nothing computed matches again
    (a node fused away in the artifact is unmatched, but what follows it matches)."""
    errors = {n.tensor: _nearest(ref[n.tensor], got) for n in nodes if n.tensor in ref}
    matched = {t for t, e in errors.items() if e is not None and e <= EXACT_REL_RMS}
    for node in nodes:
        if node.tensor not in errors or node.tensor in matched:
            continue
        if not _downstream(node.tensor, nodes) & matched:
            rel = errors[node.tensor]
            there = "its output is fused away" if rel is None else f"RMS error {rel:.3g} of spread"
            return (f"fp32 differs from the original from node '{node.name}' ({node.op}) on: "
                    f"{there} there; {len(matched)} upstream node output(s) match by value")
    return (f"no diverging node found: {len(matched)} node output(s) match the artifact's "
            "tensors by value")


def _nearest(ref: list[np.ndarray], got: dict[str, list[np.ndarray]]) -> float | None:
    """The smallest RMS error of any artifact tensor of the reference's shape (or its
    channels-last layout); None when none has it."""
    errors = [e for values in got.values() if (e := _rel_rms(ref, values)) is not None]
    return min(errors, default=None)


def _downstream(tensor: str, nodes: list[_Node]) -> set[str]:
    """The tensors computed from ``tensor`` (nodes are in topological order)."""
    reached = {tensor}
    for node in nodes:
        if reached.intersection(node.inputs):
            reached.add(node.tensor)
    return reached - {tensor}


def _rel_rms(ref: list[np.ndarray], got: list[np.ndarray]) -> float | None:
    """RMS difference over the reference tensor's spread; None when shapes differ."""
    got = [_ref_layout(r, g) for r, g in zip(ref, got, strict=False)]
    if len(got) != len(ref) or [r.shape for r in ref] != [g.shape for g in got]:
        return None
    a = np.stack(ref).astype(np.float64)
    b = np.stack(got).astype(np.float64)
    spread = float(a.std()) or float(np.abs(a).max()) or 1.0
    return float(np.sqrt(np.mean((a - b) ** 2))) / spread


def _ref_layout(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """``got`` in ``ref``'s layout where it is ``ref`` with channels moved last (NHWC)."""
    if got.shape == ref.shape or got.ndim != ref.ndim or ref.ndim < 3:
        return got
    last = (0, *range(2, ref.ndim), 1)
    if got.shape == tuple(ref.shape[i] for i in last):
        return np.transpose(got, np.argsort(last))
    return got


class _Node(NamedTuple):
    name: str
    op: str
    tensor: str  # one of its outputs
    inputs: tuple[str, ...]


def _nodes(path: Path) -> list[_Node]:
    """Every node's outputs in graph (topological) order."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [_Node(n.name or out, n.op_type, out, tuple(n.input))
            for n in graph.node for out in n.output if out]


def _intermediates(path: Path,
                   feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """Every float node output of the ONNX model at ``path`` on each feed, by tensor name."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    model = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in (*model.graph.value_info, *model.graph.output)}
    names = [out for n in model.graph.node for out in n.output if out in known
             and known[out].type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    del model.graph.output[:]
    model.graph.output.extend(known[n] for n in dict.fromkeys(names))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    runs: list[Any] = [session.run(wanted, dict(f)) for f in feeds]
    return {name: [np.asarray(r[i]) for r in runs] for i, name in enumerate(wanted)}
