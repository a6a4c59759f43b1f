"""Closed-loop load for bench/serve_load.py: N edge clients, each on its own connection, each
sending its next request when the previous reply is in. REST is raw HTTP/1.1 keep-alive with
the binary tensor extension (the request bytes built once); gRPC is one channel per client with
the ModelInferRequest serialized once. Latencies are wall time per request; errors are non-2xx
replies; resets are connections the server dropped or refused (the client reconnects)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import numpy as np

_NP_TO_KSERVE = {"float32": "FP32", "uint8": "UINT8", "int64": "INT64", "float16": "FP16",
                 "int8": "INT8", "int32": "INT32", "float64": "FP64", "bool": "BOOL"}


@dataclass(slots=True)
class Tally:
    """What one run measured."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    resets: int = 0

    def summary(self, seconds: float) -> dict[str, float | int]:
        lat = np.array(self.latencies_ms) if self.latencies_ms else np.array([np.nan])
        return {"requests": len(self.latencies_ms),
                "throughput_rps": round(len(self.latencies_ms) / seconds, 1),
                "p50_ms": round(float(np.percentile(lat, 50)), 2),
                "p99_ms": round(float(np.percentile(lat, 99)), 2),
                "errors": self.errors, "resets": self.resets}


def http_request(host: str, port: int, model: str, feeds: dict[str, np.ndarray],
                 token: str) -> bytes:
    """One whole HTTP/1.1 inference request, binary tensors in and out."""
    entries, blobs = [], []
    for name, array in feeds.items():
        blob = np.ascontiguousarray(array).tobytes()
        entries.append({"name": name, "shape": list(array.shape),
                        "datatype": _NP_TO_KSERVE[array.dtype.name],
                        "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    head = json.dumps({"inputs": entries, "parameters": {"binary_data_output": True}}).encode()
    body = head + b"".join(blobs)
    return (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(head)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def grpc_request(model: str, feeds: dict[str, np.ndarray]) -> bytes:
    """A serialized ModelInferRequest with raw tensors."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in feeds.items():
        request.inputs.add(name=name, datatype=_NP_TO_KSERVE[array.dtype.name],
                           shape=list(array.shape))
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    return request.SerializeToString()


async def _reply(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _http_client(host: str, port: int, request: bytes, until: float, warm: float,
                       tally: Tally) -> None:
    conn = None
    while time.perf_counter() < until:
        start = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.open_connection(host, port)
            conn[1].write(request)
            status = await _reply(conn[0])
        except (OSError, asyncio.IncompleteReadError, ValueError):
            tally.resets += start >= warm
            if conn is not None:
                conn[1].close()
            conn = None
            await asyncio.sleep(0.01)
            continue
        if start >= warm:
            tally.latencies_ms.append((time.perf_counter() - start) * 1e3)
            tally.errors += not 200 <= status < 300
    if conn is not None:
        conn[1].close()


async def _grpc_client(target: str, request: bytes, token: str, until: float, warm: float,
                       tally: Tally) -> None:
    import grpc

    limit = 256 * 2**20
    async with grpc.aio.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit)]) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        metadata = (("authorization", f"Bearer {token}"),)
        while time.perf_counter() < until:
            start = time.perf_counter()
            try:
                await call(request, metadata=metadata, timeout=30)
                ok = True
            except grpc.aio.AioRpcError as exc:
                ok = False
                tally.resets += exc.code() == grpc.StatusCode.UNAVAILABLE and start >= warm
            if start >= warm:
                tally.latencies_ms.append((time.perf_counter() - start) * 1e3)
                tally.errors += not ok


async def _run(kind: str, target: tuple[str, int], request: bytes, token: str, clients: int,
               warmup_s: float, seconds: float) -> Tally:
    tally = Tally()
    warm = time.perf_counter() + warmup_s
    until = warm + seconds
    if kind == "http":
        jobs = [_http_client(*target, request, until, warm, tally) for _ in range(clients)]
    else:
        where = f"{target[0]}:{target[1]}"
        jobs = [_grpc_client(where, request, token, until, warm, tally) for _ in range(clients)]
    await asyncio.gather(*jobs)
    return tally


def load(kind: str, target: tuple[str, int], request: bytes, token: str, clients: int,
         warmup_s: float, seconds: float) -> dict[str, float | int]:
    """Run ``clients`` closed-loop clients for ``warmup_s`` + ``seconds``; the summary."""
    import uvloop

    tally = uvloop.run(_run(kind, target, request, token, clients, warmup_s, seconds))
    return tally.summary(seconds)
