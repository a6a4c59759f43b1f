"""Accuracy recovery: a trained digits CNN whose hidden layer gets one outlier channel after
training (x1000, compensated in the next layer: fp32 is unchanged) breaks per-tensor int8
activations; keeping the two layers around that tensor float restores it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import Candidate, Dataset, ModelInfo
from edge.core.verify import Outputs, Thresholds, judge, measure, run_all
from edge.flows.recover import Recovery, attempt_sizes, rank_sensitive_nodes, recover
from targets.base import ConvertSettings
from targets.onnxruntime import OnnxRuntimeTarget, OrtRunner
from tests.support.digits import DigitsModel
from tests.support.variants import with_outlier_channel

TARGET = OnnxRuntimeTarget()
LIMITS = Thresholds()  # 1 point of accuracy, cosine 0.98
DEFAULT = ConvertSettings()


class Case:
    """A model with its data, fp32 outputs on the held-out set, and a cache root."""

    def __init__(self, path: Path, digits: DigitsModel, root: Path) -> None:
        self.model: ModelInfo = inspect_model(path)
        self.calib: Dataset = load_dataset(digits.calib, self.model)
        self.held_out: Dataset = load_dataset(digits.eval, self.model, want_labels=True)
        self.reference: Outputs = run_all(OrtRunner(path, threads=1), self.held_out)
        self.root = root
        gemms = [n.name for n in onnx.load(str(path)).graph.node if n.op_type == "Gemm"]
        self.hidden, self.head = gemms

    def workdir_for(self, settings: ConvertSettings) -> Path:
        return self.root / f"onnxruntime-{settings.digest()}"

    def naive(self, precision: str) -> tuple[Path, str | None]:
        file, _ = TARGET.convert(self.model, precision, calib=self.calib,
                                 workdir=self.workdir_for(ConvertSettings()))
        fidelity = measure(self.reference, run_all(TARGET.load(file, self.model, threads=1),
                                                   self.held_out), self.held_out)
        return file, judge(fidelity, LIMITS)

    def recover(self, precision: str, **kwargs: object) -> Recovery | None:
        return recover(TARGET, self.model, precision, self.calib, self.held_out,
                       self.reference, kwargs.pop("limits", LIMITS),  # type: ignore[arg-type]
                       self.workdir_for, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def outlier(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Case:
    root = tmp_path_factory.mktemp("recover")
    path = with_outlier_channel(digits.onnx, root / "digits_outlier.onnx", np.load(digits.calib))
    return Case(path, digits, root / "cache")


@pytest.fixture(scope="module")
def healthy(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Case:
    return Case(digits.onnx, digits, tmp_path_factory.mktemp("recover-healthy"))


def _summary(fidelity: object) -> str:
    return (f"accuracy {100 * fidelity.accuracy:.2f}% (fp32 "  # type: ignore[attr-defined]
            f"{100 * fidelity.reference_accuracy:.2f}%), "  # type: ignore[attr-defined]
            f"cosine {fidelity.cosine:.4f}")  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the outlier model


def test_outlier_model_is_unchanged_in_fp32(outlier: Case, healthy: Case) -> None:
    for got, want in zip(outlier.reference, healthy.reference, strict=True):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-3)


def test_ranking_points_at_the_outlier_tensor(outlier: Case, healthy: Case) -> None:
    file, _ = outlier.naive("int8")
    start = time.perf_counter()
    ranking = rank_sensitive_nodes(outlier.model, outlier.calib, file)
    seconds = time.perf_counter() - start
    print(f"\nranking {seconds:.2f} s: {[(n, round(e, 3)) for n, e in ranking]}")
    # the head reads the crushed tensor, the hidden Gemm writes it (QDQ quantizes its output)
    assert [name for name, _ in ranking[:2]] == [outlier.head, outlier.hidden]
    assert min(e for _, e in ranking[:2]) > 0.5 and max(e for _, e in ranking[2:]) < 0.1
    healthy_file, _ = healthy.naive("int8")
    assert max(e for _, e in rank_sensitive_nodes(healthy.model, healthy.calib,
                                                  healthy_file)) < 0.1


def test_naive_int8_fails_and_recovery_keeps_two_nodes_float(outlier: Case) -> None:
    _, failure = outlier.naive("int8")
    assert failure is not None and "points below fp32" in failure
    start = time.perf_counter()
    got = outlier.recover("int8")
    seconds = time.perf_counter() - start
    assert got is not None
    print(f"\nnaive int8: {failure}\nrecovered in {seconds:.2f} s with "
          f"{got.kept_float} float: {_summary(got.fidelity)}")
    assert got.kept_float == (outlier.head, outlier.hidden)
    assert judge(got.fidelity, LIMITS) is None
    assert got.file.parent == outlier.workdir_for(ConvertSettings(keep_float=got.kept_float))
    assert f"kept float (keep_float): {outlier.head}, {outlier.hidden}" in got.notes
    assert got.notes[-1].startswith("accuracy recovery: kept 2 of 8 quantized node(s) float")


def test_int8_dynamic_recovery_ranks_with_an_ort_qdq_proxy(outlier: Case) -> None:
    _, failure = outlier.naive("int8-dynamic")
    assert failure is not None  # per-sample ranges are dominated by the outlier too
    got = outlier.recover("int8-dynamic")
    assert got is not None
    print(f"\nnaive int8-dynamic: {failure}\nrecovered with {got.kept_float} float: "
          f"{_summary(got.fidelity)}")
    assert got.kept_float == (outlier.head,)  # dynamic quantizes inputs only: one node
    proxy = outlier.workdir_for(ConvertSettings()) / "ort-int8-ranking" / "model_int8_qdq.onnx"
    assert proxy.is_file()


def test_recovery_gives_up_within_its_cap(outlier: Case) -> None:
    # logits judged as values (not by accuracy) with a cosine above 1: nothing can pass
    strict = Thresholds(max_drop=1.0, min_cosine=1.0 + 1e-9, metrics=(("*", "values"),))
    assert outlier.recover("int8", limits=strict) is None
    assert outlier.recover("int8", max_fraction=0.1) is None  # 1 node is not enough


def test_a_target_that_ignores_keep_float_is_not_retried(outlier: Case, tmp_path: Path) -> None:
    calls: list[ConvertSettings] = []

    class Deaf(OnnxRuntimeTarget):
        def convert(self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
                    settings: ConvertSettings = DEFAULT) -> tuple[Path, tuple[str, ...]]:
            calls.append(settings)
            return super().convert(model, precision, calib=calib, workdir=workdir,
                                   settings=DEFAULT)

    got = recover(Deaf(), outlier.model, "int8", outlier.calib, outlier.held_out,
                  outlier.reference, LIMITS, lambda s: tmp_path / s.digest())
    assert got is None and len(calls) == 2  # the naive artifact, then one attempt


def test_attempt_sizes() -> None:
    assert attempt_sizes(0) == []
    assert attempt_sizes(1) == [1]
    assert attempt_sizes(2) == [1, 2]
    assert attempt_sizes(5) == [1, 2, 4, 5]
    assert attempt_sizes(8) == [1, 2, 4, 8]


def test_optimize_recovers_int8_and_reports_nodes_kept_float(
    outlier: Case, digits: DigitsModel, tmp_path: Path
) -> None:
    from tests.support.cli import run_cli

    profile = tmp_path / "ort-only.yaml"
    profile.write_text("extends: x86-64\nid: ort-only\nruntimes: [onnxruntime]\n")
    result = run_cli("optimize", outlier.model.path, "--profile", str(profile), "--calib",
                     str(digits.calib), "--eval", str(digits.eval), "-o",
                     str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    by_id = {Candidate(**c["candidate"]).id: c for c in result.json()["candidates"]}
    static = by_id["onnxruntime-int8"]
    assert static["status"] in ("passed", "chosen")
    assert set(static["artifact"]["kept_float"]) == {"/9/Gemm", "/11/Gemm"}
    assert "in float" in static["reason"] and "/11/Gemm" in static["reason"]
    accuracy = static["fidelity"]["accuracy"]
    assert static["fidelity"]["reference_accuracy"] - accuracy <= 0.01
