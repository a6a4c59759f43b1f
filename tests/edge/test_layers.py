"""Per-layer time on onnxruntime, OpenVINO and LiteRT: real layer names mapped to their ops,
times that add up to the whole model, the method.

Only what cannot flake on a shared machine is asserted here. Which layer is the slowest, its
share, and how host and device agree are timings, measured by ``bench/layers.py``: on a loaded
2-core host a tiny convolution once measured slower than the layer with 100x its work (issue 26)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edge.core.errors import UsageError
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets import get_target
from targets.layers import LayerProfile, measure_layers
from targets.tflite import layers
from tests.support.heavy import HEAVY
from tests.support.heavy import wide_fc_model as _heavy_onnx


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    return inspect_model(_heavy_onnx(tmp_path_factory.mktemp("heavy") / "heavy.onnx"))


@pytest.fixture(scope="module")
def calib() -> Dataset:
    x = np.random.default_rng(1).standard_normal((16, 1, 1, 16, 16)).astype(np.float32)
    return Dataset(feeds=tuple({"input": sample} for sample in x))


@pytest.fixture(scope="module")
def openvino_ir(heavy: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, _ = get_target("openvino").convert(heavy, "fp32", calib=Dataset(feeds=()),
                                             workdir=tmp_path_factory.mktemp("ov"))
    return path


@pytest.fixture(scope="module")
def tflite_files(heavy: ModelInfo, calib: Dataset,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fp32 and int8 (float I/O) .tflite files of the heavy model, from one onnx2tf run."""
    target, workdir = get_target("tflite"), tmp_path_factory.mktemp("tflite")
    return {p: target.convert(heavy, p, calib=calib, workdir=workdir)[0]
            for p in ("fp32", "int8")}


def check_profile(profile: LayerProfile, names: set[str]) -> None:
    """Layers are named as in the artifact, times are >= 0, slowest first and add up."""
    assert profile.layers and {layer.name for layer in profile.layers} <= names
    times = [layer.ms for layer in profile.layers]
    assert min(times) >= 0 and times == sorted(times, reverse=True)
    assert profile.total_ms > 0 and math.isclose(sum(times), profile.total_ms, rel_tol=1e-6)
    assert "1 thread" in profile.method and profile.runtime.endswith(" CPU")


# ---------------------------------------------------------------- onnxruntime
def test_onnx_layers_are_the_graph_nodes(heavy: ModelInfo) -> None:
    profile = measure_layers(Path(heavy.path), runs=10)
    check_profile(profile, {"small_conv", "conv_relu", "flatten", HEAVY, "fc_relu", "head"})
    assert {layer.name: layer.op for layer in profile.layers}[HEAVY] == "Gemm"
    assert profile.runtime.startswith("onnxruntime ")
    assert "optimized model" in profile.method and "this host" in profile.method


# ---------------------------------------------------------------- OpenVINO
def test_openvino_layers_are_executed_nodes_of_the_compiled_model(openvino_ir: Path) -> None:
    import openvino as ov

    compiled = ov.Core().compile_model(str(openvino_ir), "CPU", {"INFERENCE_NUM_THREADS": 1})
    executed = {op.get_friendly_name() for op in compiled.get_runtime_model().get_ops()}
    profile = measure_layers(openvino_ir, runs=10)
    check_profile(profile, executed)
    assert profile.runtime.startswith("OpenVINO ") and "PERF_COUNT" in profile.method
    assert all(layer.detail for layer in profile.layers)  # the CPU kernel that ran it
    assert "interleaved rounds" in profile.method


def test_openvino_ir_without_its_weights_is_refused(openvino_ir: Path, tmp_path: Path) -> None:
    lone = tmp_path / "model.xml"
    lone.write_bytes(openvino_ir.read_bytes())
    with pytest.raises(UsageError, match=r"model\.bin is missing"):
        measure_layers(lone)


# ---------------------------------------------------------------- LiteRT
def _operators(path: Path) -> list[tuple[str, str, list[int]]]:
    """(builtin name, first output's name, first output's shape) of every operator."""
    from ai_edge_litert.tools import flatbuffer_utils as fb

    model = fb.read_model(str(path))
    graph = model.subgraphs[0]
    out = []
    for op in graph.operators:
        tensor = graph.tensors[op.outputs[0]]
        out.append((fb.opcode_to_name(model, op.opcodeIndex), tensor.name.decode(),
                    list(tensor.shape)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_tflite_layers_are_the_operators(tflite_files: dict[str, Path], precision: str) -> None:
    path = tflite_files[precision]
    operators = _operators(path)
    profile = measure_layers(path, runs=30)
    check_profile(profile, {name for _, name, _ in operators})
    assert len(profile.layers) == len(operators)  # one layer per operator, none grouped
    by_index = {int(layer.detail.removeprefix("op ")): layer for layer in profile.layers}
    assert [(by_index[i].op, by_index[i].name) for i in range(len(operators))] == [
        (op, name) for op, name, _ in operators]
    assert profile.runtime.startswith("LiteRT ") and "derived from prefix timings" in \
        profile.method
    assert "interleaved rounds" in profile.method
    heavy_outputs = [name for op, name, shape in operators
                     if op == "FULLY_CONNECTED" and shape[-1] == 2048]
    assert [layer.name for layer in profile.layers if layer.op == "FULLY_CONNECTED"
            and layer.name in heavy_outputs] == heavy_outputs


@pytest.mark.slow
def test_tflite_groups_consecutive_operators_past_the_limit(
        tflite_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    operators = _operators(tflite_files["int8"])
    monkeypatch.setattr(layers, "MAX_PREFIXES", 3)
    profile = measure_layers(tflite_files["int8"], runs=5)
    assert len(operators) > 3 and len(profile.layers) == 3
    spans = sorted(tuple(int(i) for i in layer.detail.removeprefix("ops ").split("-"))
                   for layer in profile.layers)
    assert spans[0][0] == 0 and spans[-1][1] == len(operators) - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:], strict=False))
    assert "group" in profile.method
    assert math.isclose(sum(layer.ms for layer in profile.layers), profile.total_ms,
                        rel_tol=1e-6)


def test_a_tflite_model_too_large_for_the_prefix_budget_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.tflite"
    big.write_bytes(b"\0" * 4096)
    monkeypatch.setattr(layers, "PREFIX_BUDGET_BYTES", 4096 * (layers.MIN_PREFIXES - 1))
    with pytest.raises(UsageError, match="too large to time by prefixes"):
        layers._prefix_limit(big)


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize(("name", "kwargs", "match"), [
    ("model.pb", {}, r"no per-layer timing for '\.pb' files; choose one of \.onnx, \.xml"),
    ("missing.onnx", {}, "no such file"),
    ("model.onnx", {"runs": 0}, "must be at least 1"),
])
def test_what_cannot_be_measured_is_a_usage_error(tmp_path: Path, name: str, kwargs: dict,
                                                  match: str) -> None:
    if name != "missing.onnx":
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(UsageError, match=match):
        measure_layers(tmp_path / name, **kwargs)
