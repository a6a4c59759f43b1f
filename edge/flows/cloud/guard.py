"""edge's thin front layer on MLServer's REST side: the limits the engine does not have.

Checked in this order, each before any work the next one costs:

1. the connection: a request's headers must arrive within ``header_timeout_s`` of the connection
   (or of the previous response); when open connections reach ``max_connections`` (below the
   process's file limit) the oldest one still waiting for headers is closed (slowloris);
2. the bearer token (health endpoints excepted): 401;
3. the body: Content-Length over ``max_body``, or a JSON part over ``max_json``, is a 413 before
   a byte is read; a body slower than ``read_timeout_s`` is a 408;
4. concurrency: more than ``max_inflight`` inferences in progress, or bodies adding up to more
   than ``max_buffered`` bytes held at once (a chunked body counts twice its limit), is a 503
   at once;
5. the tensors (:mod:`edge.flows.cloud.tensors`): names, dtype, shape, size: 400.

Inference requests are decoded here (JSON or binary tensor data) and handed to the engine's
``infer`` (MLServer's data plane: its adaptive batching, workers and metrics); every other route
is the engine's own ASGI app. No engine import here: the limits are ``engine.Limits``.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from edge.flows.cloud.engine import Limits
from edge.flows.cloud.tensors import HEADER_LEN, RequestError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Infer = Callable[[str, str | None, bytes | bytearray, str | None], Awaitable[Any]]
HEALTH = ("/v2/health/live", "/v2/health/ready")


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """An inference reply: body, JSON header length (binary tensors) and server time."""

    body: bytes
    header_len: int | None
    server_ms: float


class Guard:
    """ASGI app: the limits, then inference via ``infer`` or anything else via ``app``."""

    def __init__(self, app: Any, infer: Infer, limits: Limits, grpc_port: int | None,
                 arrivals: Any = None) -> None:
        self.app, self.infer, self.limits = app, infer, limits
        self.arrivals = arrivals  # batching.Arrivals: bodies being read, for the batcher
        self.inflight = 0
        self.buffered = 0
        self._extra = [(b"edge-grpc-port", str(grpc_port).encode())] if grpc_port else []
        self._expected = f"Bearer {limits.token}".encode() if limits.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"].rstrip("/")
        if path in HEALTH:
            return await self.app(scope, receive, self._with_extra(send))
        if not self._authorized(scope):
            return await _error(send, 401, "missing or invalid bearer token")
        route = _infer_route(scope["method"], path)
        if route is None:
            return await self._other(scope, receive, send)
        await self._infer(route, scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        if self._expected is None:
            return True
        got = _header(scope, b"authorization") or b""
        return hmac.compare_digest(got, self._expected)

    def _with_extra(self, send: Send) -> Send:
        async def wrapped(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self._extra]
            await send(message)
        return wrapped

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> None:
        """MLServer's own routes, with the body limit applied to what they read."""
        try:
            _declared_length(scope, self.limits.max_body)
        except RequestError as exc:
            return await _error(send, exc.status, str(exc))
        await self.app(scope, _bounded(receive, self.limits.max_body), send)

    async def _infer(self, route: tuple[str, str | None], scope: Scope, receive: Receive,
                     send: Send) -> None:
        try:
            declared = _reservation(scope, self.limits)
        except RequestError as exc:
            return await _error(send, exc.status, str(exc))
        if self._busy(declared):
            return await _error(send, 503, "server busy: too many requests in progress",
                                [(b"retry-after", b"1")])
        self.inflight += 1
        self.buffered += declared
        try:
            body = await self._reading(scope, receive)
            header_len = _header(scope, HEADER_LEN.encode())
            reply = await self.infer(route[0], route[1], body,
                                     header_len.decode("latin-1") if header_len else None)
            await _send(send, 200, reply.body, reply.header_len, reply.server_ms)
        except RequestError as exc:
            await _error(send, exc.status, str(exc))
        finally:
            self.inflight -= 1
            self.buffered -= declared

    async def _reading(self, scope: Scope, receive: Receive) -> bytes | bytearray:
        """The body, counted as arriving while it is read (the batcher waits for it)."""
        if self.arrivals is None:
            return await self._body(scope, receive)
        self.arrivals.reading += 1
        try:
            return await self._body(scope, receive)
        finally:
            self.arrivals.reading -= 1

    def _busy(self, declared: int) -> bool:
        limits = self.limits
        budget = max(limits.max_buffered, limits.max_body)
        return self.inflight >= limits.max_inflight or self.buffered + declared > budget

    async def _body(self, scope: Scope, receive: Receive) -> bytes | bytearray:
        """The whole body, refusing what is too large before reading it, or too slow."""
        limits = self.limits
        declared = _declared_length(scope, limits.max_body)
        json_len = _header(scope, HEADER_LEN.encode())
        json_part = int(json_len) if json_len and json_len.isdigit() else declared
        if json_part is not None and json_part > limits.max_json:
            raise RequestError(f"JSON part of {json_part} bytes exceeds {limits.max_json}; send "
                               "tensors as binary data (Inference-Header-Content-Length)", 413)
        limit = limits.max_json if json_len is None else limits.max_body
        try:
            async with asyncio.timeout(limits.read_timeout_s):
                return await _read(receive, declared, limit)
        except TimeoutError:
            raise RequestError(f"body not received within {limits.read_timeout_s:g} s",
                               408) from None


