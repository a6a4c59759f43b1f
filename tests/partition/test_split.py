"""Split models at every valid cut and check head→tail reproduces the full model exactly."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.errors import UsageError
from partition.split import (
    SplitModels,
    read_split_yaml,
    split_model,
    verify_split,
    write_split_yaml,
)

RNG = np.random.default_rng(0)
WIDTH = 4


def _const(name: str, shape: tuple[int, ...]) -> TensorProto:
    """A random fp32 initializer."""
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _model(
    nodes: list[onnx.NodeProto], outputs: list[str], inits: list[TensorProto]
) -> onnx.ModelProto:
    """A checked fp32 model with input x[1, WIDTH] and the given outputs, IR 10 for ORT."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, None]) for o in outputs]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def chain() -> onnx.ModelProto:
    """x → Relu → Mul → Add → Tanh."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Mul", ["a", "k"], ["b"], name="mul"),
            helper.make_node("Add", ["b", "c"], ["d"], name="add"),
            helper.make_node("Tanh", ["d"], ["y"], name="tanh"),
        ],
        ["y"],
        [_const("k", (1, WIDTH)), _const("c", (1, WIDTH))],
    )


def residual() -> onnx.ModelProto:
    """A residual block: the skip from ``a`` crosses every cut inside the block."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="stem"),
            helper.make_node("MatMul", ["a", "w1"], ["b"], name="fc1"),
            helper.make_node("Relu", ["b"], ["c"], name="act1"),
            helper.make_node("MatMul", ["c", "w2"], ["d"], name="fc2"),
            helper.make_node("Add", ["d", "a"], ["e"], name="skip"),
            helper.make_node("Relu", ["e"], ["y"], name="out"),
        ],
        ["y"],
        [_const("w1", (WIDTH, WIDTH)), _const("w2", (WIDTH, WIDTH))],
    )


def inception() -> onnx.ModelProto:
    """An inception-style block: three parallel branches concatenated."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["s"], name="stem"),
            helper.make_node("MatMul", ["s", "w1"], ["b1"], name="br1"),
            helper.make_node("MatMul", ["s", "w2"], ["b2a"], name="br2_fc"),
            helper.make_node("Sigmoid", ["b2a"], ["b2"], name="br2_act"),
            helper.make_node("Tanh", ["s"], ["b3"], name="br3"),
            helper.make_node("Concat", ["b1", "b2", "b3"], ["cat"], name="concat", axis=1),
            helper.make_node("MatMul", ["cat", "w3"], ["y"], name="head"),
        ],
        ["y"],
        [_const("w1", (WIDTH, WIDTH)), _const("w2", (WIDTH, 2)), _const("w3", (3 * WIDTH - 2, 3))],
    )


def two_outputs() -> onnx.ModelProto:
    """Output ``early`` is produced first and consumed later; ``late`` also needs raw ``x``."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["early"], name="relu"),
            helper.make_node("Mul", ["early", "k"], ["m"], name="mul"),
            helper.make_node("Sigmoid", ["m"], ["s"], name="sig"),
            helper.make_node("Add", ["s", "x"], ["late"], name="add"),
        ],
        ["late", "early"],
        [_const("k", (1, WIDTH))],
    )


MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], int]] = {
    # name: (builder, number of down-closed node sets)
    "chain": (chain, 5),
    "residual": (residual, 7),
    "inception": (inception, 15),
    "two_outputs": (two_outputs, 5),
}


