"""NVIDIA TensorRT: everything about it in one folder. An engine runs only on the GPU model and
TensorRT version that built it, so ``target`` makes the ONNX the device builds from (fp32,
fp16, int8 with explicit Q/DQ) with a companion of build settings and reference outputs, and
verifies it on this host's CPU in ONNX Runtime; ``agent`` builds the engine on the device with
its own TensorRT, caches it in the release, checks it against the reference and times it.
Provisioning does not install TensorRT: it comes with JetPack on a Jetson and with NVIDIA's
packages or containers on a PC or cloud GPU."""

from targets.base import Runtime
from targets.tensorrt.target import (
    DEFAULT_WORKSPACE_MB,
    FILES,
    FLOORS,
    REFERENCE_SAMPLES,
    TensorRTTarget,
    TrtHostRunner,
    build_settings,
    companion_of,
    read_settings,
    threshold,
)

__all__ = ["DEFAULT_WORKSPACE_MB", "FILES", "FLOORS", "REFERENCE_SAMPLES", "RUNTIME",
           "TensorRTTarget", "TrtHostRunner", "build_settings", "companion_of", "read_settings",
           "threshold"]

RUNTIME = Runtime(
    name="tensorrt",
    targets=(("tensorrt", "targets.tensorrt.target:TensorRTTarget"),),
    suffixes=(".trt.onnx",),
    agent="targets.tensorrt.agent",
    profiler=None,
    provision=None,
    label="TensorRT", colour="#76b900",
    note="the ONNX TensorRT builds from, run by ONNX Runtime on this host's CPU: no GPU here; "
         "the engine is built, checked and timed on the device")
