"""Every node's output of an OpenVINO IR, by the ONNX tensor names the IR keeps: what the search
for an fp32 IR's first diverging node (edge/core/verify/diverge.py) compares with the reference."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["node_outputs"]

_SKIPPED = ("Parameter", "Constant", "Result")


def node_outputs(artifact: Path,
                 feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """Each f32 node output on each feed, under every name its tensor carries."""
    import openvino as ov

    core = ov.Core()
    ir = core.read_model(str(artifact))
    ports = [out for op in ir.get_ordered_ops() if op.get_type_name() not in _SKIPPED
             for out in op.outputs() if out.get_names() and out.get_element_type() == ov.Type.f32]
    ir.add_outputs(ports)
    compiled = core.compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    runs = [compiled(dict(feed)) for feed in feeds]
    return _by_name(compiled.outputs, runs)


def _by_name(outputs: Sequence[Any], runs: list[Any]) -> dict[str, list[np.ndarray]]:
    found: dict[str, list[np.ndarray]] = {}
    for port in outputs:
        values = [np.asarray(run[port]) for run in runs]
        for name in port.get_names():
            found.setdefault(name, values)
    return found
