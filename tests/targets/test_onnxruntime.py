"""ONNX Runtime target: fp32, fp16, int8-dynamic (MatMul/Gemm only) and static int8 QDQ on the
trained digits CNN, plus the graph helpers (Constant weights, keep_float mapping, caching)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.onnxruntime import (
    FILES,
    OnnxRuntimeTarget,
    OrtRunner,
    constants_to_initializers,
    gemms_to_matmuls,
    map_keep_float,
)
from tests.support.digits import DigitsModel

TARGET = OnnxRuntimeTarget()


@pytest.fixture(scope="module")
def model(digits: DigitsModel) -> ModelInfo:
    return inspect_model(digits.onnx)


@pytest.fixture(scope="module")
def calib(digits: DigitsModel, model: ModelInfo) -> Dataset:
    return load_dataset(digits.calib, model)


@pytest.fixture(scope="module")
def held_out(digits: DigitsModel, model: ModelInfo) -> Dataset:
    return load_dataset(digits.eval, model, want_labels=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ort")


def _accuracy(file: Path, data: Dataset) -> float:
    runner = OrtRunner(file, threads=1)
    pred = np.array([int(np.argmax(runner.run(feed)[0])) for feed in data.feeds])
    return float(np.mean(pred == data.labels))


def _nodes(file: Path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(file)).graph.node)


def _float_weight(file: Path, name: str) -> bool:
    """Node ``name`` reads its weight from a float initializer, not a DequantizeLinear."""
    proto = onnx.load(str(file))
    inits = {i.name: i.data_type for i in proto.graph.initializer}
    node = next(n for n in proto.graph.node if n.name == name)
    return inits.get(node.input[1]) == TensorProto.FLOAT


# ---------------------------------------------------------------- precisions on digits


@pytest.mark.parametrize("precision", OnnxRuntimeTarget.caps.precisions)
def test_precision_keeps_digits_accuracy(precision: str, model: ModelInfo, calib: Dataset,
                                         held_out: Dataset, digits: DigitsModel,
                                         workdir: Path) -> None:
    start = time.perf_counter()
    file, notes = TARGET.convert(model, precision, calib=calib, workdir=workdir)
    seconds = time.perf_counter() - start
    assert file == workdir / FILES[precision] and notes
    accuracy = _accuracy(file, held_out)
    print(f"\n{precision}: {seconds:.2f} s, {file.stat().st_size} B, accuracy {accuracy:.4f} "
          f"(fp32 {digits.float_accuracy:.4f}); {notes}")
    assert digits.float_accuracy - accuracy <= 0.01


def test_fp16_is_checked_half_precision_with_float32_io(model: ModelInfo, calib: Dataset,
                                                       workdir: Path) -> None:
    file, _ = TARGET.convert(model, "fp16", calib=calib, workdir=workdir)
    proto = onnx.load(str(file))
    onnx.checker.check_model(proto)
    io = [*proto.graph.input, *proto.graph.output]
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in io)
    weights = [i for i in proto.graph.initializer if i.name.endswith("weight")]
    assert weights and all(w.data_type == TensorProto.FLOAT16 for w in weights)


def test_int8_dynamic_quantizes_only_matmul_gemm_per_channel(model: ModelInfo, calib: Dataset,
                                                             workdir: Path) -> None:
    file, notes = TARGET.convert(model, "int8-dynamic", calib=calib, workdir=workdir)
    ops = [n.op_type for n in _nodes(file)]
    assert ops.count("MatMulInteger") == 2  # both Gemm layers, rewritten as MatMul+Add
    assert "ConvInteger" not in ops and ops.count("Conv") == 3
    scales = [i for i in onnx.load(str(file)).graph.initializer if i.name.endswith("_scale")]
    assert scales and all(int(np.prod(s.dims)) > 1 for s in scales)  # per output channel
    assert any("rewritten as MatMul+Add" in n for n in notes)


def test_int8_is_static_qdq_with_per_channel_int8_weights(model: ModelInfo, calib: Dataset,
                                                          workdir: Path) -> None:
    file, notes = TARGET.convert(model, "int8", calib=calib, workdir=workdir)
    proto = onnx.load(str(file))
    inits = {i.name: i for i in proto.graph.initializer}
    weight_dq = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"
                 and n.input[0] in inits and "weight" in n.input[0]]
    assert len(weight_dq) == 5
    assert all(inits[n.input[0]].data_type == TensorProto.INT8 for n in weight_dq)
    assert all(int(np.prod(inits[n.input[1]].dims)) > 1 for n in weight_dq)
    assert "MinMax calibration on 100 samples" in notes[0]


def test_dynamic_without_matmul_or_gemm_is_a_conversion_error(tmp_path: Path) -> None:
    path = _conv_only_model(tmp_path / "conv.onnx")
    with pytest.raises(ConversionError, match="^no MatMul/Gemm to quantize dynamically; "
                                              "int8 dynamic would change nothing$"):
        TARGET.convert(inspect_model(path), "int8-dynamic", calib=Dataset(feeds=()),
                       workdir=tmp_path / "w")


def test_int8_without_calibration_samples_is_a_conversion_error(model: ModelInfo,
                                                                tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="calibration samples"):
        TARGET.convert(model, "int8", calib=Dataset(feeds=()), workdir=tmp_path)


# ---------------------------------------------------------------- calibration methods


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_calibration_keeps_accuracy_and_warns_on_few_samples(
        method: str, model: ModelInfo, calib: Dataset, held_out: Dataset, digits: DigitsModel,
        tmp_path: Path) -> None:
    settings = ConvertSettings(calibration=method)  # type: ignore[arg-type]
    file, notes = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path / "all",
                                 settings=settings)
    assert f"{method.capitalize()} calibration on 100 samples" in notes[0]
    assert not any("samples is few" in n for n in notes)
    assert digits.float_accuracy - _accuracy(file, held_out) <= 0.01
    few = Dataset(feeds=calib.feeds[:20])
    _, notes = TARGET.convert(model, "int8", calib=few, workdir=tmp_path / "few",
                              settings=settings)
    assert any("20 samples is few" in n for n in notes)


# ---------------------------------------------------------------- cache


def test_cached_artifact_is_reused_and_written_atomically(model: ModelInfo, calib: Dataset,
                                                          tmp_path: Path) -> None:
    first, notes = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path)
    stamp = first.stat().st_mtime_ns
    start = time.perf_counter()
    again, notes_again = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path)
    assert (again, notes_again) == (first, notes) and again.stat().st_mtime_ns == stamp
    assert time.perf_counter() - start < 0.05
    leftovers = [p.name for p in tmp_path.iterdir()
                 if p.name.startswith(".ort-") or p.name.endswith(".partial")]
    assert leftovers == []


def test_artifact_without_its_notes_is_rebuilt(model: ModelInfo, calib: Dataset,
                                               tmp_path: Path) -> None:
    """A crash between the two renames leaves no notes file: not a cache hit."""
    stale = tmp_path / FILES["int8"]
    stale.write_bytes(b"truncated")
    file, _ = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path)
    onnx.checker.check_model(onnx.load(str(file)))


# ---------------------------------------------------------------- keep_float


def test_keep_float_leaves_the_node_float_and_says_so(model: ModelInfo, calib: Dataset,
                                                      held_out: Dataset, digits: DigitsModel,
                                                      tmp_path: Path) -> None:
    settings = ConvertSettings(keep_float=("/9/Gemm",))
    file, notes = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path / "s",
                                 settings=settings)
    assert _float_weight(file, "/9/Gemm") and not _float_weight(file, "/11/Gemm")
    assert "kept float (keep_float): /9/Gemm" in notes
    dyn, notes = TARGET.convert(model, "int8-dynamic", calib=calib, workdir=tmp_path / "d",
                                settings=settings)
    matmuls = {n.name: n.op_type for n in _nodes(dyn) if "Gemm" in n.name}
    assert matmuls["/9/Gemm"] == "MatMul" and matmuls["/11/Gemm_quant"] == "MatMulInteger"
    half, notes = TARGET.convert(model, "fp16", calib=calib, workdir=tmp_path / "h",
                                 settings=settings)
    weights = {i.name: i.data_type for i in onnx.load(str(half)).graph.initializer}
    assert weights["9.weight"] == TensorProto.FLOAT and weights["11.weight"] == TensorProto.FLOAT16
    assert digits.float_accuracy - _accuracy(half, held_out) <= 0.01


def test_keep_float_follows_a_node_fused_by_pre_processing(tmp_path: Path) -> None:
    path = _conv_bn_model(tmp_path / "bn.onnx")
    model = inspect_model(path)
    calib = _random_dataset((1, 1, 8, 8), 16)
    settings = ConvertSettings(keep_float=("bn",))
    file, notes = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path / "w",
                                 settings=settings)
    assert "keep_float: bn was fused into conv; conv stays float" in notes
    assert "kept float (keep_float): conv" in notes
    assert _float_weight(file, "conv") and not _float_weight(file, "fc")


def test_keep_float_names_must_exist(model: ModelInfo, calib: Dataset, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="keep_float names not in the model: /nope"):
        TARGET.convert(model, "int8", calib=calib, workdir=tmp_path,
                       settings=ConvertSettings(keep_float=("/nope",)))


def test_map_keep_float_reports_folded_nodes() -> None:
    reference = _graph_model([helper.make_node("Identity", ["x"], ["y"], name="id"),
                              helper.make_node("Relu", ["y"], ["z"], name="relu")])
    prepared = _graph_model([helper.make_node("Relu", ["x"], ["z"], name="relu")])
    exclude, notes = map_keep_float(reference, prepared, ["id", "relu"])
    assert exclude == ["relu"]
    assert "keep_float: id was folded away by pre-processing; nothing to keep" in notes


# ---------------------------------------------------------------- Constant-node weights


def test_constants_to_initializers_keeps_outputs(digits: DigitsModel, tmp_path: Path) -> None:
    proto = _with_constant_weights(onnx.load(str(digits.onnx)))
    assert sum(n.op_type == "Constant" for n in proto.graph.node) == 10
    x = np.load(digits.calib)[:8]
    before = _run(proto, x)
    assert constants_to_initializers(proto) == 10
    assert not any(n.op_type == "Constant" for n in proto.graph.node)
    assert {"0.weight", "2.weight", "5.weight"} <= {i.name for i in proto.graph.initializer}
    np.testing.assert_array_equal(_run(proto, x), before)


def test_int8_of_a_model_with_constant_conv_weights(digits: DigitsModel, held_out: Dataset,
                                                    tmp_path: Path) -> None:
    path = tmp_path / "constant_weights.onnx"
    onnx.save(_with_constant_weights(onnx.load(str(digits.onnx))), str(path))
    model = inspect_model(path)
    calib = load_dataset(digits.calib, model)
    file, notes = TARGET.convert(model, "int8", calib=calib, workdir=tmp_path / "w")
    assert "10 Constant-node tensor(s) moved to initializers" in notes
    proto = onnx.load(str(file))
    inits = {i.name: i for i in proto.graph.initializer}
    dq_out = {n.output[0]: n for n in proto.graph.node if n.op_type == "DequantizeLinear"}
    for conv in (n for n in proto.graph.node if n.op_type == "Conv"):
        dq = dq_out[conv.input[1]]  # the weight is an int8 initializer, per channel
        assert inits[dq.input[0]].data_type == TensorProto.INT8
        assert int(np.prod(inits[dq.input[1]].dims)) > 1
    assert digits.float_accuracy - _accuracy(file, held_out) <= 0.01


def test_gemms_to_matmuls_is_exact(digits: DigitsModel) -> None:
    proto = onnx.load(str(digits.onnx))
    x = np.load(digits.calib)[:8]
    before = _run(proto, x)
    assert gemms_to_matmuls(proto) == 2
    assert [n.name for n in proto.graph.node if n.op_type == "MatMul"] == ["/9/Gemm", "/11/Gemm"]
    np.testing.assert_allclose(_run(proto, x), before, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- model builders


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def _with_constant_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with every initializer produced by a Constant node instead."""
    constants = [helper.make_node("Constant", [], [i.name], name=f"const_{i.name}", value=i)
                 for i in proto.graph.initializer]
    nodes = [*constants, *proto.graph.node]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    del proto.graph.initializer[:]
    onnx.checker.check_model(proto)
    return proto


