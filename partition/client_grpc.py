"""The split client's gRPC link: KServe v2 ``ModelInfer`` with raw binary tensors on one
HTTP/2 connection (grpcio and tritonclient's generated messages; absent on a device without them,
which then keeps to REST). The server's compute time comes back as ``server-timing`` trailing
metadata, as REST's ``Server-Timing`` header."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from edge.core.errors import DeviceError, UsageError
from partition.kserve import (
    MAX_REPLY,
    NP_TO_KSERVE,
    BadReply,
    Expected,
    Reply,
    raw_bytes,
    raw_tensor,
    server_ms,
    token_refused,
)

_UNREACHABLE = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


class GrpcUnreachable(ConnectionError):
    """The gRPC side cannot be reached (the caller may fall back to REST)."""


def available() -> bool:
    """Whether this device can speak gRPC (grpcio and tritonclient's messages installed)."""
    try:
        import grpc  # noqa: F401
        from tritonclient.grpc import service_pb2  # noqa: F401
    except ImportError:
        return False
    return True


class GrpcLink:
    """One gRPC channel to the server's KServe v2 service."""

    def __init__(self, host: str, port: int, token: str | None, timeout_s: float) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self._pb, self._grpc = service_pb2, grpc
        self._channel = grpc.insecure_channel(f"{host}:{port}", options=[
            ("grpc.max_send_message_length", MAX_REPLY),
            ("grpc.max_receive_message_length", MAX_REPLY)])
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._token = token
        self._timeout = timeout_s
        self.where = f"{host}:{port}"

    def close(self) -> None:
        self._channel.close()

    def ping(self) -> float:
        """Wall ms of ServerReady."""
        start = time.perf_counter()
        self._call(self._stub.ServerReady, self._pb.ServerReadyRequest())
        return (time.perf_counter() - start) * 1e3

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], expect: Expected) -> Reply:
        """One ModelInfer with raw tensors both ways (the whole call within the timeout, the
        reply at most MAX_REPLY bytes and checked against ``expect``)."""
        request = _request(self._pb, model, inputs, list(expect.names))
        start = time.perf_counter()
        response, call = self._call(self._stub.ModelInfer.with_call, request)
        wall = (time.perf_counter() - start) * 1e3
        trailing = dict(call.trailing_metadata() or ())
        try:
            outputs = _decode(response, expect)
        except BadReply as exc:
            raise DeviceError(f"cloud server {self.where} sent a bad gRPC reply: {exc}") from None
        return Reply(outputs, wall, server_ms(str(trailing.get("server-timing", ""))),
                     request.ByteSize(), response.ByteSize())

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self._timeout)
        except self._grpc.RpcError as exc:
            code = exc.code().name if exc.code() else "UNKNOWN"
            if code == "UNAUTHENTICATED":
                raise UsageError(token_refused(self.where, self._token)) from None
            if code in _UNREACHABLE:
                raise GrpcUnreachable(f"{self.where}: {code} {exc.details()}") from None
            raise DeviceError(f"cloud server {self.where} refused the request: gRPC {code} "
                              f"{str(exc.details())[:300]}") from None


def _request(pb: Any, model: str, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> Any:
    request = pb.ModelInferRequest(model_name=model)
    for name, value in inputs.items():
        array = np.asarray(value)
        request.inputs.add(name=name, datatype=NP_TO_KSERVE[array.dtype.name],
                           shape=list(array.shape))
        request.raw_input_contents.append(raw_bytes(array))
    for name in outputs:
        request.outputs.add(name=name)
    return request


def _decode(response: Any, expect: Expected) -> dict[str, np.ndarray]:
    """The reply's raw outputs, each checked against ``expect`` before it becomes an array."""
    if len(response.raw_output_contents) != len(response.outputs):
        raise BadReply(f"{len(response.outputs)} outputs with "
                       f"{len(response.raw_output_contents)} raw contents")
    out: dict[str, np.ndarray] = {}
    seen: dict[str, int] = {}
    for raw, entry in zip(response.raw_output_contents, response.outputs, strict=True):
        name, datatype, shape = expect.check(entry.name, entry.datatype, list(entry.shape), seen)
        if name in out:
            raise BadReply(f"output {name!r} twice")
        out[name] = raw_tensor(raw, datatype, shape, name)
    expect.complete(out)
    return out

