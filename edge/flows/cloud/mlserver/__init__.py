"""MLServer, the first :class:`edge.flows.cloud.engine.Engine`: the only folder that imports
``mlserver`` (an import-linter contract).

- :mod:`.runtime` -- ``TailRuntime``, the MLServer runtime (onnxruntime)
- :mod:`.dataplane` -- validated inference through MLServer's data plane
- :mod:`.rpc` -- the gRPC token interceptor and binary-tensor ``ModelInfer``
- :mod:`.batching` -- ``EagerBatcher``: the adaptive batcher waiting only while bodies arrive
- :mod:`.server` -- MLServer started with those pieces and edge's front layer
- :mod:`.processes` -- several server processes on shared ports
"""

from __future__ import annotations

from edge.flows.cloud.engine import ServeConfig
from edge.flows.cloud.mlserver.processes import run

__all__ = ["ENGINE", "MLServerEngine"]


class MLServerEngine:
    """Serves a repository on MLServer, in this process or ``config.processes`` processes."""

    name = "mlserver"

    def serve(self, config: ServeConfig) -> None:
        """Serve until SIGINT/SIGTERM."""
        run(config)


ENGINE = MLServerEngine()
