"""OpenVINO target: IR pairs written atomically and reused, f32 fidelity, NNCF int8, keep_float."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings
from targets.openvino import OpenVINOTarget, is_transformer_like, load_with_hint, quantize
from targets.openvino import target as openvino
from tests.support.digits import DigitsModel

TARGET = OpenVINOTarget()
needs_openvino = pytest.mark.skipif(TARGET.missing() is not None, reason=str(TARGET.missing()))
pytestmark = needs_openvino


def _outputs(runner: Any, x: np.ndarray, name: str = "input") -> np.ndarray:
    """Run every sample (batch 1) and stack the first output."""
    return np.concatenate([runner.run({name: x[i:i + 1]})[0] for i in range(len(x))])


def _read(xml: Path) -> Any:
    """The IR as an openvino Model."""
    import openvino as ov

    return ov.Core().read_model(str(xml))


def _op(ov_model: Any, name: str) -> Any:
    """The op called ``name``."""
    return next(op for op in ov_model.get_ordered_ops() if op.get_friendly_name() == name)


def _producer(op: Any, port: int) -> Any:
    """The op feeding input ``port`` of ``op``."""
    return op.input(port).get_source_output().get_node()


def _hint(runner: Any) -> str:
    """The compiled model's inference precision, e.g. 'f32'."""
    return str(runner.compiled_model.get_property("INFERENCE_PRECISION_HINT").get_type_name())


def _type(op: Any) -> str:
    """An op's output element type, e.g. 'i8'."""
    return str(op.get_element_type().get_type_name())


def _weight_is_int8(conv: Any) -> bool:
    """True if the weight input is an int8 constant decompressed by Convert (and Multiply)."""
    node = _producer(conv, 1)
    while node.get_type_name() in ("Multiply", "Subtract", "Convert"):
        node = _producer(node, 0)
    return node.get_type_name() == "Constant" and _type(node) in ("i8", "u8")


# ---------------------------------------------------------------- digits, end to end (slow)


@pytest.fixture(scope="module")
def data(digits: DigitsModel) -> dict[str, Any]:
    """The digits model's ModelInfo, calibration set and held-out inputs and labels."""
    model = inspect_model(digits.onnx)
    evaluation = np.load(digits.eval)
    return {"model": model, "calib": load_dataset(digits.calib, model),
            "x": evaluation["input"], "y": evaluation["labels"]}