async def _read(receive: Receive, declared: int | None, limit: int) -> bytes | bytearray:
    """The body into one buffer of its declared length (no second copy), else in parts."""
    if declared is None:
        return await _read_parts(receive, limit)
    body, size = bytearray(declared), 0
    while size < declared:
        message = await receive()
        chunk = _chunk(message)
        if size + len(chunk) > declared:
            raise RequestError("body longer than its Content-Length", 400)
        body[size:size + len(chunk)] = chunk
        size += len(chunk)
        if not message.get("more_body") and size < declared:
            raise RequestError(f"body ended after {size} of {declared} bytes", 400)
    return body


async def _read_parts(receive: Receive, limit: int) -> bytes:
    parts, size = [], 0
    while True:
        message = await receive()
        chunk = _chunk(message)
        size += len(chunk)
        if size > limit:
            raise RequestError(f"body exceeds {limit} bytes", 413)
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


def _chunk(message: MutableMapping[str, Any]) -> bytes:
    if message["type"] == "http.disconnect":
        raise RequestError("client disconnected", 400)
    return bytes(message.get("body", b""))


def _bounded(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def bounded() -> MutableMapping[str, Any]:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise RequestError(f"body exceeds {limit} bytes", 413)
        return message
    return bounded


def _reservation(scope: Scope, limits: Limits) -> int:
    """Bytes a request may hold while its body is read: its Content-Length, or for a chunked
    body twice its limit (the parts, then the one buffer they are joined into)."""
    declared = _declared_length(scope, limits.max_body)
    if declared is not None:
        return declared
    binary = _header(scope, HEADER_LEN.encode()) is not None
    return 2 * (limits.max_body if binary else limits.max_json)


def _declared_length(scope: Scope, limit: int) -> int | None:
    value = _header(scope, b"content-length")
    if value is None:
        return None
    if not value.isdigit():
        raise RequestError("bad Content-Length", 400)
    if int(value) > limit:
        raise RequestError(f"body of {int(value)} bytes exceeds limit {limit}", 413)
    return int(value)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _infer_route(method: str, path: str) -> tuple[str, str | None] | None:
    """(model, version) of ``POST /v2/models/NAME[/versions/V]/infer``, else None."""
    parts = path.split("/")
    if method != "POST" or len(parts) not in (5, 7) or parts[1:3] != ["v2", "models"]:
        return None
    if parts[-1] != "infer" or (len(parts) == 7 and parts[4] != "versions"):
        return None
    return parts[3], parts[5] if len(parts) == 7 else None


async def _send(send: Send, status: int, body: bytes, header_len: int | None = None,
                server_ms: float | None = None,
                extra: list[tuple[bytes, bytes]] | None = None) -> None:
    ctype = b"application/octet-stream" if header_len is not None else b"application/json"
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    if header_len is not None:
        headers.append((HEADER_LEN.encode(), str(header_len).encode()))
    if server_ms is not None:  # lets a client tell compute from time on the link
        headers.append((b"server-timing", f"infer;dur={server_ms:.3f}".encode()))
    await send({"type": "http.response.start", "status": status,
                "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


async def _error(send: Send, status: int, message: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await _send(send, status, orjson.dumps({"error": message}), extra=extra)


# ---------------------------------------------------------------- connections


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a cap on open connections."""

    header_timeout_s = 10.0
    max_connections = 960
    waiting: dict[GuardedHttp, None] = {}  # connections waiting for headers, oldest first

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm(self.header_timeout_s)
        if len(self.connections) > self.max_connections:
            self._evict()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(self.timeout_keep_alive + self.header_timeout_s)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)
        GuardedHttp.waiting[self] = None

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        GuardedHttp.waiting.pop(self, None)

    def _expire(self) -> None:
        self._deadline = None
        GuardedHttp.waiting.pop(self, None)
        self.transport.close()

    def _evict(self) -> None:
        """Close the oldest connection still waiting for its request's headers."""
        oldest = next(iter(GuardedHttp.waiting), None)
        if oldest is not None:
            oldest._expire()


def protocol(limits: Limits) -> type[GuardedHttp]:
    """The protocol class uvicorn should use with ``limits``."""
    return type("EdgeHttp", (GuardedHttp,), {"header_timeout_s": limits.header_timeout_s,
                                             "max_connections": limits.max_connections})
