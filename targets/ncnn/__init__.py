"""NCNN (Tencent): everything about it in one folder. ``target`` converts the reference ONNX
with pnnx to an NCNN param + weights (fp32, fp16) for the device's CPU and for its Vulkan GPU
(``ncnn-vulkan``), with a settings JSON, and loads them on this host; ``agent`` loads them on
the device. NCNN's Python API gives no per-layer times (``profiler=None``); its aarch64 wheel
is provisioned below (``RUNTIME``)."""

from targets.base import Provision, Runtime

__all__ = ["RUNTIME"]

RUNTIME = Runtime(
    name="ncnn",
    targets=(("ncnn", "targets.ncnn.target:NcnnTarget"),
             ("ncnn-vulkan", "targets.ncnn.target:NcnnVulkanTarget")),
    suffixes=(".vk.ncnn.param", ".ncnn.param"),
    agent="targets.ncnn.agent",
    profiler=None,
    provision=Provision(requirements=("ncnn==1.0.20261020",), module="ncnn",
                        distribution="ncnn"),
    label="NCNN", colour="#00a2e8")
