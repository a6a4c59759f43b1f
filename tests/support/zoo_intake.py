"""How today's edge fails to take in some zoo models: the reason each failure must show.

tests/test_zoo.py accepts an intake failure only when it is listed here and its error output
contains the recorded text (a clear one-line error, exit 1-3). When a fix lands, the model's
intake succeeds and the test passes without touching this list; remove the entry then, so
that a regression is caught as a new failure.
"""

from __future__ import annotations

KNOWN_INTAKE: dict[str, str] = {
    # no converter of the TFLite chain makes a runnable ONNX (tf2onnx keeps the TFLite custom
    # op, tflite2onnx has no HARD_SWISH); `edge optimize` takes the .tflite itself as the
    # reference on LiteRT, `edge inspect` does not fall back to LiteRT yet
    "mp-pose-detection": "unsupported operator DENSIFY",
    "mp-selfie-segmentation": "could not convert this tflite model to ONNX",
    # an int8 TFLite converts with a small drift that the parity check refuses (cos 0.9996);
    # as above, only `edge inspect` stops here
    "fer-emotion-int8": "could not convert this tflite model to ONNX",
}
