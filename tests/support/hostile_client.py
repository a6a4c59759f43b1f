"""Hostile corpus cases of issue 27 (hostile_client); see tests/support/hostile.py.

``client ...``: ``edge run-split`` against a server that answers badly (a real socket server
in a thread of the test process, :class:`HostileServer`: it answers health requests honestly
and every inference with the bytes, timing and framing a case gives). ``fifo ...``: a split
folder holding a FIFO where a file should be, for run-split and serve-cloud.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from tests.support.hostile import Case

DIGITS = Path(__file__).parents[1] / "fixtures" / "edge-0.2" / "digits-split"
#: What the digits tail declares: logits FP32 [1, 10].
GOOD_OUTPUT = {"name": "logits", "datatype": "FP32", "shape": [1, 10]}
#: A reply: writes itself on the socket (after the request was read); may block until ``stop``.
Answer = Callable[[socket.socket, threading.Event], None]


class HostileServer:
    """A KServe-ish server on 127.0.0.1 (ephemeral port): health is 200, every other request
    gets ``answer`` (or ``health`` for health requests when given)."""

    def __init__(self, answer: Answer, health: Answer | None = None) -> None:
        self._answer, self._health = answer, health
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            reader = conn.makefile("rb")
            while not self._stop.is_set():
                request = _read_request(reader)
                if request is None:
                    return
                if request.startswith(b"GET") and self._health is None:
                    conn.sendall(_http(200, b"{}", {"Content-Type": "application/json"}))
                    continue
                (self._health if request.startswith(b"GET") and self._health
                 else self._answer)(conn, self._stop)
                return  # one hostile answer per connection


def _read_request(reader: BinaryIO) -> bytes | None:
    """The request line (its body read and dropped), None when the client went away."""
    head = []
    while (line := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
        head.append(line)
    if not head:
        return None
    length = next((int(h.split(b":", 1)[1]) for h in head
                   if h.lower().startswith(b"content-length:")), 0)
    reader.read(length)
    return head[0]


def _http(status: int, body: bytes, headers: Mapping[str, str] | None = None,
          length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body) if length is None else length}",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def sends(data: bytes) -> Answer:
    """An answer of exactly these bytes, then the connection closed."""
    return lambda conn, stop: conn.sendall(data)


def json_reply(doc: object, status: int = 200) -> Answer:
    """A JSON reply holding ``doc`` (a str is sent as it is)."""
    body = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
    return sends(_http(status, body, {"Content-Type": "application/json"}))


def binary_reply(outputs: list[dict[str, object]], blobs: bytes,
                 header_len: str | None = None) -> Answer:
    """A binary-tensor reply: the JSON header (``outputs``), then ``blobs``."""
    header = json.dumps({"outputs": outputs}).encode()
    return sends(_http(200, header + blobs, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": header_len or str(len(header))}))


def endless_chunks(status: int = 200) -> Answer:
    """A chunked body that never ends (1 MiB chunks until the client hangs up)."""
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(f"HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n"
                     "Content-Type: application/json\r\n\r\n".encode())
        chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
        while not stop.is_set():
            conn.sendall(chunk)
    return answer


def trickle(data: bytes, every_s: float = 5.0) -> Answer:
    """``data`` one byte every ``every_s`` seconds."""
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        for byte in data:
            conn.sendall(bytes([byte]))
            if stop.wait(every_s):
                return
    return answer


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Reads the request and never answers (until the case ends)."""
    stop.wait(120)


def serving(answer: Answer, health: Answer | None = None
            ) -> Callable[[Path], contextlib.AbstractContextManager[Mapping[str, str]]]:
    """Case.around: a HostileServer for the command's run, its address as {url}."""
    @contextlib.contextmanager
    def around(folder: Path) -> Iterator[Mapping[str, str]]:
        server = HostileServer(answer, health)
        try:
            yield {"url": server.url}
        finally:
            server.close()
    return around


def copy_split(folder: Path) -> Path:
    """The digits split (edge 0.2's fixture) copied to ``folder/s``."""
    return Path(shutil.copytree(DIGITS, folder / "s"))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _json_answers() -> dict[str, Answer]:
    """name -> a JSON reply that breaks the tail's contract."""
    def one(**entry: object) -> Answer:
        return json_reply({"outputs": [{**GOOD_OUTPUT, "data": [0.5] * 10, **entry}]})
    floats = [0.5] * 10
    return {
        "nested 200000 deep": json_reply(_deep(200_000)),
        "objects nested 200000 deep": json_reply('{"a":' * 200_000 + "1" + "}" * 200_000),
        "data nested 200000 deep": json_reply(
            '{"outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 10], "data": '
            + _deep(200_000) + "}]}"),
        "INT64 1e30": one(datatype="INT64", data=[1e30] * 10),
        "UINT8 -1": one(datatype="UINT8", data=[-1] * 10),
        "FP32 1e39": one(data=[1e39] * 10),
        "FP32 NaN": one(data=[float("nan")] * 10),
        "FP32 Infinity": one(data=[0.5] * 9 + [float("inf")]),
        "FP32 -Infinity": one(data=[float("-inf")] + [0.5] * 9),
        "FP32 NaN Infinity -Infinity 1e-46": json_reply(
            '{"outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 10], "data": '
            "[NaN, Infinity, -Infinity, 1e-46, 0, 0, 0, 0, 0, 0]}]}"),
        "INT8 300": one(datatype="INT8", data=[300] * 10),
        "BOOL 2": one(datatype="BOOL", data=[2] * 10),
        "INT32 for FP32": one(datatype="INT32", data=[1] * 10),
        "no outputs": json_reply({"outputs": []}),
        "renamed output": one(name="y"),
        "an extra output": json_reply({"outputs": [{**GOOD_OUTPUT, "data": floats},
                                                   {**GOOD_OUTPUT, "name": "z", "data": floats}]}),
        "the output twice": json_reply({"outputs": [{**GOOD_OUTPUT, "data": floats}] * 2}),
        "shape [3,7] for [1,10]": one(shape=[3, 7], data=[0.5] * 21),
        "shape [10] for [1,10]": one(shape=[10]),
        "shape [1,10,1]": one(shape=[1, 10, 1]),
        "shape [2,10]": one(shape=[2, 10], data=[0.5] * 20),
        "UINT64 2**64": one(datatype="UINT64", data=[2**64] * 10),
        "FP32 data of booleans": one(data=[True] * 10),
        "error body nested 200000 deep": json_reply(_deep(200_000), status=500),
        "error object nested 200000 deep": json_reply(
            '{"error":' * 200_000 + "1" + "}" * 200_000, status=400),
    }


