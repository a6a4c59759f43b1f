"""The best runnable edge-cloud placement of a DAG for latency, device energy or throughput.

Every placement is *runnable*: the edge set is closed under predecessors (no cloud node feeds an
edge node). Each objective is always compared with all-edge and all-cloud.

- ``latency`` (ms, the default): edge compute + uplink + RTT (once, if anything runs in the
  cloud) + cloud compute + downlink of the outputs made in the cloud. Additive: an exact min
  s-t cut of the RTT-free objective, then compared with all-edge (that makes the RTT exact).
- ``energy`` (device mJ, see ``EnergyModel``): also additive, so the same exact min cut with
  other weights.
- ``throughput`` (frames/s of a pipelined stream, see ``Placement.stage_ms``): the slowest of
  three stages, not additive, so the runnable edge sets (the ideals of the DAG) are enumerated
  exactly up to ``max_sets``; beyond that the best of a heuristic candidate set is returned with
  ``exact=False``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Protocol

from partition.graph import SINK, SOURCE, Graph, Tensor

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "DEFAULT_ENERGY",
    "MAX_SETS",
    "OBJECTIVES",
    "TX_NJ_PER_BIT",
    "EnergyModel",
    "ObjectiveName",
    "Placement",
    "energy_model",
    "evaluate",
    "is_runnable",
    "solve",
    "transfer_ms",
    "tx_nj_per_bit",
]

Kind = Literal["all-edge", "all-cloud", "split"]
ObjectiveName = Literal["latency", "energy", "throughput"]
OBJECTIVES: tuple[ObjectiveName, ...] = ("latency", "energy", "throughput")

#: Runnable edge sets the throughput solver enumerates before it falls back to a heuristic.
MAX_SETS = 200_000

#: ASSUMED radio energy per transmitted bit (nJ/bit) by ``link.kind`` when a profile's link has
#: no ``tx_nj_per_bit``: rough whole-radio ballparks (wired NICs a few nJ/bit, Wi-Fi tens,
#: cellular 50-100+), not measurements. Any ``wifi*`` kind uses the ``wifi`` value; an unknown
#: kind uses ``DEFAULT_TX_NJ_PER_BIT``.
TX_NJ_PER_BIT: dict[str, float] = {
    "ethernet": 5.0,
    "wifi": 20.0,
    "lte": 100.0,
    "4g": 100.0,
    "5g": 50.0,
    "datacenter": 1.0,
}
DEFAULT_TX_NJ_PER_BIT = 50.0

_S = "<s:edge>"
_T = "<t:cloud>"
_REL = 1e-9  # relative tolerance when comparing float objective values


class PowerLike(Protocol):
    """Board power draw in watts (``edge.core.profile.Power`` fits)."""

    @property
    def idle_w(self) -> float: ...

    @property
    def max_w(self) -> float: ...


class LinkLike(Protocol):
    """A link kind (``edge.core.profile.Link`` fits; its ``tx_nj_per_bit`` is read when present)."""

    @property
    def kind(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EnergyModel:
    """Device energy per frame, in mJ (W x ms = mJ; nJ/bit x bits x 1e-6 = mJ).

    ``max_w`` x edge compute ms + ``idle_w`` x (uplink ms + RTT + cloud ms + downlink ms)
    + ``tx_nj_per_bit`` x bits sent up. The device is on for the whole frame: it computes at
    ``max_w`` and otherwise waits at ``idle_w`` (also while it transmits); the radio's own cost
    is per bit sent. Receiving costs only the idle wait. ``assumed`` marks a model whose
    radio cost (or power) is a default, not a profile's number.
    """

    idle_w: float
    max_w: float
    tx_nj_per_bit: float
    assumed: bool = False

    def __post_init__(self) -> None:
        if not (self.idle_w >= 0 and self.max_w > 0 and self.tx_nj_per_bit >= 0):
            raise ValueError(f"bad energy model {self}: need idle_w >= 0, max_w > 0, "
                             "tx_nj_per_bit >= 0")

    def mj(self, compute_ms: float, wait_ms: float, bytes_up: int) -> float:
        """Energy of ``compute_ms`` at full power, ``wait_ms`` idle and ``bytes_up`` sent."""
        return self.max_w * compute_ms + self.idle_w * wait_ms + self.radio_mj(bytes_up)

    def radio_mj(self, nbytes: int) -> float:
        """Radio energy to send ``nbytes``."""
        return self.tx_nj_per_bit * nbytes * 8.0 * 1e-6


#: Used by ``evaluate`` when no energy model is given: a generic small board (2 W idle, 6 W
#: busy) on an unknown link; its numbers are assumptions, so ``Placement.energy_assumed`` is set.
DEFAULT_ENERGY = EnergyModel(idle_w=2.0, max_w=6.0, tx_nj_per_bit=DEFAULT_TX_NJ_PER_BIT,
                             assumed=True)


def tx_nj_per_bit(kind: str) -> float:
    """The ASSUMED radio nJ/bit of a link kind (see ``TX_NJ_PER_BIT``)."""
    key = kind.strip().lower()
    if key.startswith("wifi"):
        return TX_NJ_PER_BIT["wifi"]
    return TX_NJ_PER_BIT.get(key, DEFAULT_TX_NJ_PER_BIT)


def energy_model(power: PowerLike, link: LinkLike | None = None, *,
                 nj_per_bit: float | None = None) -> EnergyModel:
    """The energy model of a device: ``energy_model(profile.power, profile.link)``.

    The radio cost is ``nj_per_bit`` if given, else ``link.tx_nj_per_bit`` if set, else the
    assumed default for ``link.kind`` (``assumed=True``).
    """
    given = nj_per_bit if nj_per_bit is not None else getattr(link, "tx_nj_per_bit", None)
    if given is not None:
        return EnergyModel(power.idle_w, power.max_w, float(given))
    rate = tx_nj_per_bit(link.kind) if link is not None else DEFAULT_TX_NJ_PER_BIT
    return EnergyModel(power.idle_w, power.max_w, rate, assumed=True)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where nodes run, tensors crossing (uplink, and outputs sent back), and all three costs.

    ``transfer_ms`` includes the RTT when anything runs in the cloud; ``link_ms`` is the
    transfer time without it (uplink + downlink). ``energy_mj`` is device energy per frame
    (``EnergyModel``). ``stage_ms`` is the slowest stage of a pipelined stream: the device
    computes frame k+1 while the link carries frame k (uplink, and the outputs' downlink on the
    same stage: a conservative half-duplex link) while the cloud computes frame k-1, so
    ``stage_ms = max(edge_ms, link_ms, cloud_ms)`` and ``fps = 1000 / stage_ms``; the RTT adds
    latency but does not limit throughput. ``objective`` is what the solver minimised
    (``evaluate`` says ``latency``) and ``exact`` whether the result is provably optimal.
    """

    edge: frozenset[str]
    cloud: frozenset[str]
    cut: tuple[str, ...]
    edge_ms: float
    transfer_ms: float
    cloud_ms: float
    total_ms: float
    kind: Kind
    link_ms: float
    energy_mj: float
    stage_ms: float
    energy_assumed: bool = False
    objective: ObjectiveName = "latency"
    exact: bool = True

    @property
    def fps(self) -> float:
        """Frames per second of a pipelined stream (``inf`` when every stage is free)."""
        return 1000.0 / self.stage_ms if self.stage_ms > 0 else math.inf

    def score(self, objective: ObjectiveName) -> float:
        """The value ``objective`` minimises: total_ms, energy_mj or stage_ms."""
        return {"latency": self.total_ms, "energy": self.energy_mj,
                "throughput": self.stage_ms}[objective]


