"""A .tflite reference: what edge knows about it, read with LiteRT (no TensorFlow).

When no converter makes a faithful ONNX model of a .tflite, the original file is the reference:
its inputs and outputs come from the interpreter (signature names when it has one serving
signature, else tensor names), its weights from the constant buffers, its operators from the
interpreter's op details. MACs are not counted (0).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from edge.core.errors import UsageError, first_line
from edge.core.model import inspect_model, sha256_file
from edge.core.values import ModelInfo, TensorSpec

__all__ = ["inspect_reference", "inspect_tflite", "is_tflite"]


def is_tflite(path: str | Path) -> bool:
    """Whether a reference is a .tflite file (the original, with no ONNX made from it)."""
    return Path(path).suffix.lower() == ".tflite"


def inspect_reference(path: str | Path) -> ModelInfo:
    """The reference's ModelInfo: ONNX by edge.core.model, a .tflite by LiteRT."""
    return inspect_tflite(path) if is_tflite(path) else inspect_model(path)


def inspect_tflite(path: str | Path) -> ModelInfo:
    """Describe a .tflite with LiteRT's interpreter."""
    path = Path(path)
    interp = _interpreter(path)
    ins, outs = signature_names(interp)
    tensors = interp.get_tensor_details()
    return ModelInfo(
        path=str(path.resolve()), sha256=sha256_file(path), size_bytes=path.stat().st_size,
        opset=0,
        inputs=tuple(_spec(d, ins) for d in interp.get_input_details()),
        outputs=tuple(_spec(d, outs) for d in interp.get_output_details()),
        params=_params(interp, tensors),
        macs=0,
        ops=dict(Counter(d["op_name"] for d in interp._get_ops_details()).most_common()),
    )


def _interpreter(path: Path) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise UsageError(f"{path}: running a .tflite reference needs ai-edge-litert "
                         "(pip install 'edge[tflite]')") from None
    try:
        return Interpreter(model_path=str(path))
    except Exception as exc:  # LiteRT raises ValueError/RuntimeError for a bad file
        raise UsageError(f"{path}: LiteRT cannot load it ({first_line(exc)})") from None


def signature_names(interp: Any) -> tuple[dict[int, str], dict[int, str]]:
    """Tensor index -> name in the one serving signature (inputs, outputs); empty without."""
    keys = list(interp.get_signature_list())
    if len(keys) != 1:
        return {}, {}
    runner = interp.get_signature_runner(keys[0])
    return ({d["index"]: n for n, d in runner.get_input_details().items()},
            {d["index"]: n for n, d in runner.get_output_details().items()})


def _spec(detail: dict[str, Any], names: dict[int, str]) -> TensorSpec:
    """A TensorSpec of a LiteRT tensor: -1 dims of its shape signature become symbolic."""
    signature = detail.get("shape_signature")
    dims = signature if signature is not None and len(signature) == len(detail["shape"]) \
        else detail["shape"]
    shape = tuple(int(d) if int(d) > 0 else "?" for d in dims)
    name = names.get(detail["index"], detail["name"])
    return TensorSpec(name=name, shape=shape, dtype=np.dtype(detail["dtype"]).name)


def _params(interp: Any, tensors: list[dict[str, Any]]) -> int:
    """Elements of the constant tensors (those holding data before any input is set)."""
    inputs = {d["index"] for d in interp.get_input_details()}
    total = 0
    for detail in tensors:
        if detail["index"] in inputs or not len(detail["shape"]):
            continue
        try:
            interp.get_tensor(detail["index"])
        except ValueError:  # not allocated yet: an activation, not a weight
            continue
        total += int(np.prod(detail["shape"]))
    return total
