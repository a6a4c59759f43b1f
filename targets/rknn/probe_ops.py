"""Where rknn-toolkit2's compiler places each common ONNX operator: one tiny float graph per
operator (a 1x8x8x8 NCHW tensor through it), built fp16 for a platform, its layer table read.
The table in targets.rknn.ops (CPU_OPS) was made with this script; rerun it after a toolkit
upgrade, in the toolchain's environment:

    edge toolchains install rknn-toolkit2
    <toolchain>/bin/python targets/rknn/probe_ops.py rk3588 placement.json

Standard library, onnx, numpy and rknn.api only (the toolchain's).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import child  # noqa: E402 - beside this script, in the toolchain's environment

SHAPE = [1, 8, 8, 8]
#: op -> (attributes, constant second input shape or None, output shape or None: the input's)
UNARY = ("Abs", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "HardSigmoid", "HardSwish",
         "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
         "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Tanh", "Identity", "Celu")
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu")


def graphs():
    """(op, ONNX model) for each probed operator."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)

    def model(nodes, out_shape=None, inits=()):
        graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
                             [h.make_tensor_value_info("y", T.FLOAT, out_shape or SHAPE)],
                             list(inits))
        proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
        proto.ir_version = 8
        return proto

    def const(name, shape, low=0.5):
        return nh.from_array((rng.random(shape) + low).astype(np.float32), name)

    for op in UNARY:
        yield op, model([h.make_node(op, ["x"], ["y"])])
    for op in BINARY:
        yield op, model([h.make_node(op, ["x", "c"], ["y"])], inits=[const("c", [1, 8, 1, 1])])
    yield "Conv", model([h.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)],
                        inits=[const("w", [8, 8, 3, 3], -0.5)])
    yield "ConvTranspose", model([h.make_node("ConvTranspose", ["x", "w"], ["y"], pads=[1] * 4)],
                                 inits=[const("w", [8, 8, 3, 3], -0.5)])
    yield "Clip", model([h.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                        inits=[const("lo", [], -1.0), const("hi", [], 5.0)])
    for op in ("MaxPool", "AveragePool"):
        yield op, model([h.make_node(op, ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                        [1, 8, 4, 4])
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        yield op, model([h.make_node(op, ["x"], ["y"])], [1, 8, 1, 1])
    for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL2", "ReduceProd"):
        axes = [nh.from_array(np.array([1], np.int64), "axes")]
        yield op, model([h.make_node(op, ["x", "axes"], ["y"], keepdims=1)], [1, 1, 8, 8], axes)
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        yield op, model([h.make_node(op, ["x"], ["y"], axis=1)])
    yield "BatchNormalization", model(
        [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        inits=[const(n, [8]) for n in "sbmv"])
    yield "InstanceNormalization", model(
        [h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
        inits=[const(n, [8]) for n in "sb"])
    yield "LayerNormalization", model(
        [h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
        inits=[const(n, [8]) for n in "sb"])
    yield "MatMul", model([h.make_node("MatMul", ["x", "w"], ["y"])],
                          inits=[const("w", [8, 8], -0.5)])
    yield "Transpose", model([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])])
    shape = nh.from_array(np.array([1, 64, 8], np.int64), "shape")
    yield "Reshape", model([h.make_node("Reshape", ["x", "shape"], ["y"])], [1, 64, 8], [shape])
    yield "Flatten", model([h.make_node("Flatten", ["x"], ["y"])], [1, 512])
    yield "Concat", model([h.make_node("Concat", ["x", "x"], ["y"], axis=1)], [1, 16, 8, 8])
    yield "DepthToSpace", model([h.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)],
                                [1, 2, 16, 16])
    yield "SpaceToDepth", model([h.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)],
                                [1, 32, 4, 4])
    starts, ends = (nh.from_array(np.array([v], np.int64), n) for n, v in (("s", 1), ("e", 5)))
    axes1 = nh.from_array(np.array([1], np.int64), "a")
    yield "Slice", model([h.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [1, 4, 8, 8],
                         [starts, ends, axes1])
    pads = nh.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")
    yield "Pad", model([h.make_node("Pad", ["x", "p"], ["y"])], [1, 8, 10, 10], [pads])
    scales = nh.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
    yield "Resize", model([h.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
                          [1, 8, 16, 16], [scales])
    index = nh.from_array(np.array([0, 2, 4], np.int64), "i")
    yield "Gather", model([h.make_node("Gather", ["x", "i"], ["y"], axis=1)], [1, 3, 8, 8],
                          [index])
    reps = nh.from_array(np.array([1, 2, 1, 1], np.int64), "r")
    yield "Tile", model([h.make_node("Tile", ["x", "r"], ["y"])], [1, 16, 8, 8], [reps])
    yield "LRN", model([h.make_node("LRN", ["x"], ["y"], size=3)])


def placement(op: str, proto, platform: str, scratch: str) -> list[tuple[str, str]]:
    """(rknn op type, unit) of each layer the compiler made of ``proto``."""
    import onnx
    from rknn.api import RKNN

    path = os.path.join(scratch, f"{op}.onnx")
    onnx.save(proto, path)
    log = os.path.join(scratch, f"{op}.log")
    rknn = RKNN(verbose=True)
    try:
        rknn.config(target_platform=platform)
        if rknn.load_onnx(model=path) != 0:
            return [("load_onnx failed", "")]
        with child._stdout_to(log):
            try:
                status = rknn.build(do_quantization=False)
            except Exception as exc:  # noqa: BLE001 - the toolkit raises on some graphs
                return [(f"build raised {type(exc).__name__}", "")]
        if status != 0:
            return [("build failed", "")]
    finally:
        rknn.release()
    with open(log, encoding="utf-8", errors="replace") as handle:
        rows = [m.groups() for m in map(child._ROW.search, handle) if m]
    return [(kind, unit) for kind, unit in rows if kind not in child._BOOKENDS]


def main(argv: list[str]) -> int:
    platform, out = argv[1], argv[2]
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        for op, proto in graphs():
            found[op] = placement(op, proto, platform, scratch)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"platform": platform, "placement": found}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