def transfer_ms(nbytes: int, mbps: float) -> float:
    """Milliseconds to send ``nbytes`` at ``mbps`` megabits per second."""
    return nbytes * 8.0 / (mbps * 1e3)


def is_runnable(graph: Graph, edge: Iterable[str]) -> bool:
    """Whether every producer of a tensor an edge node consumes is on the edge too."""
    on_edge = set(edge)
    return all(t.producer in on_edge or t.producer == SOURCE
               for t in graph.tensors for c in t.consumers if c in on_edge)


def evaluate(graph: Graph, edge: Iterable[str], bandwidth_mbps: float, rtt_ms: float,
             downlink_mbps: float | None = None,
             energy: EnergyModel | None = None) -> Placement:
    """The placement with these nodes on the edge (the rest in the cloud) and its costs."""
    model = energy or DEFAULT_ENERGY
    on_edge = frozenset(edge)
    cloud = frozenset(n.name for n in graph.nodes) - on_edge
    down = downlink_mbps or bandwidth_mbps
    sent = [t for t in graph.tensors if _crosses(t, on_edge, cloud)]
    moved = sum((_tensor_ms(t, cloud, bandwidth_mbps, down) for t in sent), 0.0)
    bytes_up = sum(t.bytes for t in sent if t.producer not in cloud)
    edge_ms = sum((n.edge_ms for n in graph.nodes if n.name in on_edge), 0.0)
    cloud_ms = sum((n.cloud_ms for n in graph.nodes if n.name in cloud), 0.0)
    rtt = rtt_ms if cloud else 0.0
    return Placement(edge=on_edge, cloud=cloud, cut=tuple(t.name for t in sent), edge_ms=edge_ms,
                     transfer_ms=moved + rtt, cloud_ms=cloud_ms,
                     total_ms=edge_ms + moved + rtt + cloud_ms, kind=_kind(on_edge, cloud),
                     link_ms=moved, energy_mj=model.mj(edge_ms, moved + rtt + cloud_ms, bytes_up),
                     stage_ms=max(edge_ms, moved, cloud_ms), energy_assumed=model.assumed)


