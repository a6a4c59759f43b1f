"""Rows: one way to run the model each (edge's choice, a peer's default, the ORT fp32 baseline)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, Run

# ====================================================================== runners


@dataclass
class Row:
    """One benchmarked way to run the model."""

    name: str
    kind: str  # edge | peer | baseline
    runtime: str
    compute: str  # what the arithmetic runs in: fp32 | bf16 | int8 (+ float)
    how: str
    run: Run | None = None
    error: str | None = None
    build_s: float | None = None
    fidelity: dict[str, float | None] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)


def ort_run(path: str, threads: int) -> Run:
    """An ORT CPU session: default options except the thread count."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def ov_run(model: Any, threads: int, config: dict[str, Any] | None = None) -> tuple[Run, str]:
    """compile_model(model, "CPU") with only the thread count set; returns (run, precision)."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                      **(config or {})})
    request = compiled.create_infer_request()

    def run(x: np.ndarray) -> np.ndarray:
        request.infer({0: x})
        return request.get_output_tensor(0).data.copy()

    return run, compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def litert_run(path: str, threads: int) -> Run:
    """ai_edge_litert Interpreter(num_threads=threads); NCHW feeds go in as NHWC."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=threads)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    nhwc = len(inp["shape"]) == 4 and inp["shape"][3] in (1, 3) and inp["shape"][1] > 3

    def run(x: np.ndarray) -> np.ndarray:
        interp.set_tensor(inp["index"], np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                          if nhwc else x)
        interp.invoke()
        return interp.get_tensor(out["index"]).copy()

    return run


def peer_rows(files: dict[str, Any], threads: int) -> list[Row]:
    """ORT fp32 baseline, then each peer's default, loaded for timing."""
    import openvino as ov

    peers = files["peers"]
    rows = [Row("ORT fp32 (baseline)", "baseline", "onnxruntime", "fp32",
                "InferenceSession, default options", ort_run(files["onnx"], threads))]
    rows.append(_peer(peers["ort-static"], Row(
        "ORT quantize_static", "peer", "onnxruntime", "int8",
        "quant_pre_process + quantize_static(model, out, reader): QDQ, per-tensor, MinMax"),
        lambda f: ort_run(f, threads)))
    rows.append(_peer(peers["ort-dynamic"], Row(
        "ORT quantize_dynamic", "peer", "onnxruntime", "int8",
        "quantize_dynamic(model, out): Conv -> ConvInteger, MatMul -> MatMulInteger"),
        lambda f: ort_run(f, threads)))
    rows.append(_ov_peer(Row("OpenVINO", "peer", "openvino", "?",
                             "convert_model + compile_model(model, 'CPU')"),
                         lambda: ov.convert_model(files["onnx"]), threads))
    rows.append(_ov_peer(_peer(peers["nncf"], Row(
        "NNCF quantize", "peer", "openvino", "?",
        "nncf.quantize(ov_model, nncf.Dataset(calib)) + compile_model(model, 'CPU')"), None),
        lambda: ov.Core().read_model(peers["nncf"]["file"]), threads, int8=True))
    rows.append(_peer(peers["onnx2tf"], Row(
        "onnx2tf -> LiteRT", "peer", "tflite", "fp32",
        "onnx2tf -i model.onnx -o out; model_float32.tflite; Interpreter(num_threads)"),
        lambda f: litert_run(f, threads)))
    return rows


def _peer(record: dict[str, Any], row: Row, load: Callable[[str], Run] | None) -> Row:
    row.build_s = record.get("build_s")
    if "error" in record:
        row.error = f"build failed: {record['error']}"
    elif load is not None:
        row.run = _guarded(row, lambda: load(record["file"]))
    return row


def _ov_peer(row: Row, model: Callable[[], Any], threads: int, int8: bool = False) -> Row:
    if row.error:
        return row
    loaded = _guarded(row, lambda: ov_run(model(), threads))
    if loaded:
        row.run, hint = loaded
        row.compute = f"int8 + {hint}" if int8 else hint
        row.how += f" -> INFERENCE_PRECISION_HINT={hint}"
    return row


def _guarded(row: Row, load: Callable[[], Any]) -> Any:
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot load it drops out
        row.error = f"load failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
        return None


def edge_rows(edge: dict[str, Any], out: Path, threads: int) -> list[Row]:
    """edge's chosen artifact, loaded with edge's target loader at ``threads``."""
    sys.path.insert(0, str(ROOT))
    from edge.core.values import Bundle
    from targets import get_target

    bundle = Bundle.from_json(edge["manifest"])
    chosen = bundle.chosen_result()
    if chosen is None or chosen.artifact is None:
        return [Row("edge's choice", "edge", "-", "-", "-", error=f"none: {bundle.reason}")]
    art = chosen.artifact
    path = out / art.file
    how = f"{chosen.candidate.id} ({art.runtime}); {'; '.join(art.notes[:2])}"
    row = Row(f"edge's choice: {chosen.candidate.id}", "edge", art.runtime,
              _edge_compute(chosen.candidate.precision, art.runtime), how)
    target = get_target(art.runtime)  # the runtime's target loads any candidate's file
    runner = _guarded(row, lambda: target.load(path, bundle.source, threads=threads))
    name = bundle.source.inputs[0].name
    row.run = (lambda x: runner.run({name: x})[0]) if runner else None
    rows = [row]
    if art.runtime == "openvino":
        rows.append(_edge_bf16(path, bundle, chosen.candidate.id, threads))
    return rows


def _edge_compute(precision: str, runtime: str) -> str:
    if runtime == "openvino":  # edge's OpenVINO loader pins INFERENCE_PRECISION_HINT=f32
        return "int8 + f32" if precision == "int8" else "f32"
    return {"int8": "int8", "int8-dynamic": "int8 (dynamic) + fp32"}.get(precision, precision)


def _edge_bf16(path: Path, bundle: Any, cand: str, threads: int) -> Row:
    """The same OpenVINO artifact at this CPU's fastest hint (bf16), kept if fidelity holds."""
    from targets.openvino import load_with_hint

    compute = "int8 + bf16" if cand.endswith("-int8") else "bf16"
    row = Row(f"edge's choice @bf16: {cand}", "edge", "openvino", compute,
              "edge's artifact, load_with_hint(hint='bf16')")
    runner = _guarded(row, lambda: load_with_hint(path, bundle.source, threads=threads,
                                                  hint="bf16"))
    name = bundle.source.inputs[0].name
    row.run = (lambda x: runner.run({name: x})[0]) if runner else None
    return row


