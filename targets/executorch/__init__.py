"""ExecuTorch (PyTorch's on-device runtime): everything about it in one folder. ``lower`` makes
the reference into ``.pte`` programs lowered to the XNNPACK delegate (fp32, and int8 through
PT2E with the XNNPACK quantizer) and reports the operators left outside the delegate;
``target`` converts and runs them here with ExecuTorch's runtime; ``agent`` loads them on the
device (executorch's bindings load libtorch: torch's wheel must be there too); its label and
colour are declared below (``RUNTIME``).

Not provisioned by edge (``provision=None``): executorch's bindings link libtorch, and PyPI's
aarch64 torch 2.13.0 is a CUDA 13 build (libtorch.so needs libtorch_cuda.so, which needs
cudart, cuBLAS, cuDNN, NCCL and cuFile from NVIDIA's wheels, gigabytes no board wants and
this host's index lacks); a CPU-only aarch64 torch comes from download.pytorch.org only.
On a device with that torch, executorch 1.5.1 installs without dependencies beside the
modules its runtime imports (docs/executorch.md; ``Provision(no_deps=True)`` is the way to
declare such a set once the wheels can be fetched).
No per-layer profiler yet: ETDump's events need the lowering's ETRecord to name layers
(docs/executorch.md).
"""

from targets.base import Runtime
from targets.executorch.target import FILES, ExecuTorchRunner, ExecuTorchTarget

__all__ = ["FILES", "RUNTIME", "ExecuTorchRunner", "ExecuTorchTarget"]

RUNTIME = Runtime(
    name="executorch",
    targets=(("executorch", "targets.executorch.target:ExecuTorchTarget"),),
    suffixes=(".pte",),
    agent="targets.executorch.agent",
    profiler=None,
    provision=None,  # see above: a device installs executorch and torch without dependencies
    label="ExecuTorch", colour="#ee4c2c")
