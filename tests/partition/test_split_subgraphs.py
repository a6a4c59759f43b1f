"""A node with subgraphs (If/Loop) depends on every outer value its branches read: every cut
the solver may pick keeps them before it, and both halves load and reproduce the model."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge.core.errors import UsageError
from partition.scopes import node_inputs
from partition.split import split_model, verify_split
from tests.support.cli import run_cli
from tests.support.subgraphs import if_reads_outer, loop_reads_outer, save

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    **{f"if-{kind}": (lambda kind=kind: if_reads_outer(kind))
       for kind in ("two", "input", "weight", "nested", "only-outer")},
    "loop": loop_reads_outer,
}


def _closed_sets(model: onnx.ModelProto) -> list[set[str]]:
    """Every node set closed under predecessors, outer-scope reads counted."""
    producer = {o: n.name for n in model.graph.node for o in n.output}
    preds = {n.name: {producer[i] for i in node_inputs(n) if i in producer}
             for n in model.graph.node}
    names = list(preds)
    sets = []
    for mask in itertools.product([False, True], repeat=len(names)):
        chosen = {n for n, keep in zip(names, mask, strict=True) if keep}
        if all(preds[n] <= chosen for n in chosen):
            sets.append(chosen)
    return sets


def _feeds() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 4)).astype(np.float32) * sign} for sign in (1, -1)]


@pytest.mark.parametrize("name", list(MODELS))
def test_every_cut_of_a_model_whose_subgraphs_read_outer_values_verifies(
        name: str, tmp_path: Path) -> None:
    model = MODELS[name]()
    path = save(model, tmp_path / "m.onnx")
    for i, edge in enumerate(_closed_sets(model)):
        split = split_model(path, edge, tmp_path / f"cut{i}")  # ONNX Runtime loads each half:
        assert verify_split(path, split, _feeds()) <= 1e-5, sorted(edge)


def test_an_edge_set_without_what_a_branch_reads_is_refused(tmp_path: Path) -> None:
    path = save(if_reads_outer(), tmp_path / "m.onnx")
    with pytest.raises(UsageError, match="'if' needs 'b' from cloud node 'sig'"):
        split_model(path, {"relu", "sum", "gt", "if"}, tmp_path / "out")


@pytest.mark.parametrize("bandwidth", ["0.1", "10000"])
def test_partition_of_an_if_reading_outer_values_exits_0(tmp_path: Path, bandwidth: str) -> None:
    path = save(if_reads_outer(), tmp_path / "m.onnx")
    done = run_cli("partition", str(path), "--profile", "rpi4", "--cloud", "cloud-c7i",
                   "--bandwidth", bandwidth, "-o", str(tmp_path / "split"))
    assert done.status == 0, done.stderr
    assert (tmp_path / "split" / "split.yaml").is_file()
