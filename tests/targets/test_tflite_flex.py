"""A .tflite that needs TensorFlow's Select ops (Flex*) is a clean per-candidate failure.

onnx2tf writes MiniLM's GELU as FlexErf: LiteRT cannot prepare it, and reading the artifact's
layout used to raise that RuntimeError out of optimize (exit 4). Here TensorFlow's converter
makes a one-op Flex model the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edge.core.values import ModelInfo, TensorSpec
from targets.base import ConversionError
from targets.tflite.target import _notes


def _flex_model(path: Path) -> Path:
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
    def erf(x: tf.Tensor) -> tf.Tensor:
        return tf.raw_ops.Erf(x=x)

    converter = tf.lite.TFLiteConverter.from_concrete_functions([erf.get_concrete_function()],
                                                                erf)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.SELECT_TF_OPS]
    path.write_bytes(converter.convert())
    return path


def test_a_flex_artifact_is_a_conversion_error_not_a_crash(tmp_path: Path) -> None:
    file = _flex_model(tmp_path / "model_float32.tflite")
    spec = TensorSpec(name="x", shape=(1, 8), dtype="float32")
    model = ModelInfo(path=str(tmp_path / "m.onnx"), sha256="0", size_bytes=1, opset=17,
                      inputs=(spec,), outputs=(spec,), params=0, macs=0)
    run = {"onnx2tf": "1.28", "files": {"fp32": file.name}, "seconds": 1.0, "peak_rss_mb": 1.0}
    with pytest.raises(ConversionError, match="LiteRT cannot load the .tflite: .*Select"):
        _notes("fp32", model, run, file)
