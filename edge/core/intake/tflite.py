"""TFLite sources in the converter child: a chain of converters, each checked against LiteRT.

One road can be closed (tf2onnx cannot read sparse weights, say), so the child tries in turn:
tf2onnx at edge's opset, tf2onnx at opset 13 with quantized weights dequantized, and
tflite2onnx when it is installed. The first ONNX model that reproduces LiteRT's outputs on the
same example inputs wins; when none does, the failure names the operators that stopped them.
A converter that crashes the child (a signal: BirdNET's in-graph STFT takes tf2onnx there) is
named in the job's ``crashed`` on the parent's next run, which goes on with the others.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from edge.core.errors import first_line
from edge.core.intake.common import example
from edge.core.intake.parity import output_mismatch

Feeds = dict[str, np.ndarray]
Outputs = list[tuple[str, np.ndarray]]

__all__ = ["START", "ChainFailed", "convert_tflite", "named_operators"]

#: What the child prints before each converter: a crash (a signal) is put on the last one named.
START = "edge-intake-start: "


class ChainFailed(Exception):
    """Every converter failed; the message gives each one's reason, the operator first."""


def convert_tflite(job: dict[str, Any]) -> tuple[Feeds, Outputs]:
    """Write the first converter's ONNX that matches LiteRT to job["out"]; (feeds, outputs)."""
    reasons: list[str] = []
    crashed: dict[str, str] = job.get("crashed", {})
    for name, attempt in _ATTEMPTS:
        if name in crashed:  # it crashed this process in an earlier run: not again
            reasons.append(f"{name}: {crashed[name][:200]}")
            continue
        print(f"{START}{name}", flush=True)
        try:
            problem = _attempt(job, attempt)
        except Exception as exc:  # any converter failure: note it and try the next one
            problem = f"{type(exc).__name__}: {first_line(exc)}"
        if isinstance(problem, tuple):
            print(f"edge-intake-converter: {name}", flush=True)
            return problem
        print(f"edge-intake-attempt: {name}: {problem}", flush=True)
        reasons.append(f"{name}: {problem[:160]}")
    raise ChainFailed(_unsupported(named_operators(reasons, _operators(job["source"])))
                      + "; ".join(reasons))


def _unsupported(operators: Sequence[str]) -> str:
    """'unsupported operator X: ' or 'unsupported operators X, Y: ' ('' for none)."""
    if not operators:
        return ""
    return f"unsupported operator{'s' if len(operators) > 1 else ''} {', '.join(operators)}: "


def _attempt(job: dict[str, Any],
             convert: Callable[[dict[str, Any]], Any]) -> str | tuple[Feeds, Outputs]:
    """Convert, then run both models: (feeds, outputs) when they agree, else the mismatch."""
    convert(job)
    proto = onnx.load(job["out"], load_external_data=False)
    feeds, outputs = _run_source(job, [i.name for i in proto.graph.input
                                       if i.name not in {t.name for t in proto.graph.initializer}])
    session = ort.InferenceSession(job["out"], providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    problem = output_mismatch(got, outputs, names)
    return (feeds, outputs) if problem is None else f"does not reproduce LiteRT: {problem}"


def _tf2onnx(job: dict[str, Any]) -> None:
    import tf2onnx

    tf2onnx.convert.from_tflite(job["source"], opset=job["opset"], output_path=job["out"])


def _tf2onnx_dequantized(job: dict[str, Any]) -> None:
    """tf2onnx's command line (only it offers --dequantize) at opset 13."""
    from tf2onnx import convert

    argv = sys.argv
    sys.argv = ["tf2onnx.convert", "--tflite", job["source"], "--output", job["out"],
                "--opset", "13", "--dequantize"]
    try:
        convert.main()
    finally:
        sys.argv = argv


def _tflite2onnx(job: dict[str, Any]) -> None:
    try:
        import tflite2onnx
    except ImportError:
        raise RuntimeError("not installed (pip install tflite2onnx==0.4.1)") from None
    tflite2onnx.convert(job["source"], job["out"])


_ATTEMPTS: tuple[tuple[str, Callable[[dict[str, Any]], None]], ...] = (
    ("tf2onnx", _tf2onnx),
    ("tf2onnx --opset 13 --dequantize", _tf2onnx_dequantized),
    ("tflite2onnx", _tflite2onnx),
)


def _run_source(job: dict[str, Any], onnx_names: Sequence[str]) -> tuple[Feeds, Outputs]:
    """LiteRT runs the .tflite on example feeds keyed by the ONNX input names."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=job["source"])
    details = interp.get_input_details()
    if len(details) != len(onnx_names):
        raise ValueError(f"the ONNX model has {len(onnx_names)} inputs, the .tflite "
                         f"{len(details)}")
    pairs = _pair(list(onnx_names), details)
    feeds = {}
    for name, detail in pairs:
        shape = _shape(job, name, detail.get("shape_signature", detail["shape"]))
        interp.resize_tensor_input(detail["index"], shape)
        feeds[name] = example(shape, np.dtype(detail["dtype"]).name)
    interp.allocate_tensors()
    for name, detail in pairs:
        interp.set_tensor(detail["index"], feeds[name])
    interp.invoke()
    return feeds, [(d["name"], np.array(interp.get_tensor(d["index"])))
                   for d in interp.get_output_details()]


def _pair(names: list[str], details: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """ONNX input names with LiteRT input details: by name when all match, else by order."""
    by_name = {d["name"]: d for d in details}
    if set(names) == set(by_name):
        return [(n, by_name[n]) for n in names]
    return list(zip(names, details, strict=True))


def _shape(job: dict[str, Any], name: str, dims: Sequence[int]) -> list[int]:
    pinned = job["shapes"].get(name)
    return list(pinned) if pinned else [int(d) if int(d) > 0 else 1 for d in dims]


def _operators(source: str) -> list[str]:
    """The model's operator names (LiteRT's op details), most specific first."""
    try:
        from ai_edge_litert.interpreter import Interpreter

        ops = {d["op_name"] for d in Interpreter(model_path=source)._get_ops_details()}
    except Exception:  # naming the operator is best effort
        return []
    return sorted(ops, key=len, reverse=True)


def named_operators(reasons: Sequence[str], operators: Sequence[str]) -> list[str]:
    """Every model operator the converters' reasons name (e.g. RFFT2D, REDUCE_MIN), sorted."""
    text = " ".join(reasons)
    return sorted(op for op in operators if re.search(rf"\b{re.escape(op)}\b", text))
