"""Split an ONNX model into an edge head and a cloud tail at a node set, verify, describe.

Conventions (decided here, relied on by callers):

* ``edge_nodes`` names the nodes that run on the device; every other node runs in the cloud.
  The set must be closed under predecessors: the cloud never feeds the edge.
* The *cut tensors* are everything the tail needs that the tail does not compute itself:
  tensors produced on the edge, plus original graph inputs consumed by cloud nodes (the device
  holds the raw input, so it must send it too). Initializers are never cut tensors: each side
  carries its own weights. ``tail_inputs`` is exactly ``cut_tensors``, in that order.
* ``head_outputs`` are the edge-produced cut tensors followed by the final graph outputs produced
  on the edge (so the device has them). A final output produced on the edge and consumed by the
  cloud appears once in ``head_outputs`` and is also a cut tensor.
* Degenerate cases: all-edge gives ``tail=None`` (the head is the whole model, no cut tensors);
  all-cloud gives ``head=None`` and the cut tensors are the graph inputs the model uses.
  Nodes that reach no graph output are dropped from whichever side they were placed on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
import onnx.utils
import onnxruntime as ort

from edge.core.documents import (
    CutDocument,
    ServingDocument,
    SplitDocument,
    SplitHalves,
    dump,
    parse,
    read_yaml,
    write_yaml,
)
from edge.core.errors import UsageError
from edge.core.files import inside
from edge.core.model import save_onnx_atomic
from edge.core.ortrun import run_within
from partition.scopes import node_inputs

__all__ = [
    "CutOption",
    "SplitModels",
    "SplitPlan",
    "cut_tensor_specs",
    "model_outputs",
    "read_split_yaml",
    "split_model",
    "verify_split",
    "write_split_yaml",
]

HEAD_NAME = "head.onnx"
TAIL_NAME = "tail.onnx"
YAML_NAME = "split.yaml"
YAML_VERSION = 2
PREDICTED_KEYS = ("edge_ms", "transfer_ms", "cloud_ms")


@dataclass(frozen=True)
class SplitModels:
    """The two halves of a split model and the tensors that flow between them."""

    head: Path | None
    tail: Path | None
    cut_tensors: tuple[str, ...]
    head_inputs: tuple[str, ...]
    head_outputs: tuple[str, ...]
    tail_inputs: tuple[str, ...]
    tail_outputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class CutOption:
    """One precomputed cut a running client may switch to, and what it costs.

    ``model`` is the tail's name on the server ("tail" for the chosen cut, "" when all-edge).
    Latency at uplink B Mbit/s, downlink D and RTT R: ``edge_ms + cloud_ms + R (when a tail
    exists) + up_bytes*8/(B*1e3) + down_bytes*8/(D*1e3)``.
    """

    id: str
    kind: str
    model: str
    split: SplitModels
    edge_ms: float
    cloud_ms: float
    up_bytes: int
    down_bytes: int

    def predicted_ms(self, up_mbps: float, down_mbps: float, rtt_ms: float) -> float:
        """Predicted end-to-end ms over a link."""
        if self.split.tail is None:
            return self.edge_ms
        return self.edge_ms + self.cloud_ms + rtt_ms + self.link_ms(up_mbps, down_mbps)

    def link_ms(self, up_mbps: float, down_mbps: float) -> float:
        """Time on the wire (uplink + downlink, no RTT)."""
        return self.up_bytes * 8 / (up_mbps * 1e3) + self.down_bytes * 8 / (down_mbps * 1e3)


@dataclass(frozen=True)
class SplitPlan:
    """What split.yaml holds: the split, its cut tensors, predictions and a bandwidth table."""

    split: SplitModels
    cut: list[dict[str, Any]]
    predicted: dict[str, float]
    bandwidth_table: list[dict[str, Any]]
    cuts: tuple[CutOption, ...] = ()
    compression: str = "none"
    inputs: tuple[dict[str, Any], ...] = ()  # the model's inputs: name, shape, dtype
    serving: ServingDocument | None = None  # the cloud profile's serving settings


@dataclass(frozen=True)
class _Graph:
    """Indexes over a model's main graph used to place tensors on either side."""

    nodes: list[onnx.NodeProto]
    producer: dict[str, onnx.NodeProto]
    inputs: list[str]
    constants: set[str]
    outputs: list[str]


def _index(model: onnx.ModelProto) -> _Graph:
    """Index the main graph: producers, real inputs, initializers, outputs."""
    g = model.graph
    constants = {t.name for t in g.initializer}
    producer = {out: n for n in g.node for out in n.output if out}
    inputs = [i.name for i in g.input if i.name not in constants]
    return _Graph(list(g.node), producer, inputs, constants, [o.name for o in g.output])


