#!/usr/bin/env python
"""Where int8 is slower than fp32 on ONNX Runtime here, and whether float islands pay (issue 15).

    python bench/mixed_ort.py [--threads 1] [--rounds 12] [--out bench/results/mixed-ort.json]

Part 1, layers: one-layer models (a conv or a GEMV, then ReLU; random weights) as fp32 and as
ONNX Runtime ``quantize_static`` QDQ int8 (per-channel s8 weights, u8 activations, calibrated
on 8 random inputs); ratio int8 / fp32. A lone int8 layer pays a Quantize on its input and a
Dequantize on its output, as a float island inside an int8 model pays them at its borders.
Part 2, plans: peers.py's MobileNetV2 (``cnn``) and the zoo's openWakeWord embedding CNN
(``oww``), batch 1: fp32, all-int8, and int8 with the layers part 1 finds slow kept float
(``nodes_to_exclude``: the depthwise convs, the stem, the low-channel first convs). A plan pays
only if it beats both all-int8 and fp32. Every set is timed in one process, in ``--rounds``
interleaved rounds (medians), at ``--threads``. Speed only: nothing here is verified.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import provenance
from peerbench.builds import calib_reader, input_name
from peerbench.common import CACHE, CNN_RECIPE
from peerbench.report import machine

WORK = CACHE / "mixed-ort"
# name: (c_in, c_out, size, kernel, group), or (n_in, n_out) for a GEMV
LAYERS: dict[str, tuple[int, ...]] = {
    "depthwise 3x3, 96 ch, 56x56": (96, 96, 56, 3, 96),
    "depthwise 3x3, 144 ch, 28x28": (144, 144, 28, 3, 144),
    "depthwise 5x5, 240 ch, 14x14": (240, 240, 14, 5, 240),
    "stem 3x3, 3 -> 32, 112x112": (3, 32, 112, 3, 1),
    "pointwise 1x1, 96 -> 24, 56x56": (96, 24, 56, 1, 1),
    "pointwise 1x1, 144 -> 144, 28x28": (144, 144, 28, 1, 1),
    "conv 3x3, 64 -> 64, 28x28": (64, 64, 28, 3, 1),
    "GEMV 1024 -> 1024": (1024, 1024),
    "GEMV 1280 -> 1000": (1280, 1000),
}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    layers = in_child(build_layers)
    plans = {model: in_child(build_plans, model) for model in ("cnn", "oww")}
    doc = {"threads": args.threads, "rounds": args.rounds, "machine": machine(),
           "layers": _timed_pairs(layers, args), "plans": {
               model: _plan_results(found, args) for model, found in plans.items()},
           "provenance": provenance.record("bench/mixed_ort.py", argv)}
    doc["verdict"] = _verdict(doc["plans"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"layers": doc["layers"], "verdict": doc["verdict"]}, indent=1))
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("bench/results/mixed-ort.json"))
    return ap.parse_args(argv)


def in_child(fn: Any, *args: Any) -> Any:
    """``fn`` in a fresh process: torch and the quantizer stay out of the timing process."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


# ---------------------------------------------------------------- building (child processes)


def build_layers() -> dict[str, dict[str, str]]:
    """Each one-layer model as fp32 and int8 files."""
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    built = {}
    for k, (name, dims) in enumerate(LAYERS.items()):
        fp32 = WORK / f"layer{k}.onnx"
        shape = _layer_model(dims, rng, fp32)
        built[name] = {"fp32": str(fp32),
                       "int8": _quantized(fp32, _random_inputs(shape, rng), [], f"layer{k}")}
    return built


def _layer_model(dims: tuple[int, ...], rng: np.random.Generator, out: Path) -> tuple[int, ...]:
    """A conv (c_in, c_out, size, kernel, group) or a GEMV (n_in, n_out), then ReLU."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if len(dims) == 2:
        shape, w = (1, dims[0]), rng.normal(0, 0.05, dims)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"])]
        extra = []
    else:
        c_in, c_out, size, k, group = dims
        shape, w = (1, c_in, size, size), rng.normal(0, 0.1, (c_out, c_in // group, k, k))
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, pads=[k // 2] * 4)]
        extra = [numpy_helper.from_array(rng.normal(0, 0.1, c_out).astype(np.float32), "b")]
    graph = helper.make_graph(
        [*nodes, helper.make_node("Relu", ["c"], ["y"])], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w"), *extra])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), out)
    return shape


def _random_inputs(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """8 calibration inputs, stacked."""
    return rng.normal(size=(8, *shape[1:])).astype(np.float32)


def build_plans(model: str) -> dict[str, Any]:
    """The model at batch 1 as fp32, all-int8 and int8 with float islands."""
    import onnx

    sys.path.insert(0, str(Path(__file__).parent))
    files = _model_files(model)
    fp32 = WORK / f"{model}.onnx"
    proto = _batch_one(onnx.load(files["onnx"]))
    onnx.save(proto, fp32)
    calib = np.load(files["calib"]).astype(np.float32)[:32]
    islands = _islands(model, proto)
    paths = {"fp32": str(fp32)} | {
        plan: _quantized(fp32, calib, floats, f"{model}-{plan}")
        for plan, floats in islands.items()}
    return {"files": {k: v for k, v in files.items() if k in ("onnx", "entry", "package")},
            "paths": paths, "kept_float": {p: len(f) for p, f in islands.items()},
            "input": proto.graph.input[0].name, "sample": files["calib"]}


def _model_files(model: str) -> dict[str, Any]:
    if model == "cnn":
        from peerbench.models import build_cnn

        return build_cnn(CACHE / CNN_RECIPE)
    from peerbench.zoomodels import build_zoo

    return build_zoo(model, CACHE / model)


def _batch_one(proto: Any) -> Any:
    """The first input's batch dimension pinned to 1, shapes inferred."""
    from onnx import shape_inference

    dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
    dim.ClearField("dim_param")
    dim.dim_value = 1
    return shape_inference.infer_shapes(proto)


