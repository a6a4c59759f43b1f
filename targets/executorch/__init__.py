"""ExecuTorch (PyTorch's on-device runtime): everything about it in one folder. ``lower`` makes
the reference into ``.pte`` programs lowered to the XNNPACK delegate (fp32, and int8 through
PT2E with the XNNPACK quantizer) and reports the operators left outside the delegate;
``target`` converts and runs them here with ExecuTorch's runtime; ``agent`` loads them on the
device (executorch's bindings load libtorch: torch's wheel must be there too); its label and
colour are declared below (``RUNTIME``).

Not provisioned by edge (``provision=None``): edge's provisioning resolves a runtime's
dependencies on this host, where executorch 1.5.1's x86-64-only requirement (coremltools 9.0,
no aarch64 wheel) is taken as the device's, and its other requirements (torchao, hydra, the
tokenizers, pandas) are converter tools a device does not need; what a device needs is
``executorch==1.5.1`` and ``torch==2.13.0`` installed without dependencies beside numpy.
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
