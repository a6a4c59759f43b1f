"""Arm Ethos-U NPUs (ethos-u): everything about them in one folder. ``vela`` runs Vela, Arm's
compiler, in its own toolchain environment for the profile's NPU, system configuration and
memory mode; ``target`` compiles the TFLite target's full-int8 model with it, verifies the int8
model on LiteRT's reference kernels here and offers Vela's estimate; ``agent`` loads a
``.vela.tflite`` on a device with the Ethos-U external delegate of its BSP (e.g. NXP's i.MX 93).
Its wheels (LiteRT; the delegate comes with the BSP), label and colour are declared below."""

from targets.base import Provision, Runtime
from targets.ethosu.target import COMPANION, NPU_ONNX_OPS, SUFFIX, EthosUTarget, source_of
from targets.ethosu.vela import TOOLCHAIN, VelaConfig, VelaReport

__all__ = ["COMPANION", "NPU_ONNX_OPS", "RUNTIME", "SUFFIX", "TOOLCHAIN", "EthosUTarget",
           "VelaConfig", "VelaReport", "source_of"]

RUNTIME = Runtime(
    name="ethos-u",
    targets=(("ethos-u", "targets.ethosu.target:EthosUTarget"),),
    suffixes=(SUFFIX,),
    agent="targets.ethosu.agent",
    profiler=None,  # the NPU runs the whole Ethos-U operator: no per-layer times
    provision=Provision(requirements=("ai-edge-litert==2.3.0",),
                        module="ai_edge_litert.interpreter", distribution="ai-edge-litert"),
    label="Ethos-U (Vela)", colour="#9467bd",
    note="Vela's estimate for the NPU; the host runs the int8 model on LiteRT's reference "
         "kernels (fidelity only, its timings stand for nothing on the device)")