def _binary_answers() -> dict[str, Answer]:
    """name -> a binary-tensor reply that breaks the tail's contract."""
    def one(nbytes: int, **entry: object) -> Answer:
        return binary_reply([{**GOOD_OUTPUT, **entry,
                              "parameters": {"binary_data_size": nbytes}}], b"\0" * nbytes)
    return {
        "binary shape [3,7]": one(84, shape=[3, 7]),
        "binary FP64 for FP32": one(80, datatype="FP64"),
        "binary INT64 for FP32": one(80, datatype="INT64"),
        "binary FP16 for FP32": one(20, datatype="FP16"),
        "binary renamed output": one(40, name="y"),
        "binary shape [40] UINT8": one(40, shape=[40], datatype="UINT8"),
    }


def _runaway_answers() -> dict[str, Answer]:
    """name -> a reply that grows the client without bound (isolated cases)."""
    return {
        "Content-Length 10^12": sends(_http(200, b"{", length=10**12)),
        "endless chunked body": endless_chunks(),
        "endless chunked error body": endless_chunks(500),
    }


def _run_split(*extra: str) -> tuple[str, ...]:
    return ("run-split", "{d}/s", "--url", "{url}", "--cut", "all-cloud", "--runs", "1",
            "--warmup", "0", *extra)


def _client_cases() -> Iterator[Case]:
    for name, answer in {**_json_answers(), **_binary_answers()}.items():
        yield Case(f"client {name}", _run_split(), copy_split, (3,), serving(answer))
    for name, answer in _runaway_answers().items():
        yield Case(f"client {name}", _run_split(), copy_split, (3,), serving(answer),
                   isolated=True)
    yield Case("client health Content-Length 10^12", _run_split(), copy_split, (3,),
               serving(silent, sends(_http(200, b"{", length=10**12))), isolated=True)
    timed: dict[str, tuple[Answer, Answer | None]] = {
        "reply trickled a byte every 5 s": (trickle(_http(200, b'{"outputs": []}')), None),
        "body trickled a byte every 2 s": (_slow_body(), None),
        "reply that never comes": (silent, None),
        "health trickled a byte every 5 s": (silent, trickle(_http(200, b"{}")))}
    for name, (answer, health) in timed.items():
        yield Case(f"client {name}", _run_split("--timeout", "3"), copy_split, (3,),
                   serving(answer, health))


def _slow_body() -> Answer:
    """Headers at once, then the body a byte every 2 s."""
    body = json.dumps({"outputs": [{**GOOD_OUTPUT, "data": [0.5] * 10}]}).encode()
    head = _http(200, b"", {"Content-Type": "application/json"}, length=len(body))

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        trickle(body, 2.0)(conn, stop)
    return answer


# ---------------------------------------------------------------- FIFOs in a split folder


def _fifo_at(relative: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        path = copy_split(folder) / relative
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    return make


FIFO_FILES = {"split.yaml": "split.yaml", "tail": "tail.onnx", "head": "cuts/c2/head.onnx",
              "cut tail": "cuts/c2/tail.onnx", "companion": "tail.onnx.data"}
FIFO_COMMANDS = {
    "run-split": ("run-split", "{d}/s", "--url", "http://127.0.0.1:9", "--cut", "c2",
                  "--runs", "1", "--warmup", "0"),
    "serve-cloud --export-repository": ("serve-cloud", "{d}/s", "--export-repository",
                                        "{d}/out"),
    "serve-cloud": ("serve-cloud", "{d}/s", "--insecure-no-auth", "--port", "0",
                    "--grpc-port", "0"),
}


def _fifo_cases() -> Iterator[Case]:
    for what, relative in FIFO_FILES.items():
        for command, argv in FIFO_COMMANDS.items():
            if (what, command) == ("split.yaml", "run-split"):
                continue  # refused before (split.yaml must be a file), if as "no such"
            yield Case(f"fifo {what} {command}", argv, _fifo_at(relative))


def cases() -> Iterator[Case]:
    yield from _client_cases()
    yield from _fifo_cases()
