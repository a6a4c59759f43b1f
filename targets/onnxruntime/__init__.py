"""ONNX Runtime: everything about it in one folder. ``target`` converts the reference ONNX
(fp32, fp16, int8 dynamic and static) and loads artifacts on this host; ``agent`` loads them on
the device (and ``profile``s them); ``profiling`` and ``layers`` time each node; its wheels,
label and colour are declared below (``RUNTIME``, the ``edge.targets`` entry point)."""

from targets.base import Provision, Runtime
from targets.onnxruntime.target import (
    FILES,
    OnnxRuntimeTarget,
    OrtRunner,
    constants_to_initializers,
    float_kinds,
    gemms_to_matmuls,
    map_keep_float,
    name_nodes,
    node_name,
)

__all__ = ["FILES", "RUNTIME", "OnnxRuntimeTarget", "OrtRunner", "constants_to_initializers",
           "float_kinds", "gemms_to_matmuls", "map_keep_float", "name_nodes", "node_name"]

RUNTIME = Runtime(
    name="onnxruntime",
    targets=(("onnxruntime", "targets.onnxruntime.target:OnnxRuntimeTarget"),),
    suffixes=(".onnx",),
    agent="targets.onnxruntime.agent",
    profiler="targets.onnxruntime.layers:measure",
    provision=Provision(requirements=("onnxruntime==1.31.1",), module="onnxruntime",
                        distribution="onnxruntime"),
    label="ONNX Runtime", colour="#4c78a8")
