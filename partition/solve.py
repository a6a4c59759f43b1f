"""The latency-optimal runnable edge-cloud placement of a DAG, as a min s-t cut."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from partition.graph import SINK, SOURCE, Graph, Tensor

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Placement", "evaluate", "is_runnable", "solve", "transfer_ms"]

Kind = Literal["all-edge", "all-cloud", "split"]

_S = "<s:edge>"
_T = "<t:cloud>"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where nodes run, tensors crossing (uplink, and outputs sent back), latency parts in ms.

    ``transfer_ms`` includes the RTT when anything runs in the cloud.
    """

    edge: frozenset[str]
    cloud: frozenset[str]
    cut: tuple[str, ...]
    edge_ms: float
    transfer_ms: float
    cloud_ms: float
    total_ms: float
    kind: Kind


def transfer_ms(nbytes: int, mbps: float) -> float:
    """Milliseconds to send ``nbytes`` at ``mbps`` megabits per second."""
    return nbytes * 8.0 / (mbps * 1e3)


def is_runnable(graph: Graph, edge: Iterable[str]) -> bool:
    """Whether every producer of a tensor an edge node consumes is on the edge too."""
    on_edge = set(edge)
    return all(t.producer in on_edge or t.producer == SOURCE
               for t in graph.tensors for c in t.consumers if c in on_edge)


def evaluate(graph: Graph, edge: Iterable[str], bandwidth_mbps: float, rtt_ms: float,
             downlink_mbps: float | None = None) -> Placement:
    """The placement with these nodes on the edge (the rest in the cloud) and its latency."""
    on_edge = frozenset(edge)
    cloud = frozenset(n.name for n in graph.nodes) - on_edge
    down = downlink_mbps or bandwidth_mbps
    sent = [t for t in graph.tensors if _crosses(t, on_edge, cloud)]
    moved = sum((_tensor_ms(t, cloud, bandwidth_mbps, down) for t in sent), 0.0)
    edge_ms = sum((n.edge_ms for n in graph.nodes if n.name in on_edge), 0.0)
    cloud_ms = sum((n.cloud_ms for n in graph.nodes if n.name in cloud), 0.0)
    rtt = rtt_ms if cloud else 0.0
    return Placement(edge=on_edge, cloud=cloud, cut=tuple(t.name for t in sent), edge_ms=edge_ms,
                     transfer_ms=moved + rtt, cloud_ms=cloud_ms,
                     total_ms=edge_ms + moved + rtt + cloud_ms, kind=_kind(on_edge, cloud))


def solve(graph: Graph, bandwidth_mbps: float, rtt_ms: float,
          downlink_mbps: float | None = None) -> Placement:
    """The minimum-latency runnable placement (exact: min cut, then all-edge and all-cloud)."""
    # Exact with RTT: if the RTT-free optimum is all-edge, all-edge is optimal with RTT too;
    # otherwise the best placement is that optimum + RTT or all-edge, both compared below.
    edge = _min_cut_edge_set(graph, bandwidth_mbps, downlink_mbps or bandwidth_mbps)
    names = [n.name for n in graph.nodes]
    candidates = [evaluate(graph, e, bandwidth_mbps, rtt_ms, downlink_mbps)
                  for e in (edge, names, ())]
    return min(candidates, key=lambda p: p.total_ms)


def _crosses(tensor: Tensor, edge: frozenset[str], cloud: frozenset[str]) -> bool:
    """Whether a tensor goes up (edge to cloud) or back down (cloud output to the device)."""
    up = tensor.producer not in cloud and any(c in cloud for c in tensor.consumers)
    down = tensor.producer in cloud and tensor.is_output
    return up or down


def _tensor_ms(tensor: Tensor, cloud: frozenset[str], up_mbps: float, down_mbps: float) -> float:
    """Uplink ms of a tensor produced on the edge, downlink ms of an output made in the cloud."""
    mbps = down_mbps if tensor.producer in cloud else up_mbps
    return transfer_ms(tensor.bytes, mbps)


def _kind(edge: frozenset[str], cloud: frozenset[str]) -> Kind:
    if not cloud:
        return "all-edge"
    return "all-cloud" if not edge else "split"


def _min_cut_edge_set(graph: Graph, up_mbps: float, down_mbps: float) -> frozenset[str]:
    """Nodes on the source (edge) side of a minimum cut of the RTT-free objective."""
    import networkx as nx
    from networkx.algorithms.flow import boykov_kolmogorov

    flow = _flow_graph(graph, up_mbps, down_mbps)
    _, (edge_side, _) = nx.minimum_cut(flow, _S, _T, flow_func=boykov_kolmogorov)
    return frozenset(n.name for n in graph.nodes if n.name in edge_side)


def _flow_graph(graph: Graph, up_mbps: float, down_mbps: float) -> nx.DiGraph:
    """s = edge, t = cloud; a node on the s side pays edge_ms, on the t side cloud_ms."""
    import networkx as nx

    flow = nx.DiGraph()
    flow.add_nodes_from([_S, _T])
    for node in graph.nodes:
        _add(flow, node.name, _T, node.edge_ms)
        _add(flow, _S, node.name, node.cloud_ms)
    for tensor in graph.tensors:
        _add_tensor(flow, tensor, up_mbps, down_mbps)
    return flow


def _add_tensor(flow: nx.DiGraph, tensor: Tensor, up_mbps: float, down_mbps: float) -> None:
    """Uplink paid once via an auxiliary node; precedence and the return trip of outputs."""
    producer = _S if tensor.producer == SOURCE else tensor.producer
    consumers = [c for c in tensor.consumers if c != SINK]
    aux = f"<tensor:{tensor.name}>"
    _add(flow, producer, aux, transfer_ms(tensor.bytes, up_mbps))
    for consumer in consumers:
        _add(flow, aux, consumer, None)
        _add(flow, consumer, producer, None)  # no cloud producer may feed an edge consumer
    if tensor.is_output and producer != _S:
        _add(flow, _S, producer, transfer_ms(tensor.bytes, down_mbps))


def _add(flow: nx.DiGraph, u: str, v: str, capacity: float | None) -> None:
    """Add capacity to u->v (None: infinite), merging parallel arcs."""
    if u == v:
        return
    data = flow.get_edge_data(u, v)
    if capacity is None:
        flow.add_edge(u, v)
        if data is not None:
            data.pop("capacity", None)
        return
    if data is None:
        flow.add_edge(u, v, capacity=capacity)
    elif "capacity" in data:
        data["capacity"] += capacity
