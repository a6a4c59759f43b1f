"""Embeddings and wide multi-label logits get kinds of their own (issue 41 item 4).

Before, both were judged as plain values (cosine and RMS error over the spread across
samples): clustered embeddings whose nearest neighbours swap, and tag logits that lose their
rare positives, passed. A trained embedder (pooled 32-vector) and a trained tagger (64 raw
logits) are told apart by what they output (tests/support/embed_models.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edge.core.errors import UsageError
from edge.core.values import Dataset, Fidelity
from edge.core.verify import Thresholds, judge, measure, parse_metrics
from tests.support.cli import run_cli
from tests.support.embed_models import embedder, tagger

VALUES = Thresholds(metrics=(("*", "values"),))


def _fid(ref: list[np.ndarray], got: list[np.ndarray], name: str,
         limits: Thresholds | None = None) -> Fidelity:
    data = Dataset(feeds=({},) * len(ref))
    return measure([[r] for r in ref], [[g] for g in got], data, limits, [name])


def _clusters(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """20 tight clusters of 5 unit vectors (near-duplicates); the candidate moves each vector
    within its cluster (cosine ~0.996, RMS error ~8% of the spread across samples)."""
    centres = rng.normal(size=(20, 1, 64))
    ref = [c + 0.15 * rng.normal(size=c.shape) for c in centres for _ in range(5)]
    ref = [r / np.linalg.norm(r) for r in ref]
    got = [r + 0.08 * rng.normal(size=r.shape) / np.sqrt(64) for r in ref]
    return ref, got


def test_clustered_embeddings_whose_neighbours_swap_fail_though_their_values_pass() -> None:
    ref, got = _clusters(np.random.default_rng(0))
    as_values = _fid(ref, got, "y", VALUES)
    assert judge(as_values, VALUES) is None  # cosine and RMS error see nothing wrong
    fid = _fid(ref, got, "y")
    (out,) = fid.outputs
    assert out.kind == "embedding" and "length 1" in out.why
    assert out.cosine is not None and out.cosine > 0.99
    failure = judge(fid, Thresholds())
    assert failure is not None and "nearest neighbour changes on" in failure
    assert out.numbers["neighbours_kept"] < 0.9
    assert judge(_fid(ref, ref, "y"), Thresholds()) is None


def test_an_embedding_keeps_what_fp32_cannot_tell_apart() -> None:
    # a rounding-sized change (1e-7) that swaps exact ties is no change
    ref, _ = _clusters(np.random.default_rng(1))
    ref = ref + [r.copy() for r in ref[:10]]  # duplicates: their nearest is a tie
    got = [r + 1e-7 * np.random.default_rng(2).normal(size=r.shape) for r in ref]
    (out,) = _fid(ref, got, "embedding").outputs
    assert out.drop == 0.0 and out.numbers["self_retrieval"] == 1.0


def test_pair_decisions_use_the_threshold_asked_for() -> None:
    ref, got = _clusters(np.random.default_rng(3))
    limits = Thresholds(metrics=parse_metrics(["y=embedding:threshold=0.5"])[0])
    (out,) = _fid(ref, got, "y", limits).outputs
    assert out.numbers["pair_threshold"] == 0.5 and "(threshold=)" in out.detail
    assert "(fp32's similar/dissimilar split)" in _fid(ref, got, "y").outputs[0].detail


def test_many_samples_are_compared_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # similarity matrices grow with the square of the samples: a large --eval is cut, and says so
    from edge.core.verify import embed

    monkeypatch.setattr(embed, "MAX_SAMPLES", 20)
    ref, got = _clusters(np.random.default_rng(7))
    (out,) = _fid(ref, got, "y").outputs
    assert "changes on" in out.detail and "of 20 samples (the first 20 of 100)" in out.detail
    assert "of 190 pair decisions" in out.detail


def test_two_samples_have_no_neighbours_and_fall_back_to_values() -> None:
    ref, got = _clusters(np.random.default_rng(4))
    (out,) = _fid(ref[:2], got[:2], "y").outputs
    assert out.kind == "embedding" and out.drop is None and "no neighbours" in out.detail


def _tag_logits(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """1000 tag logits per sample, ~-6 for absent tags, 1-3 present near +1; the candidate
    lowers the present ones by 1.5 (below 0: the tag is lost), everything else untouched."""
    ref, got = [], []
    for _ in range(40):
        row = rng.normal(-6.0, 1.0, size=(1, 1000))
        tags = rng.choice(1000, size=int(rng.integers(1, 4)), replace=False)
        row[0, tags] = rng.uniform(0.5, 1.4, size=tags.size)
        lowered = row.copy()
        lowered[0, tags] -= 1.5
        ref.append(row)
        got.append(lowered)
    return ref, got


def test_multilabel_logits_that_lose_their_tags_fail_though_their_values_pass() -> None:
    ref, got = _tag_logits(np.random.default_rng(5))
    assert judge(_fid(ref, got, "y", VALUES), VALUES) is None
    fid = _fid(ref, got, "y")
    (out,) = fid.outputs
    assert out.kind == "multilabel" and "multi-label" in out.why
    failure = judge(fid, Thresholds())
    assert failure is not None and "positive decisions' F1 0.000" in failure
    # the top tag is still the top tag: asked for only that, it would pass
    assert out.numbers["top_k_kept"] == 1.0


def test_multilabel_takes_a_threshold_and_k() -> None:
    ref, got = _tag_logits(np.random.default_rng(6))
    limits = Thresholds(metrics=parse_metrics(["y=multilabel:threshold=0.01,k=3"])[0])
    (out,) = _fid(ref, got, "y", limits).outputs
    assert out.numbers["k"] == 3.0 and "sigmoid 0.01" in out.detail
    assert out.numbers["positives_f1"] == 1.0  # at 0.01 (logit -4.6) every tag stays
    with pytest.raises(UsageError, match="not a probability"):
        bad = Thresholds(metrics=parse_metrics(["y=multilabel:threshold=2"])[0])
        _fid(ref, got, "y", bad)


# ---------------------------------------------------------------- trained models


@dataclass(frozen=True)
class Trained:
    path: Path
    inputs: np.ndarray


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Trained]]:
    folder = tmp_path_factory.mktemp("embed")
    yield {"embedder": Trained(folder / "embedder.onnx", embedder(folder / "embedder.onnx", 160)),
           "tagger": Trained(folder / "tagger.onnx", tagger(folder / "tagger.onnx", 160))}


def _optimize(model: Trained, tmp_path: Path) -> dict:
    np.save(tmp_path / "calib.npy", model.inputs)
    (tmp_path / "ort.yaml").write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    result = run_cli("optimize", str(model.path), "--profile", str(tmp_path / "ort.yaml"),
                     "--calib", str(tmp_path / "calib.npy"), "-o", str(tmp_path / "out"),
                     "--json")
    assert result.status == 0, result.stderr
    return result.json()


def _judged(bundle: dict) -> dict[str, dict]:
    return {f"{c['candidate']['target']}-{c['candidate']['precision']}": c["fidelity"]["outputs"][0]
            for c in bundle["candidates"] if c.get("fidelity")}


@pytest.mark.parametrize(("name", "kind", "evidence"), [
    ("embedder", "embedding", "pooled by GlobalAveragePool"),
    ("tagger", "multilabel", "64 label logits")])
def test_trained_models_are_judged_by_their_kinds(trained: dict[str, Trained], name: str,
                                                  kind: str, evidence: str,
                                                  tmp_path: Path) -> None:
    judged = _judged(_optimize(trained[name], tmp_path))
    assert judged and all(o["kind"] == kind for o in judged.values()), judged
    assert all(evidence in o["why"] for o in judged.values())


def test_the_embedders_neighbours_are_counted_as_an_independent_count_finds(
        trained: dict[str, Trained], tmp_path: Path) -> None:
    bundle = _optimize(trained["embedder"], tmp_path)
    int8 = next(c for c in bundle["candidates"]
                if c["candidate"]["precision"] == "int8" and c.get("artifact"))
    held = _held_out(trained["embedder"].inputs, bundle)
    ref = _run(trained["embedder"].path, held)
    got = _run(tmp_path / "out" / int8["artifact"]["file"], held)
    reported = int8["fidelity"]["outputs"][0]["numbers"]["neighbours_kept"]
    assert reported == pytest.approx(1.0 - _moved(ref, got) / len(ref))


def _held_out(inputs: np.ndarray, bundle: dict) -> np.ndarray:
    """The samples edge verified on: the calibration file's held-out split, by count."""
    count = int(bundle["candidates"][0]["fidelity"]["samples"])
    return inputs[len(inputs) - count:]


def _run(path: Path, inputs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[None]})[0] for x in inputs])


def _moved(ref: np.ndarray, got: np.ndarray) -> int:
    """Samples whose nearest other sample (cosine) under the candidate is not fp32's, unless
    fp32 finds it as near (within 1% of the spread of its pair similarities)."""
    a = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    b = got / np.linalg.norm(got, axis=1, keepdims=True)
    fp32, cand = a @ a.T, b @ b.T
    tie = 0.01 * np.std(fp32[np.triu_indices(len(a), 1)])
    moved = 0
    for i in range(len(a)):
        others = [j for j in range(len(a)) if j != i]
        mine = max(others, key=lambda j: fp32[i, j])
        theirs = max(others, key=lambda j: cand[i, j])
        moved += bool(fp32[i, theirs] < fp32[i, mine] - tie)
    return moved
