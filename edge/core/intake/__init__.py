"""Model intake beyond ONNX: turn TFLite, Keras, SavedModel and PyTorch models into the reference.

The reference is one ONNX file every target converts from. ONNX sources pass through unless
their dims must be pinned or their weights sit in Constant nodes; TensorFlow-family sources are
converted by tf2onnx in a child process (TensorFlow never loads into edge's own process);
PyTorch modules are exported with the TorchScript exporter. Every conversion is checked: the
source and the reference run on the same random inputs and must agree.
"""

from edge.core.intake.common import ACCEPTED, OPSET
from edge.core.intake.reference import (
    dynamic_inputs,
    pin_from_sample,
    reference_model,
    source_kind,
    to_reference,
)
from edge.core.intake.shapes import parse_shape_flags, parse_shapes

__all__ = ["ACCEPTED", "OPSET", "dynamic_inputs", "parse_shape_flags", "parse_shapes",
           "pin_from_sample", "reference_model", "source_kind", "to_reference"]
