"""How today's edge fails to take in some zoo models: the reason each failure must show.

tests/test_zoo.py accepts an intake failure only when it is listed here and its error output
contains the recorded text (a clear one-line error, exit 1-3). When a fix lands, the model's
intake succeeds and the test passes without touching this list; remove the entry then, so
that a regression is caught as a new failure.
"""

from __future__ import annotations

KNOWN_INTAKE: dict[str, str] = {
    # issue 12 item 2: tf2onnx cannot convert mediapipe's pose detector, nothing else is tried
    "mp-pose-detection": "cannot reshape array of size 96 into shape (16,1,1,24)",
    # tf2onnx keeps the TFLite custom op; the reference ONNX cannot run
    "mp-selfie-segmentation": "No Op registered for TFL_Convolution2DTransposeBias",
    # an int8 TFLite converts with a small drift that the parity check refuses (cos 0.9996)
    "fer-emotion-int8": "the converted ONNX does not reproduce the source",
}