def _check_names(graph: _Graph, edge_nodes: set[str]) -> None:
    """Refuse unknown node names and ambiguous (duplicate) names on the edge."""
    seen: dict[str, int] = {}
    for node in graph.nodes:
        seen[node.name] = seen.get(node.name, 0) + 1
    for name in sorted(edge_nodes):
        if name not in seen:
            raise UsageError(f"edge node {name!r} is not a node of the model")
        if seen[name] > 1:
            raise UsageError(f"edge node {name!r} names {seen[name]} nodes; names must be unique")


def _check_closed(graph: _Graph, edge_nodes: set[str]) -> None:
    """Refuse an edge set that a cloud node feeds (not closed under predecessors)."""
    for node in graph.nodes:
        if node.name not in edge_nodes:
            continue
        for tensor in node_inputs(node):
            src = graph.producer.get(tensor)
            if src is not None and src.name not in edge_nodes:
                raise UsageError(
                    f"edge node {node.name!r} needs {tensor!r} from cloud node {src.name!r}: "
                    "the edge set must include every predecessor"
                )


def _live(graph: _Graph, roots: Iterable[str], side: set[int]) -> set[int]:
    """Ids of the nodes on ``side`` that the tensors ``roots`` depend on within that side."""
    live: set[int] = set()
    stack = list(roots)
    while stack:
        node = graph.producer.get(stack.pop())
        if node is None or id(node) not in side or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(node_inputs(node))
    return live


def _ordered(names: Iterable[str]) -> tuple[str, ...]:
    """Deduplicate, keeping first occurrence order."""
    return tuple(dict.fromkeys(names))


def _plan(graph: _Graph, edge_nodes: set[str]) -> SplitModels:
    """Compute cut tensors and head/tail interfaces (paths filled in later)."""
    edge_ids = {id(n) for n in graph.nodes if n.name in edge_nodes}
    cloud_ids = {id(n) for n in graph.nodes} - edge_ids
    on_edge = {t for n in graph.nodes if id(n) in edge_ids for t in n.output if t}
    tail_outputs = tuple(o for o in graph.outputs if id(graph.producer.get(o)) in cloud_ids)
    tail_live = _live(graph, tail_outputs, cloud_ids)
    needed = [t for n in graph.nodes if id(n) in tail_live for t in node_inputs(n)]
    cut = _ordered(t for t in needed if t in on_edge or t in graph.inputs)
    edge_finals = [o for o in graph.outputs if o in on_edge]
    head_outputs = _ordered([t for t in cut if t in on_edge] + edge_finals)
    head_live = _live(graph, head_outputs, edge_ids)
    head_needs = {t for n in graph.nodes if id(n) in head_live for t in node_inputs(n)}
    head_inputs = tuple(i for i in graph.inputs if i in head_needs)
    return SplitModels(
        head=None,
        tail=None,
        cut_tensors=cut,
        head_inputs=head_inputs,
        head_outputs=head_outputs,
        tail_inputs=cut,
        tail_outputs=tail_outputs,
        outputs=tuple(graph.outputs),
    )


class _Extractor(onnx.utils.Extractor):
    """onnx's extractor, but a node with subgraphs (If/Loop/Scan) keeps the outer-scope values
    its branches read: the nodes making them, and the initializers, come along."""

    def _dfs_search_reachable_nodes(self, node_output_name: str, graph_input_names: set[str],
                                    reachable: set[int]) -> None:
        stack = [node_output_name]
        while stack:
            name = stack.pop()
            index = self.outmap.get(name)
            if name in graph_input_names or index is None or index in reachable:
                continue
            reachable.add(index)
            stack += node_inputs(self.graph.node[index])

    def _collect_reachable_tensors(self, nodes: list[onnx.NodeProto]) -> tuple[Any, Any]:
        super()._collect_reachable_tensors(nodes)  # its checks (no sparse initializers...)
        names = {t for n in nodes for t in (*node_inputs(n), *n.output)}
        return ([t for name, t in self.initializers.items() if name in names],
                [v for name, v in self.value_infos.items() if name in names])


def _extract(
    extractor: onnx.utils.Extractor, inputs: Sequence[str], outputs: Sequence[str]
) -> onnx.ModelProto:
    """Extract the sub-model between ``inputs`` and ``outputs``; name a tensor lacking a type."""
    try:
        return extractor.extract_model(list(inputs), list(outputs))
    except ValueError as exc:
        raise UsageError(f"cannot extract sub-model: {exc} (shape inference gave no type)") from exc