def solve(graph: Graph, bandwidth_mbps: float, rtt_ms: float,
          downlink_mbps: float | None = None, *, objective: ObjectiveName = "latency",
          energy: EnergyModel | None = None, max_sets: int = MAX_SETS) -> Placement:
    """The runnable placement minimising ``objective`` (see the module docstring).

    ``energy`` is required for ``objective="energy"`` (e.g. ``energy_model(profile.power,
    profile.link)``); with other objectives it only prices ``Placement.energy_mj``.
    ``max_sets`` caps the throughput enumeration.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if objective == "energy" and energy is None:
        raise ValueError("objective 'energy' needs an energy model (energy_model(power, link))")
    link = _Link(bandwidth_mbps, downlink_mbps or bandwidth_mbps, rtt_ms)
    if objective == "throughput":
        best = _solve_throughput(graph, link, energy, max_sets)
    else:
        weights = _energy_weights(energy) if energy and objective == "energy" else _LATENCY
        best = _solve_additive(graph, link, energy, weights, objective)
    return replace(best, objective=objective)


# --- additive objectives: min cut --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Link:
    up_mbps: float
    down_mbps: float
    rtt_ms: float


@dataclass(frozen=True, slots=True)
class _Weights:
    """An additive objective: coefficients of edge ms, cloud ms, link ms and uplink bytes."""

    edge: float
    cloud: float
    link: float
    per_byte_up: float = 0.0


_LATENCY = _Weights(1.0, 1.0, 1.0)


def _energy_weights(model: EnergyModel) -> _Weights:
    return _Weights(model.max_w, model.idle_w, model.idle_w, model.radio_mj(1))


def _solve_additive(graph: Graph, link: _Link, energy: EnergyModel | None, weights: _Weights,
                    objective: ObjectiveName) -> Placement:
    """Exact with RTT: if the RTT-free optimum is all-edge, all-edge is optimal with RTT too;
    otherwise the best placement is that optimum + RTT or all-edge, both compared here."""
    edge = _min_cut_edge_set(graph, link, weights)
    names = [n.name for n in graph.nodes]
    candidates = [_evaluate(graph, e, link, energy) for e in (edge, names, ())]
    if objective == "latency":
        return min(candidates, key=lambda p: p.total_ms)
    return min(candidates, key=lambda p: (p.energy_mj, p.total_ms))


def _evaluate(graph: Graph, edge: Iterable[str], link: _Link,
              energy: EnergyModel | None) -> Placement:
    return evaluate(graph, edge, link.up_mbps, link.rtt_ms, link.down_mbps, energy)


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


def _min_cut_edge_set(graph: Graph, link: _Link, weights: _Weights) -> frozenset[str]:
    """Nodes on the source (edge) side of a minimum cut of the RTT-free objective."""
    # networkx (~0.2 s to import) here, not at the top: a device's split client imports this
    # module for the energy model and never solves
    import networkx as nx
    from networkx.algorithms.flow import boykov_kolmogorov

    flow = _flow_graph(nx.DiGraph(), graph, link, weights)
    _, (edge_side, _) = nx.minimum_cut(flow, _S, _T, flow_func=boykov_kolmogorov)
    return frozenset(n.name for n in graph.nodes if n.name in edge_side)


def _flow_graph(flow: nx.DiGraph, graph: Graph, link: _Link, weights: _Weights) -> nx.DiGraph:
    """``flow`` (empty) as s = edge, t = cloud; an s-side node pays its edge cost, a t-side
    node its cloud cost."""
    flow.add_nodes_from([_S, _T])
    for node in graph.nodes:
        _add(flow, node.name, _T, weights.edge * node.edge_ms)
        _add(flow, _S, node.name, weights.cloud * node.cloud_ms)
    for tensor in graph.tensors:
        _add_tensor(flow, tensor, link, weights)
    return flow


def _add_tensor(flow: nx.DiGraph, tensor: Tensor, link: _Link, weights: _Weights) -> None:
    """Uplink paid once via an auxiliary node; precedence and the return trip of outputs."""
    producer = _S if tensor.producer == SOURCE else tensor.producer
    consumers = [c for c in tensor.consumers if c != SINK]
    aux = f"<tensor:{tensor.name}>"
    up = weights.link * transfer_ms(tensor.bytes, link.up_mbps)
    _add(flow, producer, aux, up + weights.per_byte_up * tensor.bytes)
    for consumer in consumers:
        _add(flow, aux, consumer, None)
        _add(flow, consumer, producer, None)  # no cloud producer may feed an edge consumer
    if tensor.is_output and producer != _S:
        _add(flow, _S, producer, weights.link * transfer_ms(tensor.bytes, link.down_mbps))


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


# --- throughput: enumerate the runnable edge sets ----------------------------------------------

#: Fallback min-cut sweep: link and cloud weights (edge weight 1) of scalarised objectives.
_SWEEP = (0.1, 1.0, 10.0)


def _solve_throughput(graph: Graph, link: _Link, energy: EnergyModel | None,
                      max_sets: int) -> Placement:
    """Exact while the runnable edge sets number at most ``max_sets``, else best of heuristics.

    Ties on the slowest stage go to the lower latency.
    """
    dag = _Dag.of(graph, link)
    search = _Search(dag, link.rtt_ms)
    exact = search.enumerate(max_sets)
    if not exact:
        search.prefixes()
    candidates = [_evaluate(graph, search.best_edge(), link, energy)]
    if not exact:
        candidates += [_evaluate(graph, e, link, energy) for e in _sweep_edge_sets(graph, link)]
    best = min(candidates, key=lambda p: (p.stage_ms, p.total_ms))
    return replace(best, exact=exact)


def _sweep_edge_sets(graph: Graph, link: _Link) -> Iterator[frozenset[str]]:
    """Min-cut edge sets of ``edge + l * link + c * cloud`` for a grid of weights l and c."""
    for link_w in _SWEEP:
        for cloud_w in _SWEEP:
            yield _min_cut_edge_set(graph, link, _Weights(1.0, cloud_w, link_w))


@dataclass(frozen=True, slots=True)
class _Dag:
    """Index-based view of a graph in topological order, for the enumeration."""

    names: tuple[str, ...]
    edge_ms: tuple[float, ...]
    cloud_ms: tuple[float, ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    produced: tuple[tuple[int, ...], ...]  # tensors a node makes
    consumed: tuple[tuple[int, ...], ...]  # tensors a node reads
    up_ms: tuple[float, ...]  # per tensor
    down_ms: tuple[float, ...]  # per tensor: downlink ms if a graph output, else 0
    readers: tuple[int, ...]  # per tensor: compute consumers
    source: tuple[bool, ...]  # per tensor: a graph input

    @classmethod
    def of(cls, graph: Graph, link: _Link) -> _Dag:
        order = _topological(graph)
        index = {name: i for i, name in enumerate(order)}
        nodes = {n.name: n for n in graph.nodes}
        preds: list[set[int]] = [set() for _ in order]
        produced: list[list[int]] = [[] for _ in order]
        consumed: list[set[int]] = [set() for _ in order]
        for t, tensor in enumerate(graph.tensors):
            readers = {index[c] for c in tensor.consumers if c != SINK}
            for r in readers:
                consumed[r].add(t)
            if tensor.producer != SOURCE:
                produced[index[tensor.producer]].append(t)
                for r in readers:
                    preds[r].add(index[tensor.producer])
        succs: list[list[int]] = [[] for _ in order]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        tensors = graph.tensors
        return cls(
            names=order,
            edge_ms=tuple(nodes[n].edge_ms for n in order),
            cloud_ms=tuple(nodes[n].cloud_ms for n in order),
            preds=tuple(tuple(sorted(p)) for p in preds),
            succs=tuple(tuple(sorted(s)) for s in succs),
            produced=tuple(tuple(p) for p in produced),
            consumed=tuple(tuple(sorted(c)) for c in consumed),
            up_ms=tuple(transfer_ms(t.bytes, link.up_mbps) for t in tensors),
            down_ms=tuple(transfer_ms(t.bytes, link.down_mbps) if t.is_output else 0.0
                          for t in tensors),
            readers=tuple(len({c for c in t.consumers if c != SINK}) for t in tensors),
            source=tuple(t.producer == SOURCE for t in tensors),
        )


def _topological(graph: Graph) -> tuple[str, ...]:
    """Node names in a topological order, graph order among the ready ones (Kahn)."""
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    succs: dict[str, set[str]] = {n.name: set() for n in graph.nodes}
    for t in graph.tensors:
        if t.producer != SOURCE:
            succs[t.producer].update(c for c in t.consumers if c not in (SINK, t.producer))
    missing = dict.fromkeys(position, 0)
    for targets in succs.values():
        for s in targets:
            missing[s] += 1
    ready = [(position[n], n) for n, m in missing.items() if m == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for s in succs[name]:
            missing[s] -= 1
            if missing[s] == 0:
                heapq.heappush(ready, (position[s], s))
    if len(order) != len(graph.nodes):
        raise ValueError("the graph has a cycle")
    return tuple(order)


_Sums = tuple[float, float, float, float]  # edge, cloud, uplink and downlink ms


class _Search:
    """Incremental costs of an edge set (an ideal of the DAG) as nodes join it, best so far.

    Sums are saved and restored (not subtracted) on backtracking, so they do not drift.
    """

    def __init__(self, dag: _Dag, rtt_ms: float) -> None:
        self.dag = dag
        self.rtt_ms = rtt_ms
        self.missing = [len(p) for p in dag.preds]  # predecessors not yet on the edge
        self.outside = list(dag.readers)  # per tensor: readers not yet on the edge
        self.edge = 0.0
        self.cloud = math.fsum(dag.cloud_ms)
        self.up = math.fsum(u for u, r, s in zip(dag.up_ms, dag.readers, dag.source, strict=True)
                            if s and r)
        self.down = math.fsum(d for d, s in zip(dag.down_ms, dag.source, strict=True) if not s)
        self.path: list[int] = []
        self.best: tuple[float, float, tuple[int, ...]] = (math.inf, math.inf, ())
        self.visit()

    def add(self, x: int) -> _Sums:
        """Put node ``x`` on the edge; return the sums before, for ``undo``."""
        dag, saved = self.dag, (self.edge, self.cloud, self.up, self.down)
        self.edge += dag.edge_ms[x]
        self.cloud -= dag.cloud_ms[x]
        for t in dag.produced[x]:
            self.down -= dag.down_ms[t]
            if self.outside[t]:
                self.up += dag.up_ms[t]
        for t in dag.consumed[x]:
            self.outside[t] -= 1
            if not self.outside[t]:
                self.up -= dag.up_ms[t]
        for s in dag.succs[x]:
            self.missing[s] -= 1
        self.path.append(x)
        return saved

    def undo(self, x: int, saved: _Sums) -> None:
        """Take node ``x`` (the last added) back to the cloud."""
        dag = self.dag
        for t in dag.consumed[x]:
            self.outside[t] += 1
        for s in dag.succs[x]:
            self.missing[s] += 1
        self.path.pop()
        self.edge, self.cloud, self.up, self.down = saved

    def visit(self) -> None:
        """Keep the current set if its slowest stage (then its latency) is the best so far."""
        link = max(self.up, 0.0) + max(self.down, 0.0)
        cloud = max(self.cloud, 0.0) if len(self.path) < len(self.dag.names) else 0.0
        stage = max(self.edge, link, cloud)
        rtt = self.rtt_ms if len(self.path) < len(self.dag.names) else 0.0
        latency = self.edge + link + cloud + rtt
        best_stage, best_latency, _ = self.best
        if _less(stage, best_stage) or (not _less(best_stage, stage)
                                        and _less(latency, best_latency)):
            self.best = (stage, latency, tuple(self.path))

    def best_edge(self) -> frozenset[str]:
        return frozenset(self.dag.names[i] for i in self.best[2])

    def enumerate(self, max_sets: int) -> bool:
        """Visit every ideal once; False (the search stopped, the state restored) when there
        are more than ``max_sets``.

        A state's candidates are nodes whose predecessors are all in. Taking the i-th candidate
        leaves candidates 0..i-1 out of that whole subtree (they and everything above them), so
        the branches are disjoint; the child's candidates are the later ones plus the nodes the
        taken one made available. Each ideal is thus reached exactly once, at O(width) a state.
        """
        # A frame: candidates, the node added to reach this state (-1: none) and the sums
        # before it; ``pos``: next candidate per frame.
        stack: list[tuple[list[int], int, _Sums]] = [
            ([i for i, m in enumerate(self.missing) if m == 0], -1, (0.0, 0.0, 0.0, 0.0))]
        pos = [0]
        count = 1
        while stack:
            cands, added, saved = stack[-1]
            if pos[-1] == len(cands):
                self._pop(stack, pos)
                continue
            x = cands[pos[-1]]
            pos[-1] += 1
            count += 1
            if count > max_sets:
                while stack:
                    self._pop(stack, pos)
                return False
            before = self.add(x)
            self.visit()
            fresh = [s for s in self.dag.succs[x] if self.missing[s] == 0]
            stack.append((cands[pos[-1]:] + fresh, x, before))
            pos.append(0)
        return True

    def _pop(self, stack: list[tuple[list[int], int, _Sums]], pos: list[int]) -> None:
        _, added, saved = stack.pop()
        pos.pop()
        if added >= 0:
            self.undo(added, saved)

    def prefixes(self) -> None:
        """Visit every prefix of the topological order (each is runnable), then restore."""
        added: list[tuple[int, _Sums]] = []
        for x in range(len(self.dag.names)):
            added.append((x, self.add(x)))
            self.visit()
        for x, saved in reversed(added):
            self.undo(x, saved)


def _less(a: float, b: float) -> bool:
    """``a < b`` beyond float noise."""
    return a < b - _REL * max(1.0, abs(b)) if math.isfinite(b) else a < b
