"""Every tensor a .tflite computes, kept by LiteRT (``experimental_preserve_all_tensors``): what
the search for an fp32's first diverging node (edge/core/verify/diverge.py) compares with the
reference's node outputs. onnx2tf names tensors after TensorFlow's ops, not the ONNX nodes, so
the search matches them by value (in the ONNX layout or channels-last)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edge.core.values import ModelInfo
from targets.tflite.litert_runner import TFLiteRunner

__all__ = ["node_outputs"]


def node_outputs(artifact: Path, model: ModelInfo,
                 feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """Each float32 tensor the model computes (not its inputs) on each feed, by its name; run
    by LiteRT's builtin kernels (its default XNNPACK delegate keeps no intermediate tensors)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(artifact), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=(
                             OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    runner = TFLiteRunner(interp, model)
    inputs = {d["index"] for d in interp.get_input_details()}
    tensors = [(d["index"], d["name"]) for d in interp.get_tensor_details()
               if d["index"] not in inputs and d["dtype"] == np.float32]
    found: dict[str, list[np.ndarray]] = {}
    for feed in feeds:
        runner.run(dict(feed))
        for index, name in tensors:
            found.setdefault(name, []).append(np.array(interp.get_tensor(index)))
    return found