def _save(model: onnx.ModelProto, tmp_path: Path) -> Path:
    """Save ``model`` as tmp_path/model.onnx."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def _preds(model: onnx.ModelProto) -> dict[str, set[str]]:
    """Direct predecessor node names of every node."""
    producer = {o: n.name for n in model.graph.node for o in n.output}
    return {n.name: {producer[i] for i in n.input if i in producer} for n in model.graph.node}


def down_closed_sets(model: onnx.ModelProto) -> list[set[str]]:
    """Every node set closed under predecessors (brute force)."""
    preds = _preds(model)
    names = list(preds)
    sets = []
    for mask in itertools.product([False, True], repeat=len(names)):
        chosen = {n for n, keep in zip(names, mask, strict=True) if keep}
        if all(preds[n] <= chosen for n in chosen):
            sets.append(chosen)
    return sets


def _feeds(count: int = 3) -> list[dict[str, np.ndarray]]:
    """Sample inputs with both signs so Relu matters."""
    return [{"x": RNG.standard_normal((1, WIDTH)).astype(np.float32)} for _ in range(count)]


@pytest.mark.parametrize("name", list(MODELS))
def test_every_valid_cut_reproduces_the_model(name: str, tmp_path: Path) -> None:
    builder, expected = MODELS[name]
    model = builder()
    path = _save(model, tmp_path)
    cuts = down_closed_sets(model)
    assert len(cuts) == expected
    feeds = _feeds()
    for i, edge in enumerate(cuts):
        split = split_model(path, edge, tmp_path / f"cut{i}")
        diff = verify_split(path, split, feeds)
        assert diff <= 1e-5, (sorted(edge), diff)


def test_residual_cut_inside_block_crosses_two_tensors(tmp_path: Path) -> None:
    path = _save(residual(), tmp_path)
    split = split_model(path, {"stem", "fc1"}, tmp_path / "out")
    assert split.cut_tensors == ("b", "a")
    assert split.tail_inputs == split.cut_tensors
    assert split.head_outputs == ("b", "a")
    assert split.head_inputs == ("x",)
    assert split.tail_outputs == ("y",)


def test_inception_cut_across_branches(tmp_path: Path) -> None:
    path = _save(inception(), tmp_path)
    split = split_model(path, {"stem", "br1", "br2_fc"}, tmp_path / "out")
    assert set(split.cut_tensors) == {"b1", "b2a", "s"}
    assert verify_split(path, split, _feeds()) <= 1e-5


def test_early_output_stays_on_head_and_feeds_tail(tmp_path: Path) -> None:
    path = _save(two_outputs(), tmp_path)
    split = split_model(path, {"relu"}, tmp_path / "out")
    assert split.cut_tensors == ("early", "x")  # raw input x is sent too
    assert split.head_outputs == ("early",)
    assert split.tail_outputs == ("late",)
    assert split.outputs == ("late", "early")
    tail = onnx.load(split.tail)
    assert [i.name for i in tail.graph.input] == ["early", "x"]


def test_all_edge_has_no_tail(tmp_path: Path) -> None:
    model = two_outputs()
    path = _save(model, tmp_path)
    split = split_model(path, {n.name for n in model.graph.node}, tmp_path / "out")
    assert split.tail is None and split.head is not None
    assert split.cut_tensors == ()
    assert set(split.head_outputs) == {"late", "early"}
    assert verify_split(path, split, _feeds()) <= 1e-5


def test_all_cloud_has_no_head(tmp_path: Path) -> None:
    path = _save(residual(), tmp_path)
    split = split_model(path, set(), tmp_path / "out")
    assert split.head is None and split.tail is not None
    assert split.cut_tensors == ("x",)
    assert split.head_outputs == ()
    assert verify_split(path, split, _feeds()) <= 1e-5


def test_not_down_closed_is_refused_naming_the_node(tmp_path: Path) -> None:
    path = _save(residual(), tmp_path)
    with pytest.raises(UsageError, match="'fc1'.*'stem'"):
        split_model(path, {"fc1", "act1"}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_skip_producer_missing_is_refused(tmp_path: Path) -> None:
    path = _save(residual(), tmp_path)
    with pytest.raises(UsageError, match="'skip'"):
        split_model(path, {"stem", "skip"}, tmp_path / "out")


def test_unknown_node_is_refused(tmp_path: Path) -> None:
    path = _save(chain(), tmp_path)
    with pytest.raises(UsageError, match="'nope'"):
        split_model(path, {"relu", "nope"}, tmp_path / "out")


def test_resplit_leaves_no_stale_half_or_temp(tmp_path: Path) -> None:
    model = chain()
    path = _save(model, tmp_path)
    out = tmp_path / "out"
    split_model(path, {"relu"}, out)
    split = split_model(path, {n.name for n in model.graph.node}, out)
    assert split.tail is None
    assert sorted(p.name for p in out.iterdir()) == ["head.onnx"]


def test_split_yaml_round_trip(tmp_path: Path) -> None:
    path = _save(residual(), tmp_path)
    out = tmp_path / "out"
    split = split_model(path, {"stem", "fc1"}, out)
    table = [
        {"min_mbps": 0.1, "max_mbps": 10.0, "kind": "split", "cut": ["a", "b"],
         "predicted_ms": 3.5},
        {"min_mbps": 17.8, "max_mbps": 10000.0, "kind": "all-cloud", "cut": [],
         "predicted_ms": np.float64(1.25)},
    ]
    predicted = {"edge_ms": 1.0, "transfer_ms": np.float32(0.5), "cloud_ms": 2.0}
    written = write_split_yaml(out, split, predicted=predicted, bandwidth_table=table)
    assert written == out / "split.yaml"
    plan = read_split_yaml(out)
    assert plan.split == split
    assert plan.cut == [
        {"name": "b", "shape": [1, WIDTH], "dtype": "float32", "bytes": 4 * WIDTH},
        {"name": "a", "shape": [1, WIDTH], "dtype": "float32", "bytes": 4 * WIDTH},
    ]
    assert plan.predicted == {"edge_ms": 1.0, "transfer_ms": 0.5, "cloud_ms": 2.0}
    assert plan.bandwidth_table[1]["predicted_ms"] == 1.25
    assert verify_split(path, plan.split, _feeds()) <= 1e-5


def test_split_yaml_requires_predicted_keys(tmp_path: Path) -> None:
    path = _save(chain(), tmp_path)
    split = split_model(path, {"relu"}, tmp_path / "out")
    with pytest.raises(UsageError, match="cloud_ms"):
        write_split_yaml(
            tmp_path / "out", split, predicted={"edge_ms": 1, "transfer_ms": 1}, bandwidth_table=[]
        )


def test_split_models_is_frozen(tmp_path: Path) -> None:
    path = _save(chain(), tmp_path)
    split = split_model(path, {"relu"}, tmp_path / "out")
    assert isinstance(split, SplitModels)
    with pytest.raises(AttributeError):
        split.head = None  # type: ignore[misc]


@pytest.mark.parametrize("change", [
    lambda d: d["inputs"].append({}),
    lambda d: d["bandwidth_table"][0].update(min_mbps="fast"),
    lambda d: d["predicted"].update(energy={"idle_w": "x"}),
    lambda d: d["predicted"].update(rtt_ms=-1),
])
def test_a_split_yaml_with_a_bad_part_is_a_one_line_usage_error(tmp_path: Path,
                                                                change: object) -> None:
    """Every part the client and the report read is validated when split.yaml is read."""
    import yaml

    path = _save(residual(), tmp_path)
    out = tmp_path / "out"
    split = split_model(path, {"stem", "fc1"}, out)
    write_split_yaml(out, split, predicted={"edge_ms": 1.0, "transfer_ms": 0.5, "cloud_ms": 2.0},
                     bandwidth_table=[{"min_mbps": 0.1, "max_mbps": 10.0, "kind": "split"}],
                     inputs=[{"name": "x", "shape": [1, WIDTH], "dtype": "float32"}])
    doc = yaml.safe_load((out / "split.yaml").read_text())
    change(doc)  # type: ignore[operator]
    (out / "split.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UsageError, match="not a valid split.yaml"):
        read_split_yaml(out)
