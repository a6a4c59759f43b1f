"""``edge serve-cloud``'s serving side: the tails of a split behind edge's front layer, on an
engine (:mod:`.engine`, MLServer the first: :mod:`.mlserver`).

- :mod:`.tensors` -- KServe v2 tensors <-> numpy, request checks (no engine import)
- :mod:`.batch` -- the batch-dynamic served copy of a tail, verified at batch 1 and the max
- :mod:`.repository` -- the repository served and exported (MLServer, Triton, KServe files)
- :mod:`.guard` -- the REST front layer (token, size, time and concurrency limits)
- :mod:`.engine` -- the ``Engine`` protocol, ``ServeConfig``, ``Limits`` and the engines' names
- :mod:`.mlserver` -- the MLServer engine (the only folder that imports ``mlserver``)

Only :mod:`edge.flows.serve_cloud` (and the child process it starts) loads an engine: MLServer's
gRPC messages and tritonclient's cannot live in one process. The KServe datatype tables are
:mod:`partition.kserve`, shared with the device-side client.
"""
