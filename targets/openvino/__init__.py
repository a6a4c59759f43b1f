"""OpenVINO: everything about it in one folder. ``target`` converts the reference ONNX to IR (fp32,
fp16, bf16; int8 and int8-dynamic with NNCF, ``quantize``) and loads it on this host; ``accel``
makes the NPU and GPU targets (the same IR, named for its device, with a companion JSON);
``agent`` loads an IR on the device, on the CPU in the precision it records or on the NPU / GPU
its JSON names (and reads its ``perf`` counters); ``profiling`` and ``layers`` time each node; its
label and colour are declared below (``RUNTIME``). Provisioning does not install it (no pinned
wheel set yet)."""

from targets.base import Runtime
from targets.openvino.target import (
    BF16,
    BF16_ISA,
    COMPUTES,
    OpenVINORunner,
    OpenVINOTarget,
    is_transformer_like,
    load_with_hint,
)

__all__ = ["BF16", "BF16_ISA", "COMPUTES", "RUNTIME", "OpenVINORunner", "OpenVINOTarget",
           "is_transformer_like", "load_with_hint"]

RUNTIME = Runtime(
    name="openvino",
    targets=(("openvino", "targets.openvino.target:OpenVINOTarget"),
             ("openvino-npu", "targets.openvino.accel:OpenVINONPUTarget"),
             ("openvino-gpu", "targets.openvino.accel:OpenVINOGPUTarget")),
    suffixes=(".xml", ".npu.xml", ".gpu.xml"),
    companions=(".npu.bin", ".gpu.bin"),
    agent="targets.openvino.agent",
    profiler="targets.openvino.layers:measure",
    provision=None,
    label="OpenVINO", colour="#7b3294")
