"""keep_float reaches the convolutions OpenVINO's importer folds a BatchNormalization into.

convert_model folds Conv + BatchNormalization into one Convolution it names itself
(``Multiply_11074``) and an Add named after the BatchNormalization: names alone kept neither the
Conv's node nor the BatchNormalization's convolution float, so accuracy recovery of a CNN with
BatchNormalization (rapidocr's recognizer: 338 nodes float, 39 % of its strings still changed)
could never keep a convolution float. The importer's own ops now belong to the node their single
consumer belongs to, and an ONNX node fused into the next one finds that node's ops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.base import ConvertSettings
from targets.openvino import OpenVINOTarget

pytestmark = pytest.mark.slow  # three NNCF int8 conversions: the integration tier


def _conv_bn(path: Path) -> Path:
    """Two Conv (no bias) + BatchNormalization + Relu blocks."""
    rng = np.random.default_rng(0)
    inits, nodes, last = [], [], "x"
    for i in (1, 2):
        inits += [numpy_helper.from_array(rng.standard_normal((8, 3 if i == 1 else 8, 3, 3))
                                          .astype(np.float32), f"w{i}")]
        inits += [numpy_helper.from_array(v.astype(np.float32), f"{k}{i}") for k, v in
                  (("scale", rng.uniform(0.5, 2, 8)), ("bias", rng.standard_normal(8)),
                   ("mean", rng.standard_normal(8)), ("var", rng.uniform(0.5, 2, 8)))]
        nodes += [helper.make_node("Conv", [last, f"w{i}"], [f"c{i}"], name=f"conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"scale{i}", f"bias{i}",
                                                          f"mean{i}", f"var{i}"], [f"n{i}"],
                                   name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}")]
        last = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 16, 16])], [helper.make_tensor_value_info(
            last, TensorProto.FLOAT, [1, 8, 16, 16])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _quantized_convolutions(tmp_path: Path, keep: tuple[str, ...]) -> list[int]:
    """For each convolution of the int8 IR in order: how many FakeQuantize feed it."""
    import openvino as ov

    model = inspect_model(_conv_bn(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    calib = Dataset(feeds=tuple({"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
                                for _ in range(8)))
    file, _ = OpenVINOTarget().convert(model, "int8", calib=calib,
                                       workdir=tmp_path / f"w{len(keep)}{''.join(keep)}",
                                       settings=ConvertSettings(keep_float=keep))
    ir = ov.Core().read_model(str(file))
    return [sum(i.get_source_output().get_node().get_type_name() == "FakeQuantize"
                for i in op.inputs())
            for op in ir.get_ordered_ops() if op.get_type_name() == "Convolution"]


def test_without_keep_float_both_convolutions_are_int8(tmp_path: Path) -> None:
    assert _quantized_convolutions(tmp_path, ()) == [1, 1]  # activations (weights: int8 data)


def test_the_conv_node_keeps_its_folded_convolution_float(tmp_path: Path) -> None:
    assert _quantized_convolutions(tmp_path, ("conv1",)) == [0, 1]


def test_the_batchnorm_node_keeps_the_convolution_it_was_folded_into_float(
        tmp_path: Path) -> None:
    assert _quantized_convolutions(tmp_path, ("bn2",)) == [1, 0]
