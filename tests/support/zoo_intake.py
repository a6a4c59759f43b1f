"""Zoo models whose reference is the original .tflite on LiteRT: no converter makes a faithful
ONNX model of them.

tests/test_zoo.py checks that ``edge inspect`` (and so optimize) takes exactly these through
the LiteRT fallback, with its warning: a converter that starts to read one of them (or stops
reading another) shows up as a change here.
"""

from __future__ import annotations

LITERT_REFERENCE: dict[str, str] = {
    # tf2onnx keeps the TFLite DENSIFY (sparse weights) it cannot fold; tflite2onnx lacks it
    "mp-pose-detection": "unsupported operator DENSIFY",
    # tf2onnx keeps the custom Convolution2DTransposeBias; tflite2onnx has no HARD_SWISH
    "mp-selfie-segmentation": "unsupported operator HARD_SWISH",
    # an int8 TFLite converts with a small drift the parity check refuses (cos 0.9996)
    "fer-emotion-int8": "does not reproduce",
}
