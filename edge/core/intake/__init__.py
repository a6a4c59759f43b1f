"""Model intake beyond ONNX: turn TFLite, Keras, SavedModel and PyTorch models into the reference.

The reference is one ONNX file every target converts from. ONNX sources pass through unless
their dims must be pinned or their weights sit in Constant nodes; TensorFlow-family sources are
converted by tf2onnx in a child process (TensorFlow never loads into edge's own process);
PyTorch modules are exported with the TorchScript exporter. Every conversion is checked: the
source and the reference run on the same random inputs and must agree. A .tflite goes through
a chain of converters; when none makes a faithful ONNX model (the failure is remembered), the
original .tflite may be its own reference on LiteRT (``reference_model(tflite_fallback=True)``).
"""

from edge.core.intake.branches import dropped_branches
from edge.core.intake.common import ACCEPTED, OPSET, NoOnnxReference
from edge.core.intake.litert import inspect_reference, inspect_tflite, is_tflite
from edge.core.intake.reference import (
    check_model_file,
    dynamic_inputs,
    pin_from_sample,
    reference_model,
    source_kind,
    to_reference,
)
from edge.core.intake.shapes import parse_shape_flags, parse_shapes
from edge.core.intake.torchargs import parse_arg_flags

__all__ = ["ACCEPTED", "OPSET", "NoOnnxReference", "check_model_file", "dropped_branches",
           "dynamic_inputs", "inspect_reference", "inspect_tflite", "is_tflite",
           "parse_arg_flags", "parse_shape_flags", "parse_shapes", "pin_from_sample",
           "reference_model", "source_kind", "to_reference"]