def _graph_model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 4])],
                              [helper.make_tensor_value_info("z", 1, [1, 4])])
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """Opset 17 at IR 10 (onnx 1.23 defaults to IR 14, newer than onnxruntime 1.31 reads)."""
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def _conv_only_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["out"], name="relu")], "conv_only",
        [helper.make_tensor_value_info("input", 1, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("out", 1, [1, 4, 8, 8])],
        [_init("w", rng.normal(size=(4, 1, 3, 3)))])
    onnx.save(_model(graph), str(path))
    return path


def _conv_bn_model(path: Path) -> Path:
    """input -> Conv -> BatchNormalization -> Relu -> Flatten -> Gemm (BN fuses into Conv)."""
    rng = np.random.default_rng(0)
    inits = [_init("w", rng.normal(size=(4, 1, 3, 3))), _init("b", rng.normal(size=4)),
             _init("gamma", rng.uniform(0.5, 2, 4)), _init("beta", rng.normal(size=4)),
             _init("mean", rng.normal(size=4)), _init("var", rng.uniform(0.5, 2, 4)),
             _init("fw", rng.normal(size=(10, 144))), _init("fb", rng.normal(size=10))]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                              ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["out"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "conv_bn",
                              [helper.make_tensor_value_info("input", 1, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("out", 1, [1, 10])], inits)
    onnx.save(_model(graph), str(path))
    return path


def _random_dataset(shape: tuple[int, ...], count: int) -> Dataset:
    rng = np.random.default_rng(1)
    return Dataset(feeds=tuple({"input": rng.random(shape, dtype=np.float32)}
                               for _ in range(count)))


# ---------------------------------------------------------------- opset < 13 (per-channel)


def _opset12_model(path: Path) -> Path:
    """Conv -> Relu -> pool -> MatMul at opset 12: per-channel DequantizeLinear needs 13."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, .3, (8, 3, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.normal(0, .1, (8,)).astype(np.float32), "b"),
               numpy_helper.from_array(rng.normal(0, .3, (8, 64)).astype(np.float32), "fw")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fw"], ["y"])]
    graph = helper.make_graph(
        nodes, "opset12", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], weights)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    proto.ir_version = 7
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    return path


def _images(count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset(feeds=tuple({"x": rng.random((1, 3, 16, 16), dtype=np.float32)}
                               for _ in range(count)))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel(), b.ravel()) / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("precision", ["int8", "int8-dynamic"])
def test_opset12_model_is_upgraded_for_per_channel_weights(precision: str,
                                                           tmp_path: Path) -> None:
    """Per-channel int8 of an opset-12 model wrote DequantizeLinear(axis) ORT cannot load."""
    model = inspect_model(_opset12_model(tmp_path / "m.onnx"))
    path, notes = TARGET.convert(model, precision, calib=_images(16, 0), workdir=tmp_path / "w")
    assert any("upgraded to opset 13" in n for n in notes), notes
    assert "per channel" in notes[0]
    proto = onnx.load(str(path))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [13]
    runner, reference = OrtRunner(path, threads=1), OrtRunner(Path(model.path), threads=1)
    for feed in _images(8, 1).feeds:
        assert _cosine(runner.run(feed)[0], reference.run(feed)[0]) > 0.98


def test_opset12_model_falls_back_to_per_tensor_when_the_upgrade_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import version_converter

    def refuse(proto: onnx.ModelProto, target: int) -> onnx.ModelProto:
        raise RuntimeError("No adapter for Conv 12 -> 13")

    monkeypatch.setattr(version_converter, "convert_version", refuse)
    model = inspect_model(_opset12_model(tmp_path / "m.onnx"))
    path, notes = TARGET.convert(model, "int8", calib=_images(16, 0), workdir=tmp_path / "w")
    assert "per tensor" in notes[0]
    assert any("upgrade failed (No adapter for Conv 12 -> 13)" in n for n in notes), notes
    dequantize = [n for n in _nodes(path) if n.op_type == "DequantizeLinear"]
    assert dequantize and not any(a.name == "axis" for n in dequantize for a in n.attribute)
    OrtRunner(path, threads=1).run(_images(1, 2).feeds[0])


def test_a_model_ort_cannot_load_keeps_the_meaningful_reason(tmp_path: Path) -> None:
    """ORT's load error is one long line: the reason must keep its end, not stop at 'In Node,'."""
    from targets.onnxruntime import target as ort_target

    scale = numpy_helper.from_array(np.ones(2, np.float32), "s")
    zero = numpy_helper.from_array(np.zeros(2, np.int8), "z")
    weight = numpy_helper.from_array(np.ones((2, 2), np.int8), "q")
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"], axis=0),
         helper.make_node("MatMul", ["x", "w"], ["y"])], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [scale, zero, weight])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    proto.ir_version = 7
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    with pytest.raises(ConversionError) as caught:
        ort_target._check_loads(bad, "int8")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    assert "cannot load" in message and "Unrecognized attribute: axis" in message, message
