"""Small real ONNX models whose int8 breaks one output in a way one overall cosine hides.

Each is built with onnx.helper and quantized for real by ONNX Runtime (static QDQ int8, one
scale per activation tensor): the failure is int8's own, not a simulated one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ctc_inputs", "ctc_model", "detector_model", "two_scale_model", "uniform_inputs"]


def _save(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
          outputs: list[onnx.ValueInfoProto], inits: dict[str, np.ndarray], path: Path) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _io(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def two_scale_model(path: Path, seed: int = 1) -> Path:
    """x [1, 8] -> one MatMul -> Split: 'pixels' (~100s) and 'metres' (~0.01). int8 gives
    the MatMul's output one scale, so 'metres' rounds to zero."""
    w = np.random.default_rng(seed).normal(size=(8, 16)).astype(np.float32)
    w[:, :8] *= 100.0
    w[:, 8:] *= 0.01
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Split", ["y", "sizes"], ["pixels", "metres"], axis=1,
                              name="split")]
    return _save(nodes, [_io("x", [1, 8])], [_io("pixels", [1, 8]), _io("metres", [1, 8])],
                 {"w": w, "sizes": np.array([8, 8], np.int64)}, path)


def detector_model(path: Path, seed: int = 1, anchors: int = 32, classes: int = 3) -> Path:
    """x [1, 16] -> 'out' [1, anchors, 4 + classes]: YOLO rows (cx, cy, w, h in 0-320, then
    sigmoid class scores). int8 quantizes the Concat with one scale (~1.25): every score
    becomes 0 or 1.25."""
    rng = np.random.default_rng(seed)
    wb = rng.normal(size=(16, anchors * 4)).astype(np.float32)
    ws = rng.normal(size=(16, anchors * classes)).astype(np.float32) - 0.5
    nodes = [helper.make_node("MatMul", ["x", "wb"], ["b0"]),
             helper.make_node("Sigmoid", ["b0"], ["b1"]),
             helper.make_node("Mul", ["b1", "s320"], ["b2"]),
             helper.make_node("Reshape", ["b2", "shb"], ["boxes"]),
             helper.make_node("MatMul", ["x", "ws"], ["s0"]),
             helper.make_node("Sigmoid", ["s0"], ["s1"]),
             helper.make_node("Reshape", ["s1", "shs"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["out"], axis=2)]
    inits = {"wb": wb, "ws": ws, "s320": np.array(320.0, np.float32),
             "shb": np.array([1, anchors, 4], np.int64),
             "shs": np.array([1, anchors, classes], np.int64)}
    return _save(nodes, [_io("x", [1, 16])], [_io("out", [1, anchors, 4 + classes])], inits,
                 path)


def ctc_model(path: Path, frames: int = 24, classes: int = 6) -> Path:
    """x [1, T, C] one-hot frames -> logits 8 x x -> Softmax 'ctc_probs' [1, T, C]. The last
    class never fires but its logits reach -300, so int8's one logit scale (~2.4) merges
    near-ties between characters 1 and 2."""
    w = 8.0 * np.eye(classes, dtype=np.float32)
    w[:, classes - 1] = -300.0
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["ctc_probs"], axis=-1)]
    return _save(nodes, [_io("x", [1, frames, classes])],
                 [_io("ctc_probs", [1, frames, classes])], {"w": w}, path)


def ctc_inputs(count: int, seed: int = 0, frames: int = 24, classes: int = 6) -> np.ndarray:
    """[count, 1, T, C] frames: mostly blank (0), characters 1-4, and in each sample one frame
    where 1 and 2 nearly tie (2 wins by 0.03 in about half of the samples)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((count, 1, frames, classes), np.float32)
    tokens = rng.choice([0, 0, 0, 1, 2, 3, 4], size=(count, frames))
    x[np.arange(count)[:, None], 0, np.arange(frames)[None, :], tokens] = 1.0
    tie = rng.integers(0, frames, size=count)
    x[np.arange(count), 0, tie, :] = 0.0
    x[np.arange(count), 0, tie, 1] = 1.0
    x[np.arange(count), 0, tie, 2] = 1.0 + rng.choice([-0.03, 0.03], size=count)
    return x


def uniform_inputs(count: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """[count, *shape] inputs uniform in [0, 1] (calibration covers the held-out range)."""
    return np.random.default_rng(seed).uniform(size=(count, *shape)).astype(np.float32)
