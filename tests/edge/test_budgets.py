"""Budgets drive the choice: within --size-budget / --latency-budget, the candidate that loses
the least fidelity; the share of the allowed loss each candidate used; the Pareto table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.profile import load_profile
from edge.core.select import dominated_by, least_loss
from edge.core.values import Candidate, CandidateResult, Dataset, Fidelity, OutputFidelity
from edge.core.verify import Thresholds, measure
from edge.core.verify.allowance import allowance_used

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
DIGITS = SAMPLES / "digits.onnx"


def _out(**kw: object) -> OutputFidelity:
    return OutputFidelity(name=str(kw.pop("name", "y")), kind=str(kw.pop("kind", "values")),
                          why="test", passed=True, reason="", **kw)  # type: ignore[arg-type]


def _fid(*outs: OutputFidelity, cosine: float = 1.0) -> Fidelity:
    return Fidelity(samples=10, cosine=cosine, max_abs=0.0, outputs=outs)


def test_the_share_of_the_allowance_is_the_worst_outputs() -> None:
    used = allowance_used(_fid(_out(kind="classes", drop=0.5),
                               _out(cosine=0.995, rel_rms=0.02)), 1.0, 0.98, 0.1)
    assert used == pytest.approx(0.5)  # the drop; the values output used 25% / 20%
    assert allowance_used(_fid(_out(cosine=0.97, rel_rms=0.01)), 1.0, 0.98, 0.1) > 1
    assert allowance_used(_fid(_out(kind="classes", accuracy=0.95, reference_accuracy=0.9)),
                          1.0, 0.98, 0.1) == 0.0  # a gain spends nothing
    assert allowance_used(_fid(_out(kind="classes", drop=float("nan"))), 1.0, 0.98, 0.1) \
        == math.inf  # NaN never looks faithful
    assert allowance_used(_fid(_out(error="NaN in output")), 1.0, 0.98, 0.1) == math.inf
    assert allowance_used(_fid(_out(kind="classes", drop=0.0)), 0.0, 0.98, 0.1) == 0.0


def test_measure_records_it_and_none_for_a_broken_output() -> None:
    rng = np.random.default_rng(0)
    ref = [[rng.normal(size=(1, 16)).astype(np.float32)] for _ in range(20)]
    near = [[r[0] + 0.01 * rng.normal(size=(1, 16)).astype(np.float32)] for r in ref]
    data = Dataset(feeds=tuple({"x": r[0]} for r in ref))
    fid = measure(ref, near, data, Thresholds(), ["y"])
    assert fid.allowance_used is not None and 0 < fid.allowance_used < 0.5
    broken = [[np.full((1, 16), np.nan, np.float32)] for _ in ref]
    assert measure(ref, broken, data, Thresholds(), ["y"]).allowance_used is None


def _result(cid: str, used: float | None, status: str = "passed") -> CandidateResult:
    target, precision = cid.split("-", 1)
    return CandidateResult(candidate=Candidate(target=target, precision=precision),
                           status=status, reason="",
                           fidelity=Fidelity(samples=10, cosine=1.0, max_abs=0.0,
                                             allowance_used=used))


def test_least_loss_keeps_the_most_faithful_within_the_band() -> None:
    results = [_result("onnxruntime-int8", 0.6), _result("onnxruntime-fp32", 0.0),
               _result("openvino-fp32", 0.05), _result("tflite-int8", None),
               _result("tflite-fp32", 0.0, status="rejected")]
    kept, note = least_loss(results)
    assert [r.candidate.id for r in kept] == ["onnxruntime-fp32", "openvino-fp32",
                                              "tflite-fp32"]  # rejected ones stay as they are
    assert "4 faithful candidate(s)" in note and "0% of the allowance (2 within" in note


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The digits sample on this host (onnxruntime only), measured: no budget, a size budget
    only int8 fits, a size budget everything fits."""
    from edge.flows.optimize import OptimizeOptions, optimize

    profile = tmp_path_factory.mktemp("p") / "ort.yaml"
    profile.write_text("extends: x86-64\nid: ort\nruntimes: [onnxruntime]\n")
    out: dict[str, Any] = {}
    budgeted = profile.with_name("budgeted.yaml")  # the profile's own budget, no flag
    budgeted.write_text("extends: ort.yaml\nid: ort-small\nbudgets: {size_mb: 0.05}\n")
    for name, budget, prof in (("none", None, profile), ("tight", 0.05, profile),
                               ("loose", 100.0, profile), ("profiled", None, budgeted),
                               ("nothing", 0.001, profile),
                               ("flag-wins", 100.0, budgeted)):
        options = OptimizeOptions(calib=SAMPLES / "digits_calib.npy",
                                  eval=SAMPLES / "digits_eval.npz", size_budget_mb=budget,
                                  limits=Thresholds(max_drop=1.0))
        path = tmp_path_factory.mktemp(name) / "b"
        out[name] = optimize(DIGITS, load_profile(prof), path, options)
        out[f"{name}-dir"] = path
    return out


