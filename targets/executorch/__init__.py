"""ExecuTorch (PyTorch's on-device runtime): everything about it in one folder. ``lower`` makes
the reference into ``.pte`` programs lowered to the XNNPACK delegate (fp32, and int8 through
PT2E with the XNNPACK quantizer) and reports the operators left outside the delegate;
``target`` converts and runs them here with ExecuTorch's runtime; ``agent`` loads them on the
device; its wheels (executorch needs torch's beside it), label and colour are declared below
(``RUNTIME``). No per-layer profiler yet (ETDump needs a runtime built with the devtools)."""

from targets.base import Provision, Runtime
from targets.executorch.target import FILES, ExecuTorchRunner, ExecuTorchTarget

__all__ = ["FILES", "RUNTIME", "ExecuTorchRunner", "ExecuTorchTarget"]

RUNTIME = Runtime(
    name="executorch",
    targets=(("executorch", "targets.executorch.target:ExecuTorchTarget"),),
    suffixes=(".pte",),
    agent="targets.executorch.agent",
    profiler=None,
    provision=Provision(requirements=("executorch==1.5.1", "torch==2.13.0"),
                        module="executorch.runtime", distribution="executorch"),
    label="ExecuTorch", colour="#ee4c2c")
