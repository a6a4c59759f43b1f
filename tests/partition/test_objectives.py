"""Energy and throughput objectives against exhaustive search; the enumeration cap; the link's
radio energy in profiles."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from edge.core.errors import UsageError
from edge.core.profile import Link, Power, load_profile, profile_schema, validate_file
from partition.graph import SINK, SOURCE, Graph, Node, Tensor
from partition.solve import (
    DEFAULT_ENERGY,
    EnergyModel,
    energy_model,
    evaluate,
    solve,
    tx_nj_per_bit,
)
from tests.partition.test_solve import (
    SPECS,
    _random_dag,
    assert_runnable,
    link,
    make_graph,
    runnable_edge_sets,
)

SEEDS_PER_GRAPH = 80  # 3 graphs x 80 = 240 random cost sets per objective


def random_energy(rng: random.Random) -> EnergyModel:
    """Idle 0-5 W, busy above it, radio from nearly free to very expensive."""
    idle = rng.choice([0.0, rng.uniform(0, 5)])
    return EnergyModel(idle, idle + rng.uniform(0.1, 20),
                       rng.choice([0.0, 0.1, 1.0, 10.0, 100.0, 1000.0]) * rng.uniform(0.5, 2))


def _parts(graph: Graph, edge: set[str], up: float, down: float) -> tuple[float, ...]:
    """Edge ms, cloud ms, uplink ms, downlink ms and bytes sent up, written independently."""
    cloud = {n.name for n in graph.nodes} - edge
    edge_ms = sum(n.edge_ms for n in graph.nodes if n.name in edge)
    cloud_ms = sum(n.cloud_ms for n in graph.nodes if n.name in cloud)
    up_ms = down_ms = 0.0
    up_bytes = 0
    for t in graph.tensors:
        if t.producer not in cloud and any(c in cloud for c in t.consumers):
            up_ms += t.bytes * 8 / (up * 1e6) * 1e3
            up_bytes += t.bytes
        if t.producer in cloud and SINK in t.consumers:
            down_ms += t.bytes * 8 / (down * 1e6) * 1e3
    return edge_ms, cloud_ms, up_ms, down_ms, up_bytes


def reference_energy(graph: Graph, edge: set[str], up: float, rtt: float, down: float,
                     model: EnergyModel) -> float:
    """mJ: busy edge compute, idle wait for link, RTT and cloud, radio per bit sent."""
    edge_ms, cloud_ms, up_ms, down_ms, up_bytes = _parts(graph, edge, up, down)
    wait = up_ms + down_ms + cloud_ms + (rtt if len(edge) < len(graph.nodes) else 0.0)
    return model.max_w * edge_ms + model.idle_w * wait + model.tx_nj_per_bit * up_bytes * 8e-6


def reference_stage(graph: Graph, edge: set[str], up: float, down: float) -> float:
    """The slowest of edge compute, link (uplink + downlink), cloud compute."""
    edge_ms, cloud_ms, up_ms, down_ms, _ = _parts(graph, edge, up, down)
    return max(edge_ms, up_ms + down_ms, cloud_ms)


def check_energy(graph: Graph, rng: random.Random, label: object) -> None:
    up, rtt, down = link(rng)
    model = random_energy(rng)
    placement = solve(graph, up, rtt, down, objective="energy", energy=model)
    assert_runnable(graph, placement)
    assert placement.objective == "energy" and placement.exact
    best = min(reference_energy(graph, e, up, rtt, down, model)
               for e in runnable_edge_sets(graph))
    assert placement.energy_mj == pytest.approx(best, rel=1e-9, abs=1e-9), label
    again = reference_energy(graph, set(placement.edge), up, rtt, down, model)
    assert placement.energy_mj == pytest.approx(again, rel=1e-9, abs=1e-9), label


def check_throughput(graph: Graph, rng: random.Random, label: object) -> None:
    up, rtt, down = link(rng)
    placement = solve(graph, up, rtt, down, objective="throughput")
    assert_runnable(graph, placement)
    assert placement.objective == "throughput" and placement.exact
    best = min(reference_stage(graph, e, up, down) for e in runnable_edge_sets(graph))
    assert placement.stage_ms == pytest.approx(best, rel=1e-9, abs=1e-9), label
    again = reference_stage(graph, set(placement.edge), up, down)
    assert placement.stage_ms == pytest.approx(again, rel=1e-9, abs=1e-9), label


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_energy_matches_exhaustive_search(kind: str) -> None:
    for seed in range(SEEDS_PER_GRAPH):
        rng = random.Random(f"energy-{kind}-{seed}")
        check_energy(make_graph(SPECS[kind], rng), rng, (kind, seed))


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_throughput_matches_exhaustive_search(kind: str) -> None:
    for seed in range(SEEDS_PER_GRAPH):
        rng = random.Random(f"throughput-{kind}-{seed}")
        check_throughput(make_graph(SPECS[kind], rng), rng, (kind, seed))


def test_energy_and_throughput_match_exhaustive_search_on_random_dags() -> None:
    for seed in range(60):
        rng = random.Random(f"dag-{seed}")
        check_energy(_random_dag(rng), rng, seed)
        check_throughput(_random_dag(rng), rng, seed)


def test_every_placement_reports_all_three_objectives() -> None:
    """evaluate fills energy and stage whatever the objective; RTT adds latency, not stage."""
    graph = make_graph(SPECS["residual"], random.Random(3))
    model = EnergyModel(1.0, 4.0, 20.0)
    for objective in ("latency", "energy", "throughput"):
        placement = solve(graph, 50.0, 30.0, 100.0, objective=objective, energy=model)
        same = evaluate(graph, placement.edge, 50.0, 30.0, 100.0, energy=model)
        assert placement.objective == objective and placement.exact
        assert placement.energy_mj == pytest.approx(same.energy_mj)
        assert placement.stage_ms == pytest.approx(same.stage_ms)
        assert placement.total_ms == pytest.approx(same.total_ms)
        assert placement.stage_ms > 0 and placement.fps == pytest.approx(1000 / placement.stage_ms)
    no_rtt = evaluate(graph, (), 50.0, 0.0, 100.0)
    rtt = evaluate(graph, (), 50.0, 30.0, 100.0)
    assert rtt.stage_ms == no_rtt.stage_ms and rtt.total_ms == pytest.approx(no_rtt.total_ms + 30)
    assert rtt.transfer_ms == pytest.approx(rtt.link_ms + 30)
    assert rtt.energy_assumed and not solve(graph, 50, 30, objective="energy",
                                            energy=model).energy_assumed


def _two_stage_chain(input_bytes: int) -> Graph:
    nodes = (Node("a", 10.0, 10.0), Node("b", 10.0, 10.0))
    tensors = (Tensor("x", input_bytes, SOURCE, ("a",)), Tensor("t", 1250, "a", ("b",)),
               Tensor("y", 0, "b", (SINK,)))
    return Graph(nodes, tensors)


def test_expensive_radio_keeps_energy_on_the_edge_while_latency_offloads() -> None:
    """1 MB input on a fast link: offloading wins latency, but 1000 nJ/bit costs 8 J to send."""
    nodes = (Node("a", 100.0, 1.0), Node("b", 100.0, 1.0))
    tensors = (Tensor("x", 10**6, SOURCE, ("a",)), Tensor("t", 10**6, "a", ("b",)),
               Tensor("y", 40, "b", (SINK,)))
    graph = Graph(nodes, tensors)
    radio = EnergyModel(idle_w=1.0, max_w=5.0, tx_nj_per_bit=1000.0)
    latency = solve(graph, 1000.0, 5.0, energy=radio)
    energy = solve(graph, 1000.0, 5.0, objective="energy", energy=radio)
    assert latency.kind == "all-cloud" and latency.total_ms < 20
    assert energy.kind == "all-edge" and energy.energy_mj == pytest.approx(1000.0)  # 200 ms x 5 W
    assert latency.energy_mj > 8000  # 8e6 bits x 1000 nJ
    cheap = solve(graph, 1000.0, 5.0, objective="energy", energy=EnergyModel(1.0, 5.0, 1.0))
    assert cheap.kind == "all-cloud"


def test_throughput_pipelines_a_split_that_latency_rejects() -> None:
    """Two 10 ms nodes: all-edge is 20 ms/frame; a split runs both at once, 10 ms/stage."""
    graph = _two_stage_chain(10**6)  # the input is too big to send: all-cloud is link-bound
    latency = solve(graph, 100.0, 5.0)
    throughput = solve(graph, 100.0, 5.0, objective="throughput")
    assert latency.kind == "all-edge" and latency.stage_ms == pytest.approx(20.0)
    assert throughput.kind == "split" and throughput.edge == {"a"}
    assert throughput.stage_ms == pytest.approx(10.0) and throughput.fps == pytest.approx(100.0)
    assert throughput.total_ms > latency.total_ms


def test_throughput_ties_go_to_the_lower_latency() -> None:
    """Node a takes 30 ms anywhere, b is free: every placement has a 30 ms stage; all-edge
    saves the RTT."""
    nodes = (Node("a", 30.0, 30.0), Node("b", 0.0, 0.0))
    tensors = (Tensor("x", 0, SOURCE, ("a",)), Tensor("t", 0, "a", ("b",)),
               Tensor("y", 0, "b", (SINK,)))
    best = solve(Graph(nodes, tensors), 10.0, 5.0, objective="throughput")
    assert best.kind == "all-edge" and best.stage_ms == 30.0 and best.total_ms == 30.0


def _ideal_count(graph: Graph) -> int:
    return len(runnable_edge_sets(graph))


def test_the_cap_counts_runnable_sets_exactly() -> None:
    """Exact with max_sets = number of runnable sets; one fewer falls back (exact=False)."""
    for seed in range(20):
        rng = random.Random(f"cap-{seed}")
        graph = _random_dag(rng)
        count = _ideal_count(graph)
        assert solve(graph, 10.0, 1.0, objective="throughput", max_sets=count).exact, seed
        fallback = solve(graph, 10.0, 1.0, objective="throughput", max_sets=count - 1)
        assert not fallback.exact and fallback.objective == "throughput", seed
        assert_runnable(graph, fallback)


def test_fallback_is_runnable_and_no_worse_than_all_edge_or_all_cloud() -> None:
    for seed in range(30):
        rng = random.Random(f"fallback-{seed}")
        graph = make_graph(SPECS["inception"], rng)
        up, rtt, down = link(rng)
        placement = solve(graph, up, rtt, down, objective="throughput", max_sets=3)
        assert not placement.exact
        assert_runnable(graph, placement)
        names = [n.name for n in graph.nodes]
        ends = [evaluate(graph, e, up, rtt, down).stage_ms for e in (names, ())]
        assert placement.stage_ms <= min(ends) + 1e-9
        best = min(reference_stage(graph, e, up, down) for e in runnable_edge_sets(graph))
        assert placement.stage_ms >= best - 1e-9


def _blocks(depth: int, width: int, rng: random.Random) -> Graph:
    """``depth`` blocks of ``width`` parallel branches joined by a concat node."""
    nodes: list[Node] = []
    tensors = [Tensor("x", 10**5, SOURCE, ("j-1",))]
    nodes.append(Node("j-1", 1.0, 0.1))
    for d in range(depth):
        branches = [f"b{d}.{w}" for w in range(width)]
        tensors.append(Tensor(f"in{d}", rng.randint(10**3, 10**6), f"j{d - 1}", tuple(branches)))
        for b in branches:
            nodes.append(Node(b, rng.uniform(0, 20), rng.uniform(0, 2)))
            tensors.append(Tensor(f"o{b}", rng.randint(10**3, 10**6), b, (f"j{d}",)))
        nodes.append(Node(f"j{d}", rng.uniform(0, 1), 0.1))
    tensors.append(Tensor("y", 40, f"j{depth - 1}", (SINK,)))
    return Graph(tuple(nodes), tuple(tensors))


def test_series_of_blocks_is_exact_and_fast() -> None:
    """60 blocks of 3 branches: 2 + 60 x 2^3 runnable sets (none, all, and per block any
    branches after the previous join), enumerated in well under a second."""
    graph = _blocks(60, 3, random.Random(0))
    count = 2 + 60 * 2**3
    start = time.perf_counter()
    exact = solve(graph, 20.0, 10.0, objective="throughput", max_sets=count)
    assert exact.exact and time.perf_counter() - start < 2.0
    assert not solve(graph, 20.0, 10.0, objective="throughput", max_sets=count - 1).exact
    assert_runnable(graph, exact)


def test_wide_graph_falls_back_under_the_default_cap() -> None:
    """One block of 18 parallel branches has 2^18 + 2 > 200 000 runnable sets."""
    graph = _blocks(1, 18, random.Random(1))
    start = time.perf_counter()
    placement = solve(graph, 20.0, 10.0, objective="throughput")
    assert not placement.exact
    assert_runnable(graph, placement)
    assert time.perf_counter() - start < 10.0


def test_bad_arguments() -> None:
    graph = _two_stage_chain(10)
    with pytest.raises(ValueError, match="energy model"):
        solve(graph, 10.0, 1.0, objective="energy")
    with pytest.raises(ValueError, match="unknown objective"):
        solve(graph, 10.0, 1.0, objective="joules")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad energy model"):
        EnergyModel(idle_w=-1.0, max_w=5.0, tx_nj_per_bit=1.0)


# --- the link's radio energy in profiles -------------------------------------------------------


def test_assumed_radio_energy_per_link_kind() -> None:
    assert tx_nj_per_bit("ethernet") == 5.0
    assert tx_nj_per_bit("wifi5") == tx_nj_per_bit("WiFi6") == tx_nj_per_bit("wifi4") == 20.0
    assert tx_nj_per_bit("lte") == 100.0 and tx_nj_per_bit("5g") == 50.0
    assert tx_nj_per_bit("datacenter") == 1.0 and tx_nj_per_bit("satellite") == 50.0
    assert DEFAULT_ENERGY.assumed


def test_energy_model_from_a_profile() -> None:
    """A catalog profile has no tx_nj_per_bit: assumed from its kind; a set value is used."""
    profile = load_profile("rpi4")
    assumed = energy_model(profile.power, profile.link)
    assert assumed.assumed and assumed.tx_nj_per_bit == 20.0  # wifi5
    assert (assumed.idle_w, assumed.max_w) == (profile.power.idle_w, profile.power.max_w)
    given = Link(kind="lte", uplink_mbps=10, downlink_mbps=50, rtt_ms=40, tx_nj_per_bit=250)
    model = energy_model(Power(idle_w=1, max_w=4), given)
    assert not model.assumed and model.tx_nj_per_bit == 250.0
    assert energy_model(Power(idle_w=1, max_w=4), given, nj_per_bit=7).tx_nj_per_bit == 7.0
    assert energy_model(Power(idle_w=1, max_w=4)).assumed


@pytest.mark.parametrize("value", [0, -3])
def test_profile_link_tx_energy_must_be_positive(tmp_path: Path, value: float) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("extends: rpi4\nlink:\n  tx_nj_per_bit: 35.5\n")
    assert validate_file(good).link.tx_nj_per_bit == 35.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: rpi4\nlink:\n  tx_nj_per_bit: {value}\n")
    with pytest.raises(UsageError, match=r"link\.tx_nj_per_bit.*greater than 0"):
        validate_file(bad)


def test_profile_schema_lists_the_link_tx_energy() -> None:
    link_schema = profile_schema()["$defs"]["Link"]["properties"]["tx_nj_per_bit"]
    assert "nJ" in link_schema["description"]