def test_a_size_budget_rejects_what_does_not_fit_and_chooses_the_least_loss(
        bundles: dict[str, Any]) -> None:
    tight = {r.candidate.id: r for r in bundles["tight"].candidates}
    for cid in ("original", "onnxruntime-fp32"):  # 93 KB on disk: over 0.05 MB
        assert tight[cid].status == "rejected"
        assert "MB on disk, over --size-budget 0.05 MB" in tight[cid].reason
    chosen = tight[bundles["tight"].chosen]
    assert chosen.candidate.precision.startswith("int8")
    assert chosen.artifact is not None and chosen.artifact.total_bytes <= 50_000
    loose = bundles["loose"]
    assert loose.chosen == "original"  # everything fits: the user's file loses nothing
    assert "the least fidelity loss within it is 0% of the allowance" in loose.reason
    raw = json.loads((bundles["loose-dir"] / "manifest.json").read_text())
    original = next(c for c in raw["candidates"] if c["candidate"]["target"] == "original")
    assert original["fidelity"]["allowance_used"] == 0.0  # a 0 is written, not omitted
    assert "least fidelity loss" not in bundles["none"].reason
    nothing = bundles["nothing"]  # every faithful candidate over 0.001 MB: none chosen, said so
    assert nothing.chosen is None
    assert "kept fidelity but none is within the budget" in nothing.reason


def test_the_profiles_budget_applies_unless_a_flag_says_otherwise(
        bundles: dict[str, Any], tmp_path: Path) -> None:
    from edge.core.errors import UsageError

    profiled = {r.candidate.id: r for r in bundles["profiled"].candidates}
    assert profiled["original"].status == "rejected"
    assert "over the profile's size budget 0.05 MB" in profiled["original"].reason
    assert bundles["profiled"].chosen == bundles["tight"].chosen
    assert bundles["flag-wins"].chosen == "original"
    bad = tmp_path / "bad.yaml"
    for text in ("latency_ms: -1", "size_mb: .nan", "size_mb: 0", "disk: 3", "latency_ms: yes"):
        bad.write_text(f"extends: x86-64\nid: bad\nbudgets: {{{text}}}\n")
        with pytest.raises(UsageError, match="budgets"):
            load_profile(bad)


def test_the_report_has_a_pareto_table(bundles: dict[str, Any]) -> None:
    from edge.flows.report import render_report

    html = render_report(bundles["none-dir"], layers=False)
    assert "Latency x fidelity x size" in html and "Pareto-optimal" in html
    used = [r.fidelity.allowance_used for r in bundles["none"].candidates
            if r.fidelity is not None and r.status in ("passed", "chosen")]
    assert used and all(u is not None and 0 <= u <= 1 for u in used)


def test_pareto_dominance_needs_a_real_gain_and_treats_latency_within_the_tie_as_equal() -> None:
    points = {"a": (1.00, 0.0, 100), "b": (1.05, 0.0, 100), "c": (2.0, 0.5, 200),
              "d": (1.0, 0.0, 50)}
    assert dominated_by("c", points) == "dominated by a"  # slower, lossier and bigger
    assert dominated_by("a", points) == "dominated by d"  # as fast and faithful, smaller
    assert dominated_by("d", points) == ""
    assert dominated_by("b", {"a": points["a"], "b": points["b"]}) == ""  # 5%: a tie
    assert dominated_by("a", {"a": points["a"], "b": points["b"]}) == ""
