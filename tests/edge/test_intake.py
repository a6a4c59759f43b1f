"""edge.core.intake: ONNX, TFLite, Keras, SavedModel and PyTorch sources become the reference."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edge.core.errors import UsageError
from edge.core.intake import (
    dynamic_inputs,
    parse_shape_flags,
    parse_shapes,
    pin_from_sample,
    to_reference,
)
from edge.core.model import inspect_model
from tests.support import mediapipe

# --- helpers -----------------------------------------------------------------------------------


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of an ONNX file in onnxruntime."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    """Save a graph as an opset-17 model."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _two_input_model(path: Path) -> Path:
    """x float [batch, 4] and ids int64 [batch, seq] (both dynamic) -> x + mean(emb[ids])."""
    emb = np.arange(40, dtype=np.float32).reshape(10, 4) / 10
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["looked"]),
        helper.make_node("ReduceMean", ["looked"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Add", ["x", "mean"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[numpy_helper.from_array(emb, "emb")])
    return _save(graph, path)


def _constant_weights_model(path: Path) -> Path:
    """A two-layer MLP whose weights are Constant nodes (tensor, floats and ints attributes)."""
    rng = np.random.default_rng(1)
    w1, w2 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 6))
    nodes = [
        helper.make_node("Constant", [], ["w1"], value=numpy_helper.from_array(w1)),
        helper.make_node("Constant", [], ["b1"], value_floats=[0.1] * 8),
        helper.make_node("Constant", [], ["w2"],
                         value=numpy_helper.from_array(w2.astype(np.float32))),
        helper.make_node("Constant", [], ["shape"], value_ints=[1, 2, 3]),
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Reshape", ["o", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "constant_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])])
    return _save(graph, path)


def _static_model(path: Path) -> Path:
    """A fully static model with initializer weights: nothing to fix."""
    weight = numpy_helper.from_array(np.eye(3, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "static",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], initializer=[weight])
    return _save(graph, path)


# --- --shape -----------------------------------------------------------------------------------


def test_parse_shapes_reads_repeated_flags() -> None:
    assert parse_shapes(["input=1,3,224,224", "ids=1,16"]) == {
        "input": (1, 3, 224, 224), "ids": (1, 16)}


def test_parse_shape_flags_reads_an_optional_dtype_and_names_with_colons() -> None:
    shapes, dtypes = parse_shape_flags(["serving_default_x:0=1,8", "ids=2, 5:int64"])
    assert shapes == {"serving_default_x:0": (1, 8), "ids": (2, 5)}
    assert dtypes == {"ids": "int64"}


@pytest.mark.parametrize(("flag", "says"), [
    ("input", "expected NAME=DIMS"),
    ("=1,2", "expected NAME=DIMS"),
    ("input=", "positive integers"),
    ("input=1,0,3", "positive integers"),
    ("input=1,a", "positive integers"),
    ("input=-1,3", "positive integers"),
    ("ids=1,4:int13", "unknown dtype"),
])
def test_parse_shapes_rejects_bad_flags(flag: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_shapes([flag])


def test_parse_shapes_rejects_a_name_given_twice() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_shapes(["x=1,2", "x=1,3"])


# --- which files are accepted ------------------------------------------------------------------


def test_unknown_extension_lists_the_accepted_ones(tmp_path: Path) -> None:
    source = tmp_path / "model.pb"
    source.write_bytes(b"\0")
    with pytest.raises(UsageError, match=r"model\.pb.*accepted: \.onnx, \.tflite, \.keras"):
        to_reference(source, tmp_path / "work")


def test_missing_file_and_foreign_folder_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        to_reference(tmp_path / "absent.onnx", tmp_path / "work")
    with pytest.raises(UsageError, match="SavedModel"):
        to_reference(tmp_path, tmp_path / "work")


@pytest.mark.parametrize("name", ["broken.tflite", "broken.keras", "broken.h5"])
def test_a_file_that_is_not_its_format_is_named(tmp_path: Path, name: str) -> None:
    source = tmp_path / name
    source.write_bytes(b"this is not a model at all")
    with pytest.raises(UsageError, match=rf"{name}: not a valid"):
        to_reference(source, tmp_path / "work")


def test_a_corrupt_onnx_file_is_named(tmp_path: Path) -> None:
    source = tmp_path / "broken.onnx"
    source.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="broken.onnx: not a valid ONNX model"):
        to_reference(source, tmp_path / "work")


