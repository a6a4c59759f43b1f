"""The REST link of the split client: one keep-alive ``http.client`` connection speaking
KServe v2 with the binary tensor extension, that trusts its server with nothing. Each request
has one deadline for the whole exchange, reply included (a server trickling a byte at a time
cannot stretch it); a reply body is at most ``MAX_REPLY`` bytes (a larger Content-Length is
refused before a byte is read, a chunked body counted as it arrives); its JSON part is bounded
in size and depth; every output is checked against what was asked and what the tail declares
(:class:`partition.kserve.Expected`) before it becomes an array.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import socket
import time
import urllib.parse
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
    json_tensor,
    raw_bytes,
    raw_tensor,
    server_ms,
    token_refused,
)

__all__ = ["HEADER_LEN", "MAX_REPLY_JSON", "CloudUnreachable", "HttpLink"]

HEADER_LEN = "Inference-Header-Content-Length"
#: Largest JSON part of a reply (a compliant server sends tensors as binary data), and of a
#: health or error reply
MAX_REPLY_JSON = 16 * 2**20


class CloudUnreachable(DeviceError):
    """The cloud server cannot be reached (as opposed to refusing a request)."""


class HttpLink:
    """One keep-alive HTTP connection speaking KServe v2 with binary tensors."""

    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        try:
            parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
            port = parsed.port  # ValueError when not a port number
        except ValueError:
            parsed, port = None, None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UsageError(f"--url {url!r} is not http[s]://HOST:PORT")
        self.https = parsed.scheme == "https"
        self.host, self._port = parsed.hostname, port or (443 if self.https else 80)
        self.grpc_port: int | None = None  # offered by the server's health replies
        self._base = parsed.path.rstrip("/")
        self._token, self._timeout = token, timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def where(self) -> str:
        """host:port, as errors name the server."""
        return f"{self.host}:{self._port}"

    def ping(self) -> float:
        """Wall ms of GET /v2/health/ready."""
        start = time.perf_counter()
        status, headers, body = self._request("GET", "/v2/health/ready", b"", {},
                                              MAX_REPLY_JSON)
        if status != 200:
            raise DeviceError(f"cloud server not ready: HTTP {status} from "
                              f"{self.where}/v2/health/ready (is edge serve-cloud "
                              "running there?)")
        offered = headers.get("edge-grpc-port")
        self.grpc_port = int(offered) if offered and offered.isdigit() else None
        return (time.perf_counter() - start) * 1e3

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], expect: Expected) -> Reply:
        """POST one binary inference request and decode the binary reply."""
        body, header_len = _request_body(inputs, list(expect.names))
        headers = {"Content-Type": "application/octet-stream", HEADER_LEN: str(header_len)}
        start = time.perf_counter()
        status, reply_headers, data = self._request(
            "POST", f"/v2/models/{urllib.parse.quote(model, safe='')}/infer", body, headers,
            MAX_REPLY)
        wall = (time.perf_counter() - start) * 1e3
        if status == 401:
            raise UsageError(token_refused(self.where, self._token))
        if status != 200:
            raise DeviceError(f"cloud server {self.where} refused the request: HTTP {status} "
                              f"{_error_text(data)}")
        try:
            outputs = _decode(data, reply_headers.get(HEADER_LEN), expect)
        except BadReply as exc:
            raise DeviceError(f"cloud server {self.where} sent a bad reply: {exc}") from None
        return Reply(outputs, wall, server_ms(reply_headers.get("Server-Timing")), len(body),
                     len(data))

    def _request(self, method: str, path: str, body: bytes, headers: dict[str, str],
                 cap: int) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request on the kept-alive connection, reconnecting once if it went stale; the
        whole exchange (both tries) ends within the timeout, and the reply body is at most
        ``cap`` bytes."""
        headers = dict(headers)  # never share a headers dict between requests
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        deadline = time.monotonic() + self._timeout
        for attempt in (0, 1):
            try:
                return self._exchange(method, path, body, headers, deadline, cap)
            except _TooLarge as exc:
                self.close()
                raise DeviceError(f"cloud server {self.where} sent a reply {exc}; "
                                  f"at most {cap} bytes are read") from None
            except (ConnectionError, http.client.HTTPException, TimeoutError, OSError) as exc:
                self.close()
                if time.monotonic() >= deadline:
                    raise CloudUnreachable(f"cloud server {self.where} sent no complete reply "
                                           f"within {self._timeout:g} s") from None
                if attempt:
                    raise CloudUnreachable(f"cannot reach the cloud server at {self.where}: "
                                           f"{exc}") from None
        raise AssertionError("unreachable")

    def _exchange(self, method: str, path: str, body: bytes, headers: dict[str, str],
                  deadline: float, cap: int) -> tuple[int, http.client.HTTPMessage, bytes]:
        conn = self._connection(deadline)
        reply = functools.partial(_Response, deadline=deadline)
        conn.response_class = reply  # type: ignore[assignment]
        conn.sock.settimeout(_left(deadline))
        conn.request(method, self._base + path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.headers, _body(response, cap)

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = cls(self.host, self._port, timeout=_left(deadline))
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conn = conn
        return self._conn


class _TooLarge(Exception):
    """A reply body over the cap (``str``: how large)."""


def _left(deadline: float) -> float:
    """Seconds until ``deadline``; TimeoutError when it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the reply's deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read bounded by one deadline for the whole reply (a server that
    trickles a byte at a time cannot stretch it)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        # through the socket's own raw file: it keeps the socket open while the body is read
        # (http.client closes the connection's socket at once on a Connection: close reply)
        self._sock, self._raw, self._deadline = sock, sock.makefile("rb", buffering=0), deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(_left(self._deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, read under the request's deadline."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


def _body(response: http.client.HTTPResponse, cap: int) -> bytes:
    """The body, at most ``cap`` bytes: a Content-Length over it is refused before reading, a
    chunked body is counted as it arrives."""
    if response.length is not None:
        if response.length > cap:
            raise _TooLarge(f"of {response.length} bytes (Content-Length)")
        return response.read()
    parts, size = [], 0
    while chunk := response.read1(1 << 20):
        size += len(chunk)
        if size > cap:
            raise _TooLarge(f"of more than {cap} bytes (chunked)")
        parts.append(chunk)
    return b"".join(parts)


def _request_body(inputs: Mapping[str, np.ndarray], outputs: list[str]) -> tuple[bytes, int]:
    """KServe v2 JSON header + binary blobs; returns the body and the header's length."""
    entries, blobs = [], []
    for name, value in inputs.items():
        array = np.asarray(value)
        blob = raw_bytes(array)
        entries.append({"name": name, "shape": list(array.shape),
                        "datatype": NP_TO_KSERVE[array.dtype.name],
                        "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    doc = {"inputs": entries,
           "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs]}
    header = json.dumps(doc).encode()
    return header + b"".join(blobs), len(header)


def _decode(data: bytes, header_len: str | None, expect: Expected) -> dict[str, np.ndarray]:
    """The outputs of a KServe v2 reply (binary or JSON tensors), each checked against what
    was asked and what the tail declares before it becomes an array."""
    size = _json_size(header_len, len(data))
    entries = _entries(_parse(data[:size]))
    out: dict[str, np.ndarray] = {}
    seen: dict[str, int] = {}
    offset = size
    for entry in entries:
        name, datatype, shape = expect.check(entry.get("name"), entry.get("datatype"),
                                             entry.get("shape"), seen)
        if name in out:
            raise BadReply(f"output {name!r} twice")
        nbytes = (entry.get("parameters") or {}).get("binary_data_size")
        if nbytes is None:
            out[name] = json_tensor(entry.get("data"), datatype, shape, name)
            continue
        if type(nbytes) is not int or not 0 <= nbytes <= len(data) - offset:
            raise BadReply(f"output {name!r}: binary_data_size {nbytes!r} is not in the body")
        out[name] = raw_tensor(memoryview(data)[offset:offset + nbytes], datatype, shape, name)
        offset += nbytes
    expect.complete(out)
    return out


def _json_size(header_len: str | None, total: int) -> int:
    """Bytes of the reply's JSON part (Inference-Header-Content-Length, else all of it)."""
    if header_len is None:
        size = total
    elif header_len.isdigit() and int(header_len) <= total:
        size = int(header_len)
    else:
        raise BadReply(f"{HEADER_LEN} {header_len[:40]!r} is not within the body")
    if size > MAX_REPLY_JSON:
        raise BadReply(f"JSON part of {size} bytes (at most {MAX_REPLY_JSON}; ask for binary "
                       "tensors)")
    return size


class _NotJson(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, JSON (RFC 8259) has none."""


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} (not a JSON number)")


def _json(text: bytes) -> Any:
    """``json.loads`` refusing the non-JSON constants NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=_no_constant)


def _parse(text: bytes) -> Any:
    """The JSON part, refused when not JSON (NaN/Infinity included) or nested beyond any
    reply's depth."""
    try:
        return _json(text)
    except RecursionError:
        raise BadReply("JSON nested too deep") from None
    except _NotJson as exc:
        raise BadReply(f"not JSON: it holds {exc}") from None
    except ValueError:
        raise BadReply("not KServe v2 JSON") from None


def _entries(doc: Any) -> list[dict[str, Any]]:
    """The reply's ``outputs`` entries, each a JSON object."""
    entries = doc.get("outputs") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadReply("no list of outputs")
    return entries


def _error_text(data: bytes) -> str:
    try:
        return str(_json(data[:MAX_REPLY_JSON]).get("error", ""))[:300]
    except RecursionError:
        return "(its error body nested too deep)"
    except (ValueError, AttributeError):
        return data[:300].decode("utf-8", "replace")