def _check_nodes(part: onnx.ModelProto, allowed: set[str], side: str) -> None:
    """Guard against the extractor pulling in nodes from the other side."""
    extra = sorted({n.name for n in part.graph.node} - allowed)
    if extra:
        raise UsageError(f"{side} would run nodes placed elsewhere: {', '.join(extra)}")



def _remove_stale(path: Path) -> None:
    """Remove a half from an earlier split so out_dir never mixes two splits."""
    path.unlink(missing_ok=True)


def split_model(model_path: Path, edge_nodes: set[str], out_dir: Path) -> SplitModels:
    """Validate ``edge_nodes`` and write head.onnx / tail.onnx into ``out_dir``."""
    model = onnx.load(str(model_path))
    graph = _index(model)
    edge_nodes = set(edge_nodes)
    _check_names(graph, edge_nodes)
    _check_closed(graph, edge_nodes)
    plan = _plan(graph, edge_nodes)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extractor = _Extractor(onnx.shape_inference.infer_shapes(model))
    cloud_names = {n.name for n in graph.nodes} - edge_nodes
    head = _write_half(extractor, plan.head_inputs, plan.head_outputs, edge_nodes,
                       out_dir / HEAD_NAME)
    tail = _write_half(extractor, plan.tail_inputs, plan.tail_outputs, cloud_names,
                       out_dir / TAIL_NAME)
    return _with_paths(plan, head, tail)


def _write_half(extractor: Any, inputs: tuple[str, ...], outputs: tuple[str, ...],
                allowed: set[str], path: Path) -> Path | None:
    """Extract, check and write one half; an empty half removes a stale file instead."""
    if not outputs:
        _remove_stale(path)
        return None
    half = _extract(extractor, inputs, outputs)
    _check_nodes(half, allowed, path.stem)
    save_onnx_atomic(half, path)
    return path


def _with_paths(plan: SplitModels, head: Path | None, tail: Path | None) -> SplitModels:
    """Copy of ``plan`` with the written paths."""
    fields = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    return SplitModels(**{**fields, "head": head, "tail": tail})


def _session(path: Path) -> Any:
    """An onnxruntime CPU session for ``path``."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_split(
    split: SplitModels, feeds: Mapping[str, np.ndarray], sessions: tuple[Any, Any] | None = None
) -> dict[str, np.ndarray]:
    """Run head then tail on ``feeds``; return the final outputs by name."""
    head_s, tail_s = sessions or (
        _session(split.head) if split.head else None,
        _session(split.tail) if split.tail else None,
    )
    values: dict[str, np.ndarray] = dict(feeds)
    if head_s is not None:
        got = head_s.run(list(split.head_outputs), {k: feeds[k] for k in split.head_inputs})
        values.update(zip(split.head_outputs, got, strict=True))
    if tail_s is not None:
        got = tail_s.run(list(split.tail_outputs), {k: values[k] for k in split.tail_inputs})
        values.update(zip(split.tail_outputs, got, strict=True))
    return {name: values[name] for name in split.outputs}


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Max abs difference of two arrays; inf if their shapes differ."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def model_outputs(model_path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole model's outputs by name."""
    session = _session(model_path)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, run_within(session, names, feeds, "the model"), strict=True))


def verify_split(
    model_path: Path, split: SplitModels, feeds_list: Sequence[Mapping[str, np.ndarray]]
) -> float:
    """Max abs diff between the full model and head→tail over ``feeds_list``."""
    full = _session(model_path)
    names = [o.name for o in full.get_outputs()]
    halves = (
        _session(split.head) if split.head else None,
        _session(split.tail) if split.tail else None,
    )
    worst = 0.0
    for feeds in feeds_list:
        want = dict(zip(names, run_within(full, names, feeds, "the model"), strict=True))
        got = run_split(split, feeds, halves)
        for name in split.outputs:
            worst = max(worst, _max_diff(want[name], got[name]))
    return worst


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None]:
    """Shape of a tensor value info: ints, symbolic names, or None when unknown."""
    shape = vi.type.tensor_type.shape
    out: list[int | str | None] = []
    for d in shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or None)
    return out