def test_missing_converter_names_the_extra(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tf2onnx" else real(name, *a))
    with pytest.raises(UsageError, match=r"needs tf2onnx: pip install 'edge\[tflite\]'"):
        to_reference(mediapipe.face_detector(), tmp_path / "work")


# --- ONNX sources ------------------------------------------------------------------------------


def test_a_clean_onnx_model_is_its_own_reference(tmp_path: Path) -> None:
    source = _static_model(tmp_path / "static.onnx")
    assert to_reference(source, tmp_path / "work") == source
    assert to_reference(source, tmp_path / "work", shapes={"x": (1, 3)}) == source
    assert not (tmp_path / "work").exists()


def test_shapes_pin_the_dynamic_dims_of_several_inputs_one_int64(tmp_path: Path) -> None:
    source = _two_input_model(tmp_path / "two.onnx")
    assert dynamic_inputs(source) == ["x", "ids"]
    ref = to_reference(source, tmp_path / "work", shapes={"x": (2, 4), "ids": (2, 5)})
    assert ref != source and dynamic_inputs(ref) == []
    info = inspect_model(ref)
    assert [(s.name, s.shape, s.dtype) for s in info.inputs] == [
        ("x", (2, 4), "float32"), ("ids", (2, 5), "int64")]
    assert info.outputs[0].shape == (2, 4)
    feeds = {"x": np.ones((2, 4), np.float32),
             "ids": np.array([[0, 1, 2, 3, 9], [4, 4, 4, 4, 4]], np.int64)}
    np.testing.assert_array_equal(_run(ref, feeds)[0], _run(source, feeds)[0])


def test_pinning_only_one_input_fixes_its_shared_dims_everywhere(tmp_path: Path) -> None:
    source = _two_input_model(tmp_path / "two.onnx")
    ref = to_reference(source, tmp_path / "work", shapes={"ids": (3, 7)})
    info = inspect_model(ref)
    assert info.inputs[0].shape == (3, 4)  # 'batch' pinned through ids
    assert info.outputs[0].shape == (3, 4)


def test_pin_from_sample_uses_a_calibration_feed(tmp_path: Path) -> None:
    source = _two_input_model(tmp_path / "two.onnx")
    feed = {"x": np.zeros((1, 4), np.float32), "ids": np.zeros((1, 6), np.int64)}
    ref = pin_from_sample(source, tmp_path / "work", feed)
    assert [s.shape for s in inspect_model(ref).inputs] == [(1, 4), (1, 6)]
    assert pin_from_sample(ref, tmp_path / "work", feed) == ref


def test_question_mark_dims_are_unknown_not_one_shared_symbol(tmp_path: Path) -> None:
    # Paddle2ONNX writes every unknown dim as '?' (rapidocr's text-direction classifier:
    # x [-1, 3, '?', '?']): pinning it to 48 x 192 is not a conflict
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 3, "?", "?"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    source = tmp_path / "cls.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    ref = to_reference(source, tmp_path / "work", shapes={"x": (1, 3, 48, 192)})
    assert inspect_model(ref).inputs[0].shape == (1, 3, 48, 192)


@pytest.mark.parametrize(("shapes", "says"), [
    ({"tokens": (1, 5)}, "has no input 'tokens'; its inputs: x, ids"),
    ({"x": (2, 4), "ids": (3, 5)}, "dim 'batch' is shared by inputs 'x' and 'ids'"),
    ({"ids": (1, 5, 1)}, r"input 'ids' of two.onnx has shape \[\?,\?\]"),
    ({"x": (1, 5)}, r"input 'x' of two.onnx has shape \[\?,4\]"),
])
def test_bad_pins_say_what_the_inputs_are(tmp_path: Path, shapes: dict, says: str) -> None:
    source = _two_input_model(tmp_path / "two.onnx")
    with pytest.raises(UsageError, match=says):
        to_reference(source, tmp_path / "work", shapes=shapes)


def test_constant_node_weights_become_initializers(tmp_path: Path) -> None:
    source = _constant_weights_model(tmp_path / "consts.onnx")
    ref = to_reference(source, tmp_path / "work")
    model = onnx.load(str(ref))
    assert not [n for n in model.graph.node if n.op_type == "Constant"]
    assert {i.name for i in model.graph.initializer} == {"w1", "b1", "w2", "shape"}
    assert inspect_model(ref).params == 4 * 8 + 8 + 8 * 6 + 3
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(ref, {"x": x})[0], _run(source, {"x": x})[0])
    before = ref.stat().st_mtime_ns
    assert to_reference(source, tmp_path / "work") == ref and ref.stat().st_mtime_ns == before