@pytest.fixture(scope="module")
def reference(data: dict[str, Any]) -> np.ndarray:
    """onnxruntime fp32 outputs on the held-out inputs."""
    import onnxruntime as ort

    session = ort.InferenceSession(data["model"].path, providers=["CPUExecutionProvider"])
    x = data["x"]
    return np.concatenate([session.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


@pytest.fixture(scope="module")
def converted(data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """fp32, fp16, bf16 and int8 IRs of the digits model in one workdir, with timings."""
    workdir = tmp_path_factory.mktemp("openvino-cache")
    out: dict[str, Any] = {"workdir": workdir, "seconds": {}, "files": {}, "notes": {}}
    for precision in ("fp32", "fp16", "bf16", "int8"):
        start = time.perf_counter()
        file, notes = TARGET.convert(data["model"], precision, calib=data["calib"],
                                     workdir=workdir)
        out["seconds"][precision] = time.perf_counter() - start
        out["files"][precision], out["notes"][precision] = file, notes
    return out


@pytest.mark.slow
def test_ir_pairs_are_complete_and_atomic(converted: dict[str, Any]) -> None:
    assert OpenVINOTarget.caps.companions == (".bin",)
    for file in converted["files"].values():
        assert file.suffix == ".xml" and file.stat().st_size > 0
        assert file.with_suffix(".bin").stat().st_size > 0  # companion: same stem, .bin
    leftovers = [p.name for p in converted["workdir"].iterdir() if "partial" in p.name]
    assert leftovers == []
    print("\nfirst conversions: " + ", ".join(f"{p} {s:.1f} s"
                                              for p, s in converted["seconds"].items()))


@pytest.mark.slow
def test_fp32_matches_onnxruntime(data: dict[str, Any], converted: dict[str, Any],
                                  reference: np.ndarray) -> None:
    runner = TARGET.load(converted["files"]["fp32"], data["model"], threads=1)
    # the plain load, as a user's compile_model gets: f32, or bf16 on an AVX512-BF16/AMX CPU
    # (optimize verifies that one there); the IR itself computes f32 exactly when asked
    assert _hint(runner) == openvino.plain_precision()
    exact = load_with_hint(converted["files"]["fp32"], data["model"], threads=1, hint="f32")
    out = _outputs(exact, data["x"])
    assert out.shape == reference.shape and out.dtype == np.float32
    assert float(np.abs(out - reference).max()) < 1e-4


@pytest.mark.slow
def test_fp16_halves_weights_and_keeps_predictions(data: dict[str, Any],
                                                   converted: dict[str, Any],
                                                   reference: np.ndarray) -> None:
    files = converted["files"]
    fp32_bin = files["fp32"].with_suffix(".bin").stat().st_size
    assert files["fp16"].with_suffix(".bin").stat().st_size < 0.6 * fp32_bin
    types = {_type(op) for op in _read(files["fp16"]).get_ordered_ops()
             if op.get_type_name() == "Constant"}
    assert "f16" in types
    out = _outputs(TARGET.load(files["fp16"], data["model"], threads=1), data["x"])
    assert (out.argmax(1) == reference.argmax(1)).mean() >= 0.99


@pytest.mark.slow
def test_int8_ir_really_holds_int8(data: dict[str, Any], converted: dict[str, Any]) -> None:
    ov_model = _read(converted["files"]["int8"])
    kinds = [op.get_type_name() for op in ov_model.get_ordered_ops()]
    assert kinds.count("FakeQuantize") >= 3  # activations
    convs = [op for op in ov_model.get_ordered_ops() if op.get_type_name() == "Convolution"]
    assert len(convs) == 3 and all(_weight_is_int8(c) for c in convs)
    notes = " ".join(converted["notes"]["int8"])
    assert "PERFORMANCE" in notes and "MINMAX" in notes


@pytest.mark.slow
def test_int8_accuracy_within_one_point(data: dict[str, Any], converted: dict[str, Any],
                                        reference: np.ndarray) -> None:
    out = _outputs(TARGET.load(converted["files"]["int8"], data["model"], threads=2), data["x"])
    accuracy = float((out.argmax(1) == data["y"]).mean())
    ref_accuracy = float((reference.argmax(1) == data["y"]).mean())
    assert accuracy >= ref_accuracy - 0.01, (accuracy, ref_accuracy)


@pytest.mark.slow
def test_reconversion_is_reused(data: dict[str, Any], converted: dict[str, Any],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def convert(*args: Any) -> None:
        raise AssertionError("converted again although the workdir holds a complete IR")

    monkeypatch.setattr(openvino, "_convert", convert)
    for precision, file in converted["files"].items():
        mtime = file.stat().st_mtime_ns
        start = time.perf_counter()
        again, notes = OpenVINOTarget().convert(data["model"], precision, calib=data["calib"],
                                                workdir=converted["workdir"])
        assert time.perf_counter() - start < 0.5
        assert again == file and file.stat().st_mtime_ns == mtime
        assert notes == converted["notes"][precision]


@pytest.mark.slow
def test_incomplete_ir_is_not_reused(data: dict[str, Any], converted: dict[str, Any],
                                     tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    for suffix in (".xml", ".json"):  # an IR whose .bin never arrived
        src = converted["files"]["fp32"].with_suffix(suffix)
        (workdir / src.name).write_bytes(src.read_bytes())
    file, _ = TARGET.convert(data["model"], "fp32", calib=data["calib"], workdir=workdir)
    assert file.with_suffix(".bin").is_file()


@pytest.mark.slow
def test_keep_float_leaves_named_conv_unquantized(data: dict[str, Any], tmp_path: Path) -> None:
    settings = ConvertSettings(keep_float=("/2/Conv", "/no/such/node"))
    file, notes = TARGET.convert(data["model"], "int8", calib=data["calib"], workdir=tmp_path,
                                 settings=settings)
    ov_model = _read(file)
    kept, other = _op(ov_model, "/2/Conv/WithoutBiases"), _op(ov_model, "/0/Conv/WithoutBiases")
    assert _producer(kept, 0).get_type_name() != "FakeQuantize"
    weight = _producer(kept, 1)
    assert weight.get_type_name() == "Constant" and _type(weight) == "f32"
    assert _weight_is_int8(other)
    text = " ".join(notes)
    assert "kept in float: /2/Conv (OpenVINO ops /2/Conv, /2/Conv/WithoutBiases)" in text
    assert "not in the model, ignored: /no/such/node" in text


def test_garbage_model_is_a_one_line_conversion_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"this is not a model\n" * 10)
    model = ModelInfo(path=str(path), sha256="0" * 64, size_bytes=200, opset=17, inputs=(),
                      outputs=(), params=0, macs=0)
    with pytest.raises(ConversionError) as caught:
        TARGET.convert(model, "fp32", calib=Dataset(feeds=()), workdir=tmp_path / "work")
    message = str(caught.value)
    assert "\n" not in message and "garbage.onnx" in message
    assert not list((tmp_path / "work").glob("*.xml"))


@pytest.mark.slow
def test_int8_without_calibration_is_a_conversion_error(data: dict[str, Any],
                                                        tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="calibration"):
        TARGET.convert(data["model"], "int8", calib=Dataset(feeds=()), workdir=tmp_path)


@pytest.mark.slow
def test_a_bf16_ir_computes_in_bf16_wherever_it_is_loaded(data: dict[str, Any],
                                                          converted: dict[str, Any],
                                                          reference: np.ndarray) -> None:
    import openvino as ov

    from targets.openvino.agent import openvino_hint

    file, notes = converted["files"]["bf16"], converted["notes"]["bf16"]
    assert file.name == "model_bf16.xml" and "bf16" in notes[0]
    assert any(n.startswith("made from model_fp32.xml in ") for n in notes), notes  # no 2nd
    assert file.with_suffix(".bin").read_bytes() == \
        converted["files"]["fp32"].with_suffix(".bin").read_bytes()  # conversion: fp32's weights
    core = ov.Core()  # the record both loaders read: the target's and the device agent's
    assert openvino_hint(core.read_model(str(file))) == "bf16"
    assert openvino_hint(core.read_model(str(converted["files"]["fp32"]))) == "f32"
    here = _hint(load_with_hint(file, data["model"], threads=1, hint="bf16"))
    if here != "bf16":  # this CPU computes no bf16: refused, not verified in another precision
        with pytest.raises(RuntimeError, match=f"made to compute in bf16, but OpenVINO "
                                               f"computes {here}"):
            TARGET.load(file, data["model"], threads=1)
        return
    runner = TARGET.load(file, data["model"], threads=1)
    assert _hint(runner) == "bf16"
    out = _outputs(runner, data["x"])
    fp32 = _outputs(TARGET.load(converted["files"]["fp32"], data["model"], threads=1), data["x"])
    assert float(np.abs(out - fp32).max()) > 1e-3  # computed in bf16 (f32 agrees to ~1e-5)
    assert (out.argmax(1) == reference.argmax(1)).mean() >= 0.99


@pytest.mark.slow
def test_an_ir_is_verified_only_in_the_precision_it_records(data: dict[str, Any],
                                                           converted: dict[str, Any],
                                                           tmp_path: Path) -> None:
    import openvino as ov

    ir = ov.Core().read_model(str(converted["files"]["fp32"]))
    ir.set_rt_info("f16", openvino.COMPUTES)
    ov.save_model(ir, str(tmp_path / "f16.xml"), compress_to_fp16=False)
    plain = load_with_hint(converted["files"]["fp32"], data["model"], threads=1, hint="f16")
    if _hint(plain) == "f16":  # this CPU computes f16: loaded as recorded
        assert _hint(TARGET.load(tmp_path / "f16.xml", data["model"], threads=1)) == "f16"
        return
    with pytest.raises(RuntimeError, match=f"made to compute in f16, but OpenVINO computes "
                                           f"{_hint(plain)}"):
        TARGET.load(tmp_path / "f16.xml", data["model"], threads=1)


@pytest.mark.slow
def test_load_with_bf16_hint(data: dict[str, Any], converted: dict[str, Any],
                             reference: np.ndarray) -> None:
    runner = load_with_hint(converted["files"]["fp32"], data["model"], threads=1, hint="bf16")
    assert _hint(runner) in ("bf16", "f32")  # f32 on a CPU without bf16 support
    out = _outputs(runner, data["x"])
    assert (out.argmax(1) == reference.argmax(1)).mean() >= 0.99
    with pytest.raises(ValueError, match="hint"):
        load_with_hint(converted["files"]["fp32"], data["model"], threads=1, hint="int4")


@pytest.mark.slow
def test_load_names_the_missing_bin(data: dict[str, Any], converted: dict[str, Any],
                                    tmp_path: Path) -> None:
    lonely = tmp_path / "model.xml"
    lonely.write_bytes(converted["files"]["fp32"].read_bytes())
    with pytest.raises(FileNotFoundError, match=r"model\.bin"):
        TARGET.load(lonely, data["model"], threads=1)


# ---------------------------------------------------------------- names, order, settings (fast)


def _two_output_model(path: Path) -> ModelInfo:
    """Input 'image:0' [1, 3, 4, 4]; outputs 'pooled' [1, 3] then 'doubled' [1, 3, 4, 4]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    axes = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes")
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    nodes = [helper.make_node("ReduceMean", ["image:0", "axes"], ["pooled"], keepdims=0),
             helper.make_node("Mul", ["image:0", "two"], ["doubled"])]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("image:0", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [1, 3, 4, 4])],
        initializer=[axes, two])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return inspect_model(path)


def test_runner_speaks_onnx_names_and_order(tmp_path: Path) -> None:
    model = _two_output_model(tmp_path / "two.onnx")
    file, _ = TARGET.convert(model, "fp32", calib=Dataset(feeds=()), workdir=tmp_path / "work")
    x = np.random.default_rng(0).random((1, 3, 4, 4)).astype(np.float64)  # cast to f32 by run
    pooled, doubled = TARGET.load(file, model, threads=1).run({"image:0": x})
    assert pooled.shape == (1, 3) and doubled.shape == (1, 3, 4, 4)
    np.testing.assert_allclose(pooled, x.mean(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_allclose(doubled, 2 * x, rtol=1e-6)


def test_transformer_detection() -> None:
    assert is_transformer_like({"MatMul": 19, "LayerNormalization": 6, "Softmax": 3})
    assert is_transformer_like({"MatMul": 12, "Softmax": 2, "Add": 30})  # LayerNorm decomposed
    assert not is_transformer_like({"Conv": 52, "Gemm": 1, "Softmax": 1})  # CNN classifier
    assert not is_transformer_like({"Gemm": 3, "Relu": 2})  # MLP, no attention


def _info(ops: dict[str, int]) -> ModelInfo:
    return ModelInfo(path="m.onnx", sha256="0", size_bytes=0, opset=17, inputs=(), outputs=(),
                     params=0, macs=0, ops=ops)


def test_nncf_settings_by_model_type() -> None:
    import nncf

    kwargs, _ = quantize.nncf_options(_info({"MatMul": 8, "Softmax": 2}), ConvertSettings())
    alphas = kwargs["advanced_parameters"].smooth_quant_alphas
    assert kwargs["model_type"] == nncf.ModelType.TRANSFORMER
    assert kwargs["preset"] == nncf.QuantizationPreset.MIXED
    assert alphas.convolution < 0 and alphas.matmul < 0  # SmoothQuant off
    kwargs, _ = quantize.nncf_options(_info({"Conv": 5, "Gemm": 1}), ConvertSettings())
    assert "model_type" not in kwargs
    assert kwargs["preset"] == nncf.QuantizationPreset.PERFORMANCE


def test_calibration_maps_to_nncf_range_estimators() -> None:
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet as Sets

    expected = {"minmax": Sets.MINMAX, "percentile": Sets.MEAN_QUANTILE,
                "entropy": Sets.HISTOGRAM}
    for method, estimator in expected.items():
        kwargs, notes = quantize.nncf_options(_info({"Conv": 1}),
                                               ConvertSettings(calibration=method))  # type: ignore[arg-type]
        assert kwargs["advanced_parameters"].activations_range_estimator_params == estimator
        assert any(n.startswith(f"calibration {method}") for n in notes)
