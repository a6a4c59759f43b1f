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
    names: list[str] = field(default_factory=list)  # its outputs' names, as run returns them
    fidelity: dict[str, Any] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)


@dataclass
class Loaded:
    """A loaded runtime: ``run`` returns every output; their names as the runtime reports them."""

    run: Run
    names: list[str]
    hint: str = ""


def ort_run(path: str, threads: int) -> Loaded:
    """An ORT CPU session: default options except the thread count."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return Loaded(lambda x: sess.run(None, {name: x}), [o.name for o in sess.get_outputs()])


def ov_run(model: Any, threads: int, config: dict[str, Any] | None = None) -> Loaded:
    """compile_model(model, "CPU") with only the thread count set; ``hint`` is the precision."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                      **(config or {})})
    request = compiled.create_infer_request()
    count = len(compiled.outputs)

    def run(x: np.ndarray) -> list[np.ndarray]:
        request.infer({0: x})
        return [request.get_output_tensor(i).data.copy() for i in range(count)]

    return Loaded(run, [_ov_name(o, i) for i, o in enumerate(compiled.outputs)],
                  compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())


def _ov_name(port: Any, index: int) -> str:
    try:
        return str(port.get_any_name())
    except RuntimeError:  # an output without a tensor name
        return f"output{index}"


def litert_run(path: str, threads: int) -> Loaded:
    """ai_edge_litert Interpreter(num_threads=threads); a feed whose shape is the NHWC
    transpose of the model's input goes in transposed (onnx2tf makes NCHW inputs NHWC)."""
    from ai_edge_litert.interpreter import Interpreter

    from edge.core.intake.litert import signature_names

    interp = Interpreter(model_path=path, num_threads=threads)
    interp.allocate_tensors()
    inp, outs = interp.get_input_details()[0], interp.get_output_details()
    want = tuple(int(d) for d in inp["shape"])
    _, names = signature_names(interp)

    def run(x: np.ndarray) -> list[np.ndarray]:
        if x.shape != want and x.ndim == 4:
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        return [interp.get_tensor(o["index"]).copy() for o in outs]

    return Loaded(run, [names.get(o["index"], o["name"]) for o in outs])


def peer_rows(files: dict[str, Any], threads: int) -> list[Row]:
    """ORT fp32 baseline, then each peer's default, loaded for timing."""
    import openvino as ov

    peers = files["peers"]
    rows = [_loaded(Row("ORT fp32 (baseline)", "baseline", "onnxruntime", "fp32",
                        "InferenceSession, default options"), ort_run(files["onnx"], threads))]
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


def _loaded(row: Row, loaded: Loaded | None) -> Row:
    if loaded is not None:
        row.run, row.names = loaded.run, loaded.names
    return row


def _peer(record: dict[str, Any], row: Row, load: Callable[[str], Loaded] | None) -> Row:
    row.build_s = record.get("build_s")
    if "error" in record:
        row.error = f"build failed: {record['error']}"
    elif load is not None:
        _loaded(row, _guarded(row, lambda: load(record["file"])))
    return row


def _ov_peer(row: Row, model: Callable[[], Any], threads: int, int8: bool = False) -> Row:
    if row.error:
        return row
    loaded = _guarded(row, lambda: ov_run(model(), threads))
    if loaded:
        _loaded(row, loaded)
        row.compute = f"int8 + {loaded.hint}" if int8 else loaded.hint
        row.how += f" -> INFERENCE_PRECISION_HINT={loaded.hint}"
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
    _loaded(row, _edge_loaded(runner, bundle.source))
    rows = [row]
    if art.runtime == "openvino" and chosen.candidate.precision != "bf16":
        rows.append(_edge_bf16(path, bundle, chosen.candidate.id, threads))
    return rows


def _edge_compute(precision: str, runtime: str) -> str:
    if runtime == "openvino":  # edge's loader: the hint the IR records (bf16's, else f32)
        return {"int8": "int8 + f32", "bf16": "bf16"}.get(precision, "f32")
    return {"int8": "int8", "int8-dynamic": "int8 (dynamic) + fp32"}.get(precision, precision)


def _edge_bf16(path: Path, bundle: Any, cand: str, threads: int) -> Row:
    """The same OpenVINO artifact at this CPU's fastest hint (bf16), kept if fidelity holds."""
    from targets.openvino import load_with_hint

    compute = "int8 + bf16" if cand.endswith("-int8") else "bf16"
    row = Row(f"edge's choice @bf16: {cand}", "edge", "openvino", compute,
              "edge's artifact, load_with_hint(hint='bf16')")
    runner = _guarded(row, lambda: load_with_hint(path, bundle.source, threads=threads,
                                                  hint="bf16"))
    return _loaded(row, _edge_loaded(runner, bundle.source))


def _edge_loaded(runner: Any, source: Any) -> Loaded | None:
    """An edge target runner: every output, named as the reference names them."""
    if runner is None:
        return None
    name = source.inputs[0].name
    return Loaded(lambda x: list(runner.run({name: x})), [o.name for o in source.outputs])