def _islands(model: str, proto: Any) -> dict[str, list[str]]:
    """Each plan's Conv nodes kept float ([] is all-int8)."""
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    depthwise = [n.name for n in convs if _group(n) > 1]
    if model == "cnn":
        stem = [convs[0].name]
        return {"int8": [], "int8, depthwise float": depthwise, "int8, stem float": stem,
                "int8, stem + depthwise float": stem + depthwise}
    weights = {i.name: list(i.dims) for i in proto.graph.initializer}
    narrow = [n.name for n in convs if weights[n.input[1]][1] <= 24]  # few input channels
    return {"int8": [], "int8, first 2 convs float": [c.name for c in convs[:2]],
            f"int8, {len(narrow)} narrow convs float": narrow}


def _group(node: Any) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _quantized(fp32: Path, calib: np.ndarray, floats: list[str], tag: str) -> str:
    """ONNX Runtime's static QDQ int8 of ``fp32`` calibrated on the stacked ``calib``,
    ``floats`` left out."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    out = WORK / f"{tag.replace(' ', '_').replace(',', '').replace('+', 'and')}.int8.onnx"
    quantize_static(str(fp32), str(out), calib_reader(input_name(fp32), calib),
                    quant_format=QuantFormat.QDQ, per_channel=True, nodes_to_exclude=floats,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return str(out)


# ---------------------------------------------------------------- timing (this process)


def _timed_pairs(layers: dict[str, dict[str, str]], args: argparse.Namespace) -> list[dict]:
    rows = []
    for name, paths in layers.items():
        ms = _interleaved(paths, _layer_feed(paths["fp32"]), args)
        rows.append({"layer": name, "fp32_ms": ms["fp32"], "int8_ms": ms["int8"],
                     "int8_over_fp32": round(ms["int8"] / ms["fp32"], 3)})
    return rows


def _layer_feed(path: str) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    spec = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()[0]
    return {spec.name: np.random.default_rng(1).normal(size=spec.shape).astype(np.float32)}


def _plan_results(found: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    feed = {found["input"]: np.load(found["sample"]).astype(np.float32)[:1]}
    ms = _interleaved(found["paths"], feed, args)
    int8, fp32 = ms["int8"], ms["fp32"]
    rows = [{"plan": plan, "p50_ms": value, "over_int8": round(value / int8, 3),
             "over_fp32": round(value / fp32, 3), "kept_float": found["kept_float"].get(plan, 0)}
            for plan, value in ms.items()]
    return {"model": found["files"], "rows": rows}


def _interleaved(paths: dict[str, str], feed: dict[str, np.ndarray],
                 args: argparse.Namespace) -> dict[str, float]:
    """Median ms per call of each model, timed in turn in every round."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {k: ort.InferenceSession(p, options, providers=["CPUExecutionProvider"])
                for k, p in paths.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(args.rounds):
        for name, session in sessions.items():
            times[name].append(_block(session, feed))
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def _block(session: Any, feed: dict[str, np.ndarray], calls: int = 20) -> float:
    """Mean ms of ``calls`` runs after 3 warm-up runs."""
    for _ in range(3):
        session.run(None, feed)
    start = time.perf_counter()
    for _ in range(calls):
        session.run(None, feed)
    return (time.perf_counter() - start) / calls * 1e3


MARGIN = 0.97  # a plan pays when it is at least 3% faster than both (noise: ~1-2%)


def _verdict(plans: dict[str, Any]) -> dict[str, Any]:
    """Per model: the fastest plan with float islands, and whether it beat both all-int8 and
    fp32 by the margin."""
    found = {}
    for model, result in plans.items():
        mixed = [r for r in result["rows"] if r["kept_float"]]
        best = min(mixed, key=lambda r: r["p50_ms"])
        found[model] = {"fastest_mixed": best["plan"], "over_int8": best["over_int8"],
                        "over_fp32": best["over_fp32"], "margin": MARGIN,
                        "pays": max(best["over_int8"], best["over_fp32"]) <= MARGIN}
    return found


if __name__ == "__main__":
    sys.exit(main())
