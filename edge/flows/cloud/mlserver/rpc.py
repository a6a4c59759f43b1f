"""edge's layer on MLServer's gRPC side: the bearer token, and tensors kept binary.

The token is checked by a server interceptor (health RPCs excepted), from the call's metadata
before its message is read: UNAUTHENTICATED without it, and the request body never held.
``ModelInfer`` decodes ``raw_input_contents`` straight into numpy arrays and answers with
``raw_output_contents`` (tritonclient's default both ways), through the same checks and data
plane as REST; the server time goes back as ``server-timing`` trailing metadata. Message size
and concurrency limits are gRPC server options (RESOURCE_EXHAUSTED beyond them).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import numpy as np
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.servicers import InferenceServicer

from edge.flows.cloud.mlserver.dataplane import Inferencer, grpc_inputs, grpc_outputs
from edge.flows.cloud.tensors import RequestError
from partition.kserve import NP_TO_KSERVE, raw_bytes

OPEN_METHODS = ("/inference.GRPCInferenceService/ServerLive",
                "/inference.GRPCInferenceService/ServerReady")
_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
          413: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE}


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuse every RPC but health without ``authorization: Bearer TOKEN`` metadata."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: Any) -> Any:
        if details.method in OPEN_METHODS or self._authorized(details.invocation_metadata):
            return await continuation(details)
        return _refusal(details.method)

    def _authorized(self, metadata: Any) -> bool:
        got = dict(metadata or ()).get("authorization", "")
        value = got.encode() if isinstance(got, str) else bytes(got)
        return hmac.compare_digest(value, self._expected)


def _refusal(method: str) -> grpc.RpcMethodHandler:
    """A handler that aborts without reading the request: a streaming-request handler whose
    stream is never iterated (a unary handler would read the whole message first; the wire is
    the same either way)."""
    async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")
    if method.endswith("ModelStreamInfer"):
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.stream_unary_rpc_method_handler(refuse)


class EdgeServicer(InferenceServicer):
    """MLServer's servicer with a binary-tensor, pre-validated ``ModelInfer``."""

    def __init__(self, data_plane: Any, handlers: Any, inferencer: Inferencer) -> None:
        super().__init__(data_plane, handlers)
        self._inferencer = inferencer

    async def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC name
        try:
            inputs, outputs = await self._inferencer.specs(request.model_name,
                                                           request.model_version)
            feeds = grpc_inputs(inputs, request)
            wanted = grpc_outputs(outputs, request)
            arrays, server_ms = await self._inferencer.run(
                request.model_name, request.model_version, feeds, wanted)
        except RequestError as exc:
            await context.abort(_CODES.get(exc.status, grpc.StatusCode.INVALID_ARGUMENT),
                                str(exc))
        context.set_trailing_metadata((("server-timing", f"infer;dur={server_ms:.3f}"),))
        return _reply(request, [w.name for w in wanted], arrays)


def _reply(request: Any, names: list[str], arrays: dict[str, np.ndarray]) -> Any:
    reply = pb.ModelInferResponse(model_name=request.model_name, model_version="1",
                                  id=request.id)
    for name in names:
        array = arrays[name]
        reply.outputs.add(name=name, datatype=NP_TO_KSERVE[array.dtype.name],
                          shape=list(array.shape))
        reply.raw_output_contents.append(raw_bytes(array))
    return reply
