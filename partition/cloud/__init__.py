"""``edge serve-cloud`` on MLServer: edge's tail runtime, front layer and model repository.

- :mod:`.tensors` -- KServe v2 tensors <-> numpy, request checks (no engine import)
- :mod:`.batch` -- the batch-dynamic served copy of a tail, verified at batch 1 and the max
- :mod:`.repository` -- the repository served and exported (MLServer, Triton, KServe files)
- :mod:`.runtime` -- ``TailRuntime``, the MLServer runtime (onnxruntime)
- :mod:`.guard` -- the REST front layer (token, size, time and concurrency limits)
- :mod:`.dataplane` -- validated inference through MLServer's data plane
- :mod:`.rpc` -- the gRPC token interceptor and binary-tensor ``ModelInfer``
- :mod:`.engine` -- MLServer started with those pieces

Only :mod:`partition.serve` (and the child process it starts) imports the engine modules:
MLServer's gRPC messages and tritonclient's cannot live in one process. Nothing here imports
the rest of ``partition``: :mod:`partition.serve` resolves the tails and hands them over.
"""
