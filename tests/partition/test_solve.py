"""The min-cut partitioner against exhaustive search, and on a real ONNX CNN with a skip."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from edge.core.profile import load_profile
from partition.cost import node_costs
from partition.graph import SINK, SOURCE, Graph, Node, Tensor, build_graph
from partition.solve import Placement, evaluate, is_runnable, solve

# A graph spec: node names, and tensors as (name, producer, consumers).
Spec = tuple[tuple[str, ...], tuple[tuple[str, str, tuple[str, ...]], ...]]

CHAIN: Spec = (
    ("a", "b", "c", "d", "e"),
    (("x", SOURCE, ("a",)), ("ta", "a", ("b",)), ("tb", "b", ("c",)), ("tc", "c", ("d",)),
     ("td", "d", ("e",)), ("y", "e", (SINK,))),
)
RESIDUAL: Spec = (
    ("stem", "c1", "c2", "add", "c3", "head"),
    (("x", SOURCE, ("stem",)), ("s", "stem", ("c1", "add")), ("t1", "c1", ("c2",)),
     ("t2", "c2", ("add",)), ("r", "add", ("c3", "head")), ("t3", "c3", ("head",)),
     ("y", "head", (SINK,))),
)
INCEPTION: Spec = (
    ("stem", "b1", "b2a", "b2b", "b3a", "b3b", "pool", "cat", "fc"),
    (("x", SOURCE, ("stem", "pool")), ("s", "stem", ("b1", "b2a", "b3a")),
     ("o1", "b1", ("cat",)), ("o2a", "b2a", ("b2b",)), ("o2", "b2b", ("cat",)),
     ("o3a", "b3a", ("b3b",)), ("o3", "b3b", ("cat",)), ("p", "pool", ("cat",)),
     ("c", "cat", ("fc", SINK)), ("y", "fc", (SINK,))),
)
SPECS = {"chain": CHAIN, "residual": RESIDUAL, "inception": INCEPTION}
SEEDS_PER_GRAPH = 80  # 3 graphs x 80 = 240 random cost assignments


def make_graph(spec: Spec, rng: random.Random) -> Graph:
    """The spec with random node costs and tensor sizes (some extreme, some zero)."""
    names, tensors = spec
    nodes = tuple(Node(n, _ms(rng), _ms(rng)) for n in names)
    return Graph(nodes, tuple(Tensor(t, _bytes(rng), p, cs) for t, p, cs in tensors))


def _ms(rng: random.Random) -> float:
    return rng.choice([0.0, rng.uniform(0, 1), rng.uniform(0, 50), rng.uniform(0, 500)])


def _bytes(rng: random.Random) -> int:
    return rng.choice([0, rng.randint(1, 1000), rng.randint(1, 10**6), rng.randint(1, 10**7)])


def link(rng: random.Random) -> tuple[float, float, float]:
    """Random uplink Mbps, RTT ms and downlink Mbps."""
    return rng.choice([1, 10, 100, 1000]) * rng.uniform(0.5, 2), rng.uniform(0, 100), \
        rng.choice([1, 10, 100, 1000]) * rng.uniform(0.5, 2)


def reference_total(graph: Graph, edge: set[str], up: float, rtt: float, down: float) -> float:
    """The objective, written independently of partition.solve."""
    cloud = {n.name for n in graph.nodes} - edge
    total = sum(n.edge_ms if n.name in edge else n.cloud_ms for n in graph.nodes)
    total += rtt if cloud else 0.0
    for t in graph.tensors:
        if t.producer not in cloud and any(c in cloud for c in t.consumers):
            total += t.bytes * 8 / (up * 1e6) * 1e3
        if t.producer in cloud and SINK in t.consumers:
            total += t.bytes * 8 / (down * 1e6) * 1e3
    return total


def runnable_edge_sets(graph: Graph) -> list[set[str]]:
    """Every down-closed edge set: each predecessor of an edge node is on the edge."""
    names = [n.name for n in graph.nodes]
    preds = {n: graph.predecessors(n) for n in names}
    sets = []
    for mask in itertools.product((False, True), repeat=len(names)):
        edge = {n for n, on in zip(names, mask, strict=True) if on}
        if all(preds[n] <= edge for n in edge):
            sets.append(edge)
    return sets


def exhaustive(graph: Graph, up: float, rtt: float, down: float) -> float:
    """The best objective over all runnable placements."""
    return min(reference_total(graph, e, up, rtt, down) for e in runnable_edge_sets(graph))


def assert_runnable(graph: Graph, placement: Placement) -> None:
    """No edge node is fed by a cloud node, and every node is placed exactly once."""
    everyone = {n.name for n in graph.nodes}
    assert placement.edge | placement.cloud == everyone
    assert not placement.edge & placement.cloud
    for name in placement.edge:
        assert graph.predecessors(name) <= placement.edge, name
    assert is_runnable(graph, placement.edge)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_solver_matches_exhaustive_search(kind: str) -> None:
    """Random costs: min-cut total equals brute force, and the placement is runnable."""
    spec = SPECS[kind]
    for seed in range(SEEDS_PER_GRAPH):
        rng = random.Random(f"{kind}-{seed}")
        graph = make_graph(spec, rng)
        up, rtt, down = link(rng)
        placement = solve(graph, up, rtt, downlink_mbps=down)
        assert_runnable(graph, placement)
        best = exhaustive(graph, up, rtt, down)
        assert placement.total_ms == pytest.approx(best, rel=1e-9, abs=1e-9), (kind, seed)
        check = reference_total(graph, set(placement.edge), up, rtt, down)
        assert placement.total_ms == pytest.approx(check, rel=1e-9, abs=1e-9)


def test_solver_matches_exhaustive_search_on_random_dags() -> None:
    """Random DAGs up to 10 nodes with random fan-out and outputs, 60 cases."""
    for seed in range(60):
        rng = random.Random(seed)
        graph = _random_dag(rng)
        up, rtt, down = link(rng)
        placement = solve(graph, up, rtt, downlink_mbps=down)
        assert_runnable(graph, placement)
        assert placement.total_ms == pytest.approx(exhaustive(graph, up, rtt, down),
                                                   rel=1e-9, abs=1e-9), seed


def _random_dag(rng: random.Random) -> Graph:
    count = rng.randint(2, 10)
    names = [f"n{i}" for i in range(count)]
    tensors = [Tensor("x", _bytes(rng), SOURCE, (names[0],))]
    for i, name in enumerate(names):
        later = names[i + 1:]
        consumers = tuple(rng.sample(later, rng.randint(1, min(3, len(later))))) if later else ()
        if not later or rng.random() < 0.15:
            consumers += (SINK,)
        tensors.append(Tensor(f"t{i}", _bytes(rng), name, consumers))
    return Graph(tuple(Node(n, _ms(rng), _ms(rng)) for n in names), tuple(tensors))


def test_precedence_forbids_returning_to_the_edge() -> None:
    """A cheap cloud node between edge nodes would be chosen without precedence constraints."""
    nodes = (Node("a", 1.0, 100.0), Node("b", 100.0, 0.0), Node("c", 1.0, 1000.0))
    tensors = (Tensor("x", 0, SOURCE, ("a",)), Tensor("ta", 0, "a", ("b",)),
               Tensor("tb", 0, "b", ("c",)), Tensor("y", 0, "c", (SINK,)))
    graph = Graph(nodes, tensors)
    placement = solve(graph, 100.0, 0.0)
    assert_runnable(graph, placement)
    assert placement.edge == {"a", "b", "c"}
    assert evaluate(graph, {"a", "c"}, 100.0, 0.0).total_ms < placement.total_ms  # unrunnable


def test_a_tensor_read_by_several_cloud_nodes_is_sent_once() -> None:
    """Fan-out to three cloud nodes pays one uplink transfer."""
    nodes = (Node("stem", 0.0, 1000.0), Node("b1", 50.0, 0.0), Node("b2", 50.0, 0.0),
             Node("b3", 50.0, 0.0), Node("cat", 50.0, 0.0))
    tensors = (Tensor("x", 10**6, SOURCE, ("stem",)),
               Tensor("s", 125_000, "stem", ("b1", "b2", "b3")),
               *(Tensor(f"o{i}", 10**6, f"b{i}", ("cat",)) for i in (1, 2, 3)),
               Tensor("y", 0, "cat", (SINK,)))
    placement = solve(Graph(nodes, tensors), 1000.0, 0.0)  # 125 kB at 1000 Mbps = 1 ms
    assert placement.kind == "split"
    assert placement.cut == ("s", "y")  # y: the output made in the cloud returns (0 bytes)
    assert placement.transfer_ms == pytest.approx(1.0)
    assert placement.total_ms == pytest.approx(1.0)


def test_rtt_and_return_transfer_are_counted() -> None:
    """RTT is paid once for any cloud work; outputs made in the cloud come back down."""
    nodes = (Node("a", 10.0, 1.0), Node("b", 10.0, 1.0))
    tensors = (Tensor("x", 0, SOURCE, ("a",)), Tensor("t", 0, "a", ("b",)),
               Tensor("y", 125_000, "b", (SINK,)))
    graph = Graph(nodes, tensors)
    cloud = solve(graph, 1000.0, 5.0, downlink_mbps=1000.0)
    assert cloud.kind == "all-cloud"
    assert cloud.transfer_ms == pytest.approx(6.0)  # 5 ms RTT + 1 ms back
    assert cloud.total_ms == pytest.approx(8.0)
    assert solve(graph, 1000.0, 20.0).kind == "all-edge"
    assert solve(graph, 1000.0, 5.0, downlink_mbps=10.0).kind in ("all-edge", "split")


def test_latency_is_the_default_and_every_placement_has_all_costs() -> None:
    """The old call still minimises latency, exactly; energy and the pipeline stage come too."""
    rng = random.Random("defaults")
    graph = make_graph(RESIDUAL, rng)
    placement = solve(graph, 20.0, 10.0, 40.0)
    assert placement.objective == "latency" and placement.exact
    same = evaluate(graph, placement.edge, 20.0, 10.0, 40.0)
    assert placement == same
    assert same.stage_ms == pytest.approx(max(same.edge_ms, same.link_ms, same.cloud_ms))
    assert same.energy_mj > 0 and same.energy_assumed  # no energy model given: assumed default


# --- a real ONNX model -------------------------------------------------------------------------


def _small_cnn(path: Path, size: int = 112, width: int = 32) -> Path:
    """Conv-Relu-Conv-Add(skip)-Relu-GAP-Flatten-Gemm, batch dim symbolic."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="skip_add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "skipcnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [weight("w1", width, 3, 3, 3), weight("b1", width), weight("w2", width, width, 3, 3),
         weight("b2", width), weight("w3", 10, width), weight("b3", 10)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small CNN with a skip connection, saved as ONNX."""
    return _small_cnn(tmp_path_factory.mktemp("partition") / "skipcnn.onnx")


NODES = {"conv1", "relu1", "conv2", "skip_add", "relu2", "gap", "flatten", "fc"}


def test_graph_of_a_real_model(cnn: Path) -> None:
    """Tensor bytes from shape inference (batch pinned to 1), producers and consumers."""
    graph = build_graph(cnn, {}, {})
    assert {n.name for n in graph.nodes} == NODES
    tensors = {t.name: t for t in graph.tensors}
    assert tensors["x"].producer == SOURCE and tensors["x"].bytes == 3 * 112 * 112 * 4
    assert set(tensors["r1"].consumers) == {"conv2", "skip_add"}
    assert tensors["r1"].bytes == 32 * 112 * 112 * 4
    assert tensors["y"].consumers == (SINK,) and tensors["y"].bytes == 40
    assert "w1" not in tensors


def test_node_costs_measured_and_estimated(cnn: Path) -> None:
    """Measured costs cover every node; estimates are all positive, convs dominate."""
    profile = load_profile("rpi4")
    measured = node_costs(cnn, profile, measured=True)
    assert set(measured) == NODES
    assert all(v >= 0 for v in measured.values()) and sum(measured.values()) > 0
    estimate = node_costs(cnn, profile, measured=False)
    assert set(estimate) == NODES and all(v > 0 for v in estimate.values())
    assert estimate["conv2"] > estimate["relu1"]


@pytest.mark.parametrize("measured", [False, True])
def test_choice_flips_with_device_and_link(cnn: Path, measured: bool) -> None:
    """Fast device + slow link keeps all on the edge; slow device + fast link offloads."""
    cloud = node_costs(cnn, load_profile("cloud-c7i"), measured=False)
    fast = node_costs(cnn, load_profile("intel-nuc"), measured=measured)
    slow = node_costs(cnn, load_profile("rpi-zero-2w"), measured=False)
    if measured:  # the host stands in for the fast device; a slow one is 1000x slower
        slow = {k: v * 1000 for k, v in fast.items()}
    near = solve(build_graph(cnn, fast, cloud), bandwidth_mbps=1.0, rtt_ms=50.0)
    assert near.kind == "all-edge" and near.transfer_ms == 0
    far = solve(build_graph(cnn, slow, cloud), bandwidth_mbps=10_000.0, rtt_ms=1.0)
    assert far.kind in ("split", "all-cloud") and far.cloud
    assert far.total_ms < evaluate(build_graph(cnn, slow, cloud), NODES, 10_000.0, 1.0).total_ms
