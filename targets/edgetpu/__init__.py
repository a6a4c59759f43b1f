"""Google Edge TPU (Coral): everything about it in one folder. ``target`` compiles the TFLite
target's full-int8 model with ``edgetpu_compiler`` (``compiler``: found on PATH, else the
candidate is skipped saying how to get it) and verifies the int8 model on LiteRT's reference
kernels; ``ops`` is Coral's supported-operations table and the CPU fallbacks it predicts;
``agent`` loads a ``.edgetpu.tflite`` with libedgetpu on the device.

No provisioning: the device runtime is libedgetpu1-std plus Coral's own tflite_runtime
2.5.0.post1 (which pycoral 2.0.0 pins and libedgetpu 16 is built against), from Coral's apt
repository and preinstalled on Mendel Linux; PyPI has tflite-runtime for Python 3.7 on aarch64
only from 2.7.0, and PyPI's "pycoral" is another project. No per-layer profiler: the compiled
graph is one Edge TPU operator."""

from targets.base import Runtime
from targets.edgetpu.target import ARTIFACT, SOURCE, SUFFIX, EdgeTPUTarget

__all__ = ["ARTIFACT", "RUNTIME", "SOURCE", "SUFFIX", "EdgeTPUTarget"]

RUNTIME = Runtime(
    name="edgetpu",
    targets=(("edgetpu", "targets.edgetpu.target:EdgeTPUTarget"),),
    suffixes=(SUFFIX,),
    agent="targets.edgetpu.agent",
    profiler=None,
    provision=None,
    label="Edge TPU", colour="#34a853",
    note="the int8 model the Edge TPU artifact was compiled from, on LiteRT's reference "
         "kernels: no Edge TPU here")
