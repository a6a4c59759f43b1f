"""Rockchip NPUs (RKNN): so far the converter, rknn-toolkit2, run in its own toolchain
environment (its numpy, torch, onnx and protobuf pins clash with edge's).

The runtime plug-in — profiles, the plan, verification in the toolkit's simulator, the device
loader — comes with issue 28; until then this folder is not in ``targets.REGISTRY`` (its
toolchain is an ``edge.toolchains`` entry point, so ``edge toolchains`` manages it).
"""
