"""onnx2tf's own command line, as edge's TFLite target runs it in a child process
(``python -m targets.tflite.onnx2tf_child <onnx2tf's flags>``), less the two int16-activation
variants.

With ``-oiqt`` onnx2tf calibrates four models, each in its own pass over the samples: int8,
full int8 (int8 I/O), and two with int16 activations that no edge candidate uses. Here those two
conversions return an empty model (onnx2tf writes it, nothing reads it), so a run calibrates
twice instead of four times; the int8 models are onnx2tf's own, converted as before.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from onnx2tf import main

#: The op set onnx2tf asks for in its int16-activation conversions (and only there).
INT16_ACTIVATIONS = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
#: What the run's log says for each of them.
SKIPPED = "edge: int16-activation model not converted (no edge candidate uses one)"
_from_saved_model = tf.lite.TFLiteConverter.from_saved_model


def _without_int16(*args: Any, **kwargs: Any) -> Any:
    """onnx2tf's calibrating converter, whose int16-activation conversions are skipped."""
    converter = _from_saved_model(*args, **kwargs)
    convert = converter.convert

    def skipping_int16() -> bytes:
        if INT16_ACTIVATIONS in converter.target_spec.supported_ops:
            print(SKIPPED, flush=True)
            return b""
        return bytes(convert())

    converter.convert = skipping_int16
    return converter


if __name__ == "__main__":
    tf.lite.TFLiteConverter.from_saved_model = _without_int16
    main()
