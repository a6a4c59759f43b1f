"""Transfer compression of cut tensors (fp16, int8) baked into head.onnx and tail.onnx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.errors import UsageError
from edge.core.profile import load_profile
from edge.flows.partition import PartitionOptions, partition
from partition.compress import check_mode, compress_split, wire_bytes_factor
from partition.graph import SOURCE, build_graph, with_compression
from partition.split import (
    SplitModels,
    model_outputs,
    read_split_yaml,
    run_split,
    split_model,
)
from tests.support.cli import run_cli
from tests.support.splitnet import SplitNet

WIDTH = 8
WIRE = {"fp16": ("::fp16", TensorProto.FLOAT16), "int8": ("::u8", TensorProto.UINT8)}


# ---------------------------------------------------------------- small models


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], inits: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # ORT 1.31 refuses onnx 1.23's default IR 14
    onnx.checker.check_model(model)
    return model


def _float(name: str, shape: list[int | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def skip_model() -> onnx.ModelProto:
    """``early`` is a final output the cloud also reads; ``late`` needs the raw input ``x``."""
    weights = np.random.default_rng(7).standard_normal((1, WIDTH)).astype(np.float32)
    k = numpy_helper.from_array(weights, "k")
    return _model(
        [helper.make_node("Relu", ["x"], ["early"], name="relu"),
         helper.make_node("Mul", ["early", "k"], ["m"], name="mul"),
         helper.make_node("Sigmoid", ["m"], ["s"], name="sig"),
         helper.make_node("Add", ["s", "x"], ["late"], name="add")],
        [_float("x", [1, WIDTH])], [_float("late", [1, WIDTH]), _float("early", [1, WIDTH])],
        [k])


def int64_model() -> onnx.ModelProto:
    """Edge {relu, shape, flat} sends float ``f`` and int64 ``sh`` to the cloud."""
    return _model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Shape", ["a"], ["sh"], name="shape"),
         helper.make_node("Flatten", ["a"], ["f"], name="flat", axis=0),
         helper.make_node("Tanh", ["f"], ["t"], name="tanh"),
         helper.make_node("Reshape", ["t", "sh"], ["y"], name="reshape")],
        [_float("x", [2, WIDTH])], [_float("y", [2, WIDTH])], [])


def identity_tail_model() -> onnx.ModelProto:
    """``a = 3 x`` on the edge, ``y = Identity(a)`` in the cloud: y shows the wire's error."""
    three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    return _model(
        [helper.make_node("Mul", ["x", "three"], ["a"], name="scale"),
         helper.make_node("Identity", ["a"], ["y"], name="ident")],
        [_float("x", [1, 64])], [_float("y", [1, 64])], [three])


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _feeds(shape: tuple[int, ...], count: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` standard normal inputs ``x`` (both signs, so Relu matters)."""
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def _io(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Element types of a model's inputs and outputs by name."""
    model = onnx.load(str(path))
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    return types, {v.name: v.type.tensor_type.elem_type for v in model.graph.output}


def _inits(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------- fp16 / int8 interfaces


@pytest.mark.parametrize("mode", ["fp16", "int8"])
def test_edge_made_float_crosses_compressed_and_raw_input_does_not(
    mode: str, tmp_path: Path
) -> None:
    path = _save(skip_model(), tmp_path / "skip.onnx")
    feeds = _feeds((1, WIDTH))
    split = compress_split(split_model(path, {"relu"}, tmp_path / "out"), mode, feeds)
    suffix, elem = WIRE[mode]
    assert split.cut_tensors == ("early", "x")
    assert split.tail_inputs == ("early" + suffix, "x")
    # ``early`` is a final output too: the device keeps it in float beside the wire copy.
    assert set(split.head_outputs) == {"early", "early" + suffix}
    head_in, head_out = _io(split.head)
    tail_in, _ = _io(split.tail)
    assert head_out == {"early": TensorProto.FLOAT, "early" + suffix: elem}
    assert tail_in == {"early" + suffix: elem, "x": TensorProto.FLOAT}
    assert list(tail_in) == list(split.tail_inputs)
    assert head_in == {"x": TensorProto.FLOAT}
    for feed in feeds:
        want = model_outputs(path, feed)
        got = run_split(split, feed)
        np.testing.assert_array_equal(got["early"], want["early"])  # not degraded on the device
        np.testing.assert_allclose(got["late"], want["late"], rtol=1e-3, atol=2e-2)


def test_fp16_reproduces_the_model_and_really_is_fp16(tmp_path: Path) -> None:
    path = _save(skip_model(), tmp_path / "skip.onnx")
    plain = split_model(path, {"relu", "mul"}, tmp_path / "out")
    assert plain.head_outputs == ("m", "early")
    split = compress_split(plain, "fp16", [])  # fp16 needs no samples
    assert split.head_outputs == ("early", "m::fp16")  # plain m no longer leaves the head
    assert split.tail_inputs == ("m::fp16", "x")
    feeds = _feeds((1, WIDTH), 8)
    for feed in feeds:
        want = model_outputs(path, feed)
        got = run_split(split, feed)
        np.testing.assert_allclose(got["late"], want["late"], rtol=1e-3, atol=1e-4)
        np.testing.assert_array_equal(got["early"], want["early"])
    # What crosses is m rounded to half precision, bit for bit.
    import onnxruntime as ort

    head = ort.InferenceSession(str(split.head), providers=["CPUExecutionProvider"])
    wire = dict(zip(split.head_outputs, head.run(list(split.head_outputs), feeds[0]),
                    strict=True))
    m = np.maximum(feeds[0]["x"], 0) * _inits(path)["k"]
    assert wire["m::fp16"].dtype == np.float16
    np.testing.assert_array_equal(wire["m::fp16"], m.astype(np.float16))


def test_only_float32_cut_tensors_are_compressed(tmp_path: Path) -> None:
    path = _save(int64_model(), tmp_path / "int64.onnx")
    split = split_model(path, {"relu", "shape", "flat"}, tmp_path / "out")
    assert split.cut_tensors == ("f", "sh")
    split = compress_split(split, "int8", _feeds((2, WIDTH)))
    assert split.tail_inputs == ("f::u8", "sh")
    tail_in, _ = _io(split.tail)
    assert tail_in == {"f::u8": TensorProto.UINT8, "sh": TensorProto.INT64}
    feed = _feeds((2, WIDTH), 1, seed=1)[0]
    got = run_split(split, feed)["y"]
    np.testing.assert_allclose(got, model_outputs(path, feed)["y"], atol=0.02)


@pytest.mark.parametrize("mode", ["none", "fp16", "int8"])
def test_all_edge_and_all_cloud_are_left_alone(mode: str, tmp_path: Path) -> None:
    model = skip_model()
    path = _save(model, tmp_path / "skip.onnx")
    cloud = split_model(path, set(), tmp_path / "cloud")
    edge = split_model(path, {n.name for n in model.graph.node}, tmp_path / "edge")
    tail_bytes, head_bytes = cloud.tail.read_bytes(), edge.head.read_bytes()
    assert compress_split(cloud, mode, _feeds((1, WIDTH))) == cloud
    assert compress_split(edge, mode, _feeds((1, WIDTH))) == edge
    assert cloud.tail.read_bytes() == tail_bytes and edge.head.read_bytes() == head_bytes
    assert _io(cloud.tail)[0] == {"x": TensorProto.FLOAT}  # the raw frame crosses as is


def test_none_leaves_the_split_files_untouched(tmp_path: Path) -> None:
    path = _save(skip_model(), tmp_path / "skip.onnx")
    split = split_model(path, {"relu", "mul"}, tmp_path / "out")
    before = split.head.read_bytes(), split.tail.read_bytes()
    assert compress_split(split, "none", []) is split
    assert (split.head.read_bytes(), split.tail.read_bytes()) == before


# ---------------------------------------------------------------- int8 scales


@pytest.fixture
def int8_split(tmp_path: Path) -> tuple[Path, SplitModels, list[dict[str, np.ndarray]]]:
    path = _save(identity_tail_model(), tmp_path / "ident.onnx")
    samples = _feeds((1, 64), 5)
    split = compress_split(split_model(path, {"scale"}, tmp_path / "out"), "int8", samples)
    return path, split, samples


def test_int8_wire_is_uint8_with_scale_and_zero_in_both_halves(int8_split: Any) -> None:
    _, split, samples = int8_split
    assert split.head_outputs == ("a::u8",) and split.tail_inputs == ("a::u8",)
    assert _io(split.head)[1] == {"a::u8": TensorProto.UINT8}
    assert _io(split.tail)[0] == {"a::u8": TensorProto.UINT8}
    head, tail = _inits(split.head), _inits(split.tail)
    for params in (head, tail):
        assert params["a::scale"].dtype == np.float32 and params["a::scale"].shape == ()
        assert params["a::zero"].dtype == np.uint8 and params["a::zero"].shape == ()
    assert head["a::scale"] == tail["a::scale"] and head["a::zero"] == tail["a::zero"]
    # The range is the samples' activations (3 x), widened to include 0.
    acts = np.concatenate([3 * s["x"].ravel() for s in samples])
    lo, hi = min(float(acts.min()), 0.0), max(float(acts.max()), 0.0)
    scale, zero = float(head["a::scale"]), int(head["a::zero"])
    assert scale == pytest.approx((hi - lo) / 255, rel=1e-6)
    assert zero == round(-lo / scale)
    assert (0 - zero) * scale <= acts.min() + scale / 2
    assert (255 - zero) * scale >= acts.max() - scale / 2


@pytest.mark.parametrize(("sign", "zero"), [(1, 0), (-1, 255)])
def test_int8_range_always_holds_zero_exactly(sign: int, zero: int, tmp_path: Path) -> None:
    """One-signed activations: the range is stretched to 0, so a 0 (ReLU's) crosses exactly."""
    path = _save(identity_tail_model(), tmp_path / "ident.onnx")
    samples = [{"x": sign * (np.abs(f["x"]) + 1)} for f in _feeds((1, 64), 3, seed=2)]
    split = compress_split(split_model(path, {"scale"}, tmp_path / "out"), "int8", samples)
    params = _inits(split.head)
    far = max(float(np.max(np.abs(3 * s["x"]))) for s in samples)
    assert int(params["a::zero"]) == zero
    assert float(params["a::scale"]) == pytest.approx(far / 255, rel=1e-6)
    nothing = {"x": np.zeros((1, 64), np.float32)}
    np.testing.assert_array_equal(run_split(split, nothing)["y"], nothing["x"])


def test_int8_values_within_range_come_back_within_half_a_step(int8_split: Any) -> None:
    path, split, samples = int8_split
    scale = float(_inits(split.head)["a::scale"])
    for sample in samples + [{"x": 0.7 * s["x"]} for s in samples]:
        want = model_outputs(path, sample)["y"]
        got = run_split(split, sample)["y"]
        assert np.max(np.abs(got - want)) <= scale / 2 + 1e-6
        assert not np.array_equal(got, want)  # it really went through 256 levels


def test_int8_values_beyond_the_range_saturate(int8_split: Any) -> None:
    path, split, samples = int8_split
    params = _inits(split.head)
    scale, zero = float(params["a::scale"]), int(params["a::zero"])
    big = {"x": 10 * samples[0]["x"]}
    got = run_split(split, big)["y"]
    assert got.max() == pytest.approx((255 - zero) * scale, rel=1e-6)
    assert got.min() == pytest.approx((0 - zero) * scale, rel=1e-6, abs=1e-6)
    assert np.max(np.abs(model_outputs(path, big)["y"])) > 3 * np.max(np.abs(got))


def test_int8_without_samples_is_a_usage_error_and_changes_nothing(tmp_path: Path) -> None:
    path = _save(identity_tail_model(), tmp_path / "ident.onnx")
    split = split_model(path, {"scale"}, tmp_path / "out")
    before = split.head.read_bytes(), split.tail.read_bytes()
    with pytest.raises(UsageError, match="sample") as error:
        compress_split(split, "int8", [])
    assert "\n" not in str(error.value)
    assert (split.head.read_bytes(), split.tail.read_bytes()) == before


def test_int8_on_real_frames_at_the_stem_keeps_cosine(splitnet: SplitNet, tmp_path: Path) -> None:
    model = onnx.load(str(splitnet.onnx))
    names = [n.name for n in model.graph.node]
    ops = [n.op_type for n in model.graph.node]
    stem = set(names[: ops.index("MaxPool") + 1])  # conv, relu, pool: 12x smaller than a frame
    assert len(stem) == 3
    frames = np.load(splitnet.samples)
    calib = [{"frame": f[None]} for f in frames[:16]]
    plain = split_model(splitnet.onnx, stem, tmp_path / "out")
    (cut,) = plain.cut_tensors
    import onnxruntime as ort

    float_bytes = ort.InferenceSession(str(plain.head), providers=["CPUExecutionProvider"]).run(
        [cut], calib[0])[0].nbytes
    split = compress_split(plain, "int8", calib)
    assert split.tail_inputs == (cut + "::u8",)
    head = ort.InferenceSession(str(split.head), providers=["CPUExecutionProvider"])
    wire = head.run([cut + "::u8"], calib[0])[0]
    assert wire.dtype == np.uint8 and wire.nbytes * 4 == float_bytes
    worst = 1.0
    for frame in frames[16:]:  # held out from calibration
        feed = {"frame": frame[None]}
        worst = min(worst, _cosine(run_split(split, feed)["logits"],
                                   model_outputs(splitnet.onnx, feed)["logits"]))
    assert worst >= 0.99


# ---------------------------------------------------------------- graph sizes and modes


def test_with_compression_shrinks_node_made_float32_only_not_outputs(tmp_path: Path) -> None:
    graph = build_graph(_save(int64_model(), tmp_path / "int64.onnx"), {}, {})
    assert with_compression(graph, "none") is graph
    by_name = {t.name: t for t in graph.tensors}
    assert by_name["x"].producer == SOURCE and by_name["x"].dtype == "float32"
    assert by_name["sh"].dtype == "int64" and by_name["sh"].bytes == 16
    assert by_name["f"].dtype == "float32" and by_name["f"].bytes == 4 * 2 * WIDTH
    for mode, factor in (("fp16", 2), ("int8", 4)):
        small = with_compression(graph, mode)
        assert small.nodes == graph.nodes
        assert [t.name for t in small.tensors] == [t.name for t in graph.tensors]
        for before, after in zip(graph.tensors, small.tensors, strict=True):
            if before.producer == SOURCE or before.dtype != "float32" or before.is_output:
                assert after.bytes == before.bytes, (mode, before)  # outputs return in float
            else:
                assert before.bytes > 0 and after.bytes * factor == before.bytes, (mode, before)
        assert small.tensors != graph.tensors


@pytest.mark.parametrize("call", [check_mode, wire_bytes_factor,
                                  lambda mode: compress_split(None, mode, [])],  # type: ignore
                         ids=["check_mode", "wire_bytes_factor", "compress_split"])
def test_unknown_mode_is_a_one_line_usage_error(call: Any) -> None:
    with pytest.raises(UsageError) as error:
        call("bogus")
    message = str(error.value)
    assert "'bogus'" in message and "none, fp16, int8" in message and "\n" not in message


def test_wire_bytes_factor() -> None:
    assert [wire_bytes_factor(m) for m in ("none", "fp16", "int8")] == [1.0, 0.5, 0.25]


def test_partition_refuses_an_unknown_mode_before_writing(tmp_path: Path) -> None:
    path = _save(skip_model(), tmp_path / "skip.onnx")
    out = tmp_path / "split"
    with pytest.raises(UsageError, match="'gzip'"):
        partition(path, load_profile("rpi4"), load_profile("cloud-t4"), out,
                  PartitionOptions(compression="gzip"))
    assert not out.exists()


# ---------------------------------------------------------------- through the CLI


@pytest.fixture(scope="module")
def cli_runs(splitnet: SplitNet,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """The same ``edge partition`` on splitnet with each compression."""
    root = tmp_path_factory.mktemp("compress-cli")
    runs = {}
    for mode in ("none", "fp16", "int8"):
        out = root / mode
        result = run_cli("partition", str(splitnet.onnx), "--profile", "rpi-zero-2w",
                         "--cloud", "cloud-t4", "--compress", mode, "--calib",
                         str(splitnet.samples), "-o", str(out), "--json")
        assert result.status == 0, result.stderr
        runs[mode] = result.json(), out
    return runs


def test_cli_reports_the_compression_and_its_fidelity(cli_runs: dict) -> None:
    floors = {"fp16": 0.9999, "int8": 0.99}
    none, _ = cli_runs["none"]
    assert none["compression"] == "none" and none["compressed_cosine"] is None
    for mode, floor in floors.items():
        report, out = cli_runs[mode]
        assert report["compression"] == mode and read_split_yaml(out).compression == mode
        assert floor <= report["compressed_cosine"] <= 1.0 + 1e-9
        assert report["max_abs_diff"] <= 1e-5  # the uncompressed halves were exact first


def _split_cuts(report: dict) -> dict[tuple[str, ...], dict]:
    return {tuple(c["cut"]): c for c in report["cuts"] if c["kind"] == "split"}


@pytest.mark.parametrize(("mode", "factor"), [("fp16", 2), ("int8", 4)])
def test_cli_split_cut_sends_a_fraction_of_the_float_bytes(
    cli_runs: dict, mode: str, factor: int
) -> None:
    plain, _ = cli_runs["none"]
    report, out = cli_runs[mode]
    compressed, floats = _split_cuts(report), _split_cuts(plain)
    assert compressed and set(compressed) <= set(floats)
    for tensors, cut in compressed.items():
        assert cut["up_bytes"] > 0 and cut["up_bytes"] * factor == floats[tensors]["up_bytes"]
    cloud = next(c for c in report["cuts"] if c["kind"] == "all-cloud")
    plain_cloud = next(c for c in plain["cuts"] if c["kind"] == "all-cloud")
    assert cloud["up_bytes"] == plain_cloud["up_bytes"] == 3 * 96 * 96 * 4  # the raw frame
    # split.yaml's wire description agrees with the report for every split cut.
    plan = read_split_yaml(out)
    suffix = WIRE[mode][0]
    for option in plan.cuts:
        if option.kind != "split":
            continue
        assert all(w == t + suffix for t, w in
                   zip(option.split.cut_tensors, option.split.tail_inputs, strict=True))
        assert option.up_bytes == compressed[tuple(option.split.cut_tensors)]["up_bytes"]
    if report["chosen"]["kind"] == "split":
        dtype = {"fp16": "float16", "int8": "uint8"}[mode]
        assert [c["dtype"] for c in plan.cut] == [dtype] * len(plan.cut)
        chosen = next(c for c in report["cuts"] if c["id"] == report["chosen"]["cut_id"])
        assert sum(c["bytes"] for c in plan.cut) == chosen["up_bytes"]


def test_cli_int8_split_keeps_cosine_on_held_out_frames(cli_runs: dict,
                                                        splitnet: SplitNet) -> None:
    report, out = cli_runs["int8"]
    plan = read_split_yaml(out)
    frames = np.load(splitnet.samples)[16:]  # --calib uses the first 16 for the scales
    splits = [c for c in plan.cuts if c.kind == "split"]
    assert splits
    for option in splits:
        for frame in frames[::4]:
            feed = {"frame": frame[None]}
            got = run_split(option.split, feed)["logits"]
            want = model_outputs(splitnet.onnx, feed)["logits"]
            assert _cosine(got, want) >= 0.99, option.id


def test_cli_down_bytes_are_the_float_outputs_whatever_the_compression(cli_runs: dict) -> None:
    plain, _ = cli_runs["none"]
    down = {c["kind"]: c["down_bytes"] for c in plain["cuts"]}
    assert down["all-cloud"] == 2 * 4  # float32 logits [1, 2] come back
    for mode in ("fp16", "int8"):
        report, _ = cli_runs[mode]
        assert {c["kind"]: c["down_bytes"] for c in report["cuts"]} == down, mode