def _spec(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    """Name, shape, dtype and byte size (None unless every dim is known) of one tensor."""
    elem = vi.type.tensor_type.elem_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    shape = _dims(vi)
    known = all(isinstance(d, int) for d in shape) and dtype.kind not in "OSU"
    size = int(math.prod(shape)) * dtype.itemsize if known else None  # type: ignore[arg-type]
    return {"name": vi.name, "shape": shape, "dtype": dtype.name, "bytes": size}


def cut_tensor_specs(split: SplitModels) -> list[dict[str, Any]]:
    """Name, shape, dtype and bytes of every cut tensor (read from the tail's inputs)."""
    if split.tail is None:
        return []
    inputs = {i.name: i for i in onnx.load(str(split.tail), load_external_data=False).graph.input}
    return [_spec(inputs[wire]) | ({"tensor": name} if wire != name else {})
            for name, wire in zip(split.cut_tensors, split.tail_inputs, strict=True)]


def _plain(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and paths to plain YAML-safe values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


def _halves_doc(split: SplitModels, out_dir: Path) -> SplitHalves:
    """The split's interface with file names relative to ``out_dir``."""

    def rel(p: Path | None) -> str | None:
        """A written half's path relative to out_dir, or None."""
        return None if p is None else os.path.relpath(p, out_dir)

    return SplitHalves(
        head=rel(split.head), tail=rel(split.tail), cut_tensors=split.cut_tensors,
        head_inputs=split.head_inputs, head_outputs=split.head_outputs,
        tail_inputs=split.tail_inputs, tail_outputs=split.tail_outputs, outputs=split.outputs)


def _cut_doc(cut: CutOption, out_dir: Path) -> CutDocument:
    """One precomputed cut as a document part."""
    return CutDocument(id=cut.id, kind=cut.kind, model=cut.model,
                       edge_ms=round(cut.edge_ms, 4), cloud_ms=round(cut.cloud_ms, 4),
                       up_bytes=int(cut.up_bytes), down_bytes=int(cut.down_bytes),
                       split=_halves_doc(cut.split, out_dir))


def _cut_from_doc(doc: CutDocument, out_dir: Path) -> CutOption:
    """A precomputed cut read back from split.yaml."""
    return CutOption(id=doc.id, kind=doc.kind, model=doc.model,
                     split=_split_from_doc(doc.split, out_dir), edge_ms=doc.edge_ms,
                     cloud_ms=doc.cloud_ms, up_bytes=doc.up_bytes, down_bytes=doc.down_bytes)


def write_split_yaml(
    out_dir: Path,
    split: SplitModels,
    *,
    predicted: dict[str, Any],
    bandwidth_table: list[dict[str, Any]],
    cuts: Sequence[CutOption] = (),
    compression: str = "none",
    inputs: Sequence[Mapping[str, Any]] = (),
    serving: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/split.yaml`` atomically and return its path."""
    out_dir = Path(out_dir)
    missing = [k for k in PREDICTED_KEYS if k not in predicted]
    if missing:
        raise UsageError(f"predicted is missing {', '.join(missing)}")
    doc = parse("split", {
        "version": YAML_VERSION,
        "split": _halves_doc(split, out_dir).model_dump(exclude_unset=True),
        "cut": cut_tensor_specs(split),
        "predicted": _plain(predicted),
        "compression": compression,
        "inputs": _plain([dict(i) for i in inputs]),
        "cuts": [_cut_doc(c, out_dir).model_dump(exclude_unset=True) for c in cuts],
        "bandwidth_table": _plain(list(bandwidth_table)),
        "serving": None if serving is None else dict(serving),
    }, "split.yaml")
    return write_yaml("split", out_dir / YAML_NAME, doc)


def _split_from_doc(doc: SplitHalves, out_dir: Path) -> SplitModels:
    """SplitModels from the ``split`` part of split.yaml, its files inside ``out_dir``."""
    return SplitModels(
        head=_inside(out_dir, doc.head),
        tail=_inside(out_dir, doc.tail),
        cut_tensors=doc.tail_inputs if doc.cut_tensors is None else doc.cut_tensors,
        head_inputs=doc.head_inputs,
        head_outputs=doc.head_outputs,
        tail_inputs=doc.tail_inputs,
        tail_outputs=doc.tail_outputs,
        outputs=doc.outputs,
    )


def _inside(root: Path, name: str | None) -> Path | None:
    """``root/name``, refused when ``name`` is absolute or leads out of ``root`` (``..`` or a
    symlink)."""
    return None if name is None else inside(root, name, root / YAML_NAME)


def read_split_yaml(path: Path) -> SplitPlan:
    """Read split.yaml (``path`` is the file or its directory) back into a SplitPlan."""
    path = Path(path)
    if path.is_dir():
        path = path / YAML_NAME
    if not path.is_file():
        raise UsageError(f"{path}: no such split.yaml; give the directory edge partition wrote")
    doc: SplitDocument = read_yaml("split", path)
    plain = dump("split", doc)
    return SplitPlan(
        _split_from_doc(doc.split, path.parent), list(plain["cut"]), dict(plain["predicted"]),
        list(plain["bandwidth_table"]),
        tuple(_cut_from_doc(c, path.parent) for c in doc.cuts), doc.compression,
        tuple(dict(i) for i in plain["inputs"]), doc.serving,
    )