def test_moved_weights_can_be_quantized(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    ref = to_reference(_constant_weights_model(tmp_path / "consts.onnx"), tmp_path / "work")
    out = tmp_path / "int8.onnx"
    quantize_dynamic(str(ref), str(out), weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops


# --- PyTorch sources ---------------------------------------------------------------------------


class RecurrentNet(nn.Module):
    """Token ids (int64), features and a GRU state in; scores and the next state out."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.gru = nn.GRU(4, 5, batch_first=True)
        self.head = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor, feats: torch.Tensor,
                h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq, h1 = self.gru(self.emb(ids), h0)
        return self.head(torch.cat([seq[:, -1], feats], 1)), h1


TORCH_SHAPES = {"ids": (1, 6), "feats": (1, 3), "h0": (1, 1, 5)}


@pytest.fixture(scope="module")
def torch_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same module saved whole, as TorchScript and as a bare state_dict."""
    torch.manual_seed(0)
    net = RecurrentNet().eval()
    root = tmp_path_factory.mktemp("torch")
    files = {k: root / f"{k}.pt" for k in ("whole", "script", "state")}
    torch.save(net, files["whole"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        torch.jit.script(net).save(str(files["script"]))
    torch.save(net.state_dict(), files["state"])
    return files


@pytest.mark.parametrize("kind", ["whole", "script"])
def test_a_torch_module_exports_with_several_inputs_and_state(
    torch_files: dict[str, Path], tmp_path: Path, kind: str,
) -> None:
    ref = to_reference(torch_files[kind], tmp_path / "work", shapes=TORCH_SHAPES,
                       dtypes={"ids": "int64"}, trust_code=kind == "whole")
    info = inspect_model(ref)
    assert info.opset == 17
    assert [(s.name, s.shape, s.dtype) for s in info.inputs] == [
        ("ids", (1, 6), "int64"), ("feats", (1, 3), "float32"), ("h0", (1, 1, 5), "float32")]
    assert [o.name for o in info.outputs] == ["output_0", "output_1"]
    feeds = {"ids": np.array([[3, 1, 4, 1, 5, 9]], np.int64),
             "feats": np.array([[0.5, -1.0, 2.0]], np.float32),
             "h0": np.full((1, 1, 5), 0.1, np.float32)}
    net = torch.load(torch_files["whole"], weights_only=False)
    with torch.no_grad():
        want = net(*(torch.from_numpy(v) for v in feeds.values()))
    for got, expected in zip(_run(ref, feeds), want, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_torch_needs_shapes_and_names_the_flag(torch_files: dict[str, Path],
                                               tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--shape ids=DIMS --shape feats=DIMS --shape h0=DIMS"):
        to_reference(torch_files["whole"], tmp_path / "work", trust_code=True)
    with pytest.raises(UsageError, match="--shape h0=DIMS"):
        to_reference(torch_files["whole"], tmp_path / "work",
                     shapes={"ids": (1, 6), "feats": (1, 3)}, trust_code=True)


def test_torch_shape_for_an_unknown_argument_lists_forwards_arguments(
    torch_files: dict[str, Path], tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="no argument 'tokens'; its arguments: ids, feats, h0"):
        to_reference(torch_files["whole"], tmp_path / "work", shapes={"tokens": (1, 6)},
                     trust_code=True)


def test_a_torch_state_dict_is_not_a_module(torch_files: dict[str, Path],
                                            tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"state\.pt: holds a state_dict, not a module"):
        to_reference(torch_files["state"], tmp_path / "work", shapes=TORCH_SHAPES)


def test_a_corrupt_torch_file_is_named(tmp_path: Path) -> None:
    source = tmp_path / "broken.pth"
    source.write_bytes(b"not a pickle")
    with pytest.raises(UsageError, match=r"broken\.pth: not a loadable PyTorch module"):
        to_reference(source, tmp_path / "work", shapes={"x": (1,)})


def test_a_module_failing_on_the_example_inputs_says_so(torch_files: dict[str, Path],
                                                        tmp_path: Path) -> None:
    shapes = {**TORCH_SHAPES, "feats": (1, 4)}
    with pytest.raises(UsageError, match="failed on the --shape example inputs"):
        to_reference(torch_files["whole"], tmp_path / "work", shapes=shapes,
                     dtypes={"ids": "int64"}, trust_code=True)


# --- TensorFlow sources (tf2onnx in a child process) -------------------------------------------

_MAKE_KERAS = textwrap.dedent("""
    import sys
    from pathlib import Path

    import keras
    import numpy as np

    out = Path(sys.argv[1])
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int64", name="ids")
    feats = keras.Input((3,), name="feats")
    state = keras.layers.GRU(5)(keras.layers.Embedding(10, 4)(ids))
    score = keras.layers.Dense(2, name="score")(keras.layers.Concatenate()([state, feats]))
    model = keras.Model([ids, feats], score)
    model.save(out / "multi.keras")
    model.save(out / "multi.h5")
    model.export(out / "multi_savedmodel")
    x_ids = np.array([[1, 2, 3, 4, 5, 6]], np.int64)
    x_feats = np.array([[0.5, -1.0, 2.0]], np.float32)
    np.savez(out / "expected.npz", ids=x_ids, feats=x_feats,
             score=np.asarray(model([x_ids, x_feats])))
""")


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keras model with an int64 token input, a float input and a GRU, in three formats."""
    root = tmp_path_factory.mktemp("keras")
    subprocess.run([sys.executable, "-c", _MAKE_KERAS, str(root)], check=True,
                   capture_output=True, timeout=600)
    return root


def _keras_parity(ref: Path, root: Path) -> None:
    """The reference reproduces the Keras model's scores on the saved example."""
    data = np.load(root / "expected.npz")
    got = _run(ref, {"ids": data["ids"], "feats": data["feats"]})[0]
    np.testing.assert_allclose(got, data["score"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_keras_model_with_int64_and_recurrent_layers_converts(keras_files: Path,
                                                                tmp_path: Path) -> None:
    ref = to_reference(keras_files / "multi.keras", tmp_path / "work",
                       shapes={"ids": (1, 6), "feats": (1, 3)})
    info = inspect_model(ref)
    assert [(s.name, s.shape, s.dtype) for s in info.inputs] == [
        ("ids", (1, 6), "int64"), ("feats", (1, 3), "float32")]
    assert info.outputs[0].shape == (1, 2)
    assert "Loop" in info.ops  # the GRU's recurrence
    _keras_parity(ref, keras_files)


@pytest.mark.slow
def test_an_h5_keras_model_keeps_its_dynamic_dims_unless_pinned(keras_files: Path,
                                                                 tmp_path: Path) -> None:
    ref = to_reference(keras_files / "multi.h5", tmp_path / "work")
    assert dynamic_inputs(ref) == ["ids", "feats"]
    _keras_parity(ref, keras_files)


@pytest.mark.slow
def test_a_savedmodel_folder_converts(keras_files: Path, tmp_path: Path) -> None:
    ref = to_reference(keras_files / "multi_savedmodel", tmp_path / "work",
                       shapes={"ids": (1, 6), "feats": (1, 3)})
    assert sorted(s.name for s in inspect_model(ref).inputs) == ["feats", "ids"]
    _keras_parity(ref, keras_files)


@pytest.fixture(scope="module")
def face_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mediapipe's short-range face detector converted from .tflite to the reference ONNX."""
    return to_reference(mediapipe.face_detector(), tmp_path_factory.mktemp("face"))


@pytest.mark.slow
def test_the_face_detector_tflite_converts_and_keeps_its_auc(face_reference: Path) -> None:
    info = inspect_model(face_reference)
    assert [(s.name, s.shape) for s in info.inputs] == [("input", (1, 128, 128, 3))]
    assert [(o.name, o.shape) for o in info.outputs] == [
        ("regressors", (1, 896, 16)), ("classificators", (1, 896, 1))]
    images, labels = mediapipe.lfw_faces()
    onnx_auc = mediapipe.face_auc(mediapipe.ort_runner(face_reference), images, labels)
    tflite_auc = mediapipe.face_auc(mediapipe.litert_runner(mediapipe.face_detector()),
                                    images, labels)
    assert onnx_auc >= 0.99 and tflite_auc >= 0.99
    assert abs(onnx_auc - tflite_auc) <= 0.001


@pytest.mark.slow
def test_a_converted_reference_is_reused_from_workdir(face_reference: Path) -> None:
    before = face_reference.stat().st_mtime_ns
    again = to_reference(mediapipe.face_detector(), face_reference.parent)
    assert again == face_reference and again.stat().st_mtime_ns == before


def test_face_data_files_split_lfw_subset(tmp_path: Path) -> None:
    calib, held = mediapipe.write_face_data(tmp_path)
    assert np.load(calib).shape == (50, 128, 128, 3)
    data = np.load(held)
    assert data["input"].shape == (150, 128, 128, 3) and int(data["face"].sum()) == 75
    assert -1.0 <= float(data["input"].min()) and float(data["input"].max()) <= 1.0


def test_the_converter_child_imports_this_edge() -> None:
    """The TensorFlow child runs with the directory holding this ``edge`` package on its path."""
    from edge.core.intake.tf import import_root

    assert (import_root() / "edge" / "core" / "intake" / "tf.py").is_file()
