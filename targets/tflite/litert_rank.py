"""Which operators of a .tflite reference lose most when quantized: the order in which accuracy
recovery (edge/flows/recover.py) keeps them float for the ``litert`` target.

Measured end to end, not layer by layer: an operator's int8 error is how much of the quantized
model's output error goes away when that operator alone is left float (ai-edge-quantizer with
the same calibration, run on a few calibration samples, the error of the worst output relative
to its spread across samples). Local measures miss what matters in real models: MediaPipe's
pose detector loses most of its fidelity in its second layer, a depthwise convolution whose
folded batch-norm kernels are high-pass filters (per-channel weights with large taps summing to
nearly zero), though that layer's own int8 error is under 2%.

To stay cheap the operators (in graph order) are first scored in blocks of about sqrt(N), then
one by one inside the two blocks that matter most: about 3 sqrt(N) quantizations, not N.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from edge.core.values import Dataset, ModelInfo
from targets.tflite.litert import LiteRTRunner, op_names, op_scope, prepared, quantize

__all__ = ["rank_sensitive_ops"]

_REFINED = 2  # blocks whose operators are scored one by one


def rank_sensitive_ops(model: ModelInfo, precision: str, calib: Dataset, quantized: Path, *,
                       samples: int = 8) -> list[tuple[str, float]]:
    """(operator name, int8 error) of each operator the ``quantized`` model (``precision``,
    made from the .tflite ``model``) quantizes, most sensitive first: the error is the share of
    the worst output's RMS error over its spread that keeping it float removes."""
    content, _ = prepared(Path(model.path))
    names = _quantized_ops(content, quantized)
    probe = _Probe(content, model, precision, Dataset(feeds=calib.feeds[:samples]), calib)
    size = max(1, math.isqrt(len(names) - 1) + 1) if names else 1
    blocks = [names[i:i + size] for i in range(0, len(names), size)]
    gains = [probe.gain(tuple(block)) for block in blocks]
    order = sorted(range(len(blocks)), key=lambda i: -gains[i])
    scores = {name: probe.gain((name,)) for i in order[:_REFINED] for name in blocks[i]}
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    rest = [(name, gains[i] / len(blocks[i])) for i in order[_REFINED:] for name in blocks[i]]
    return ranked + rest


class _Probe:
    """Output error of the model quantized with some operators kept float, on few samples."""

    def __init__(self, content: bytes, model: ModelInfo, precision: str, samples: Dataset,
                 calib: Dataset) -> None:
        self._content, self._model, self._precision = content, model, precision
        self._samples, self._calib = samples, calib
        self._reference = self._outputs(content)
        self._naive = self.error(())

    def gain(self, keep_float: tuple[str, ...]) -> float:
        """How much lower the output error is with ``keep_float`` left float (>= 0)."""
        return max(0.0, self._naive - self.error(keep_float))

    def error(self, keep_float: tuple[str, ...]) -> float:
        got = self._outputs(quantize(self._content, self._precision, self._calib, keep_float))
        return max(_relative_rms(r, g) for r, g in zip(self._reference, got, strict=True))

    def _outputs(self, content: bytes) -> list[np.ndarray]:
        from ai_edge_litert.interpreter import Interpreter

        runner = LiteRTRunner(Interpreter(model_content=content), self._model)
        rows = [runner.run(feed) for feed in self._samples.feeds]
        return [np.stack(values).astype(np.float64) for values in zip(*rows, strict=True)]


def _relative_rms(reference: np.ndarray, got: np.ndarray) -> float:
    """RMS error over the reference's spread across samples (else over its own std)."""
    spread = float(np.sqrt(np.mean(np.var(reference, axis=0)))) if len(reference) > 1 else 0.0
    spread = spread or float(np.std(reference)) or 1.0
    return float(np.sqrt(np.mean((got - reference) ** 2))) / spread


def _quantized_ops(content: bytes, quantized: Path) -> list[str]:
    """Names of the float model's operators (in graph order) that the quantized model has
    with an integer input or output."""
    from ai_edge_litert.tools import flatbuffer_utils

    graph = flatbuffer_utils.read_model(str(quantized)).subgraphs[0]
    integer = {op_scope(graph, op) for op in graph.operators
               if any(_integer(graph.tensors[t]) for t in _indices(op.inputs, op.outputs))}
    reference = flatbuffer_utils.read_model_from_bytearray(bytearray(content)).subgraphs[0]
    names = zip(op_names(reference), reference.operators, strict=True)
    return [name for name, op in names if name and op_scope(reference, op) in integer]


def _integer(tensor: Any) -> bool:
    """An 8- or 16-bit tensor with a scale (int32 biases do not count)."""
    from ai_edge_litert import schema_py_generated as schema

    quant = tensor.quantization
    return tensor.type in (schema.TensorType.INT8, schema.TensorType.UINT8,
                           schema.TensorType.INT16) \
        and quant is not None and quant.scale is not None and len(quant.scale) > 0


def _indices(*lists: Any) -> list[int]:
    return [int(i) for values in lists if values is not None for i in values if i >= 0]
