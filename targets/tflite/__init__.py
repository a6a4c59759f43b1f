"""TFLite (LiteRT): everything about it in one folder. ``target`` converts the reference ONNX
with onnx2tf (``onnx2tf_run``, a child process) and runs artifacts here (``litert_runner``);
``litert`` quantizes a user's own .tflite with ai-edge-quantizer (``litert_rank`` ranks its
sensitive operators); ``delegate`` makes the int8 model for an NPU behind an external delegate
(``.delegate.tflite``, a companion JSON naming the library); ``agent`` loads a .tflite on the
device (through that delegate); ``layers`` times each operator by prefixes; its wheels, label
and colour are declared below (``RUNTIME``)."""

from targets.base import Provision, Runtime
from targets.tflite.target import FAILED, FILES, LOG, MARKER, TFLiteRunner, TFLiteTarget

__all__ = ["FAILED", "FILES", "LOG", "MARKER", "RUNTIME", "TFLiteRunner", "TFLiteTarget"]

RUNTIME = Runtime(
    name="tflite",
    targets=(("tflite", "targets.tflite.target:TFLiteTarget"),
             # reads the original .tflite (no ONNX reference)
             ("litert", "targets.tflite.litert:LiteRTTarget"),
             # the int8 model for an NPU behind an external delegate (the profile's library)
             ("tflite-delegate", "targets.tflite.delegate:TFLiteDelegateTarget")),
    suffixes=(".tflite", ".delegate.tflite"),
    agent="targets.tflite.agent",
    profiler="targets.tflite.layers:measure",
    provision=Provision(requirements=("ai-edge-litert==2.3.0",),
                        module="ai_edge_litert.interpreter", distribution="ai-edge-litert"),
    label="LiteRT", colour="#f58518")
