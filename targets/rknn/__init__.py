"""RKNN (Rockchip NPUs: RK3588, RK3566, ...): everything about it in one folder. ``target``
converts the reference ONNX to a .rknn (fp16, int8 calibrated) with rknn-toolkit2 in its own
toolchain environment (``convert``, ``child``) for the SoC the profile's NPU names, and runs it
here in the toolkit's simulator (``simulator``: numbers, never timings); ``ops`` says which
operators stay on the CPU; ``agent`` loads a .rknn on the device's NPU with rknn-toolkit-lite2,
whose wheel provisioning installs (``RUNTIME``)."""

from targets.base import Provision, Runtime
from targets.rknn.convert import PLATFORMS, TOOLCHAIN, RKNNConverter

__all__ = ["PLATFORMS", "RUNTIME", "TOOLCHAIN", "RKNNConverter"]

RUNTIME = Runtime(
    name="rknn",
    targets=(("rknn", "targets.rknn.target:RKNNTarget"),),
    suffixes=(".rknn",),
    agent="targets.rknn.agent",
    profiler=None,
    provision=Provision(requirements=("rknn-toolkit-lite2==2.5.0",), module="rknnlite.api",
                        distribution="rknn-toolkit-lite2"),
    label="RKNN", colour="#54a24b",
    note="rknn-toolkit2's simulator on this host: outputs verified, times not the NPU's")
