"""serve-cloud as an attacker meets it: slow connections, smuggled requests, huge and deep
bodies, overload. The server runs in its own process (with a 1,024-file limit where that is the
point) and must keep answering honest clients."""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import requests
from onnx import TensorProto, helper, numpy_helper

from edge.flows.serve_cloud import EdgeCloudServer, serve

TOKEN = "attack-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-frame tail: 1x1024 -> 1x8."""
    d = tmp_path_factory.mktemp("split")
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1024, 8))
                                .astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tail",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(d / "tail.onnx"))
    return d


def _file_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.fixture(scope="module")
def server(split_dir: Path) -> Iterator[EdgeCloudServer]:
    """The server with a 1,024-file limit and a 2 s header deadline."""
    srv = serve(split_dir, token=TOKEN, preexec=_file_limit_1024, header_timeout_s=2.0)
    yield srv
    srv.close()


def _good(srv: EdgeCloudServer) -> float:
    """Seconds for one honest inference on a new connection (it must be right)."""
    x = np.ones((1, 1024), np.float32)
    body = {"inputs": [{"name": "x", "shape": [1, 1024], "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    start = time.perf_counter()
    r = requests.post(f"http://{srv.url}/v2/models/tail/infer", json=body, headers=AUTH,
                      timeout=10)
    assert r.status_code == 200, r.text
    return time.perf_counter() - start


def _rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_slowloris_does_not_starve_honest_clients(server: EdgeCloudServer) -> None:
    """1,100 connections that never finish their headers, against a 1,024-file limit: five
    honest requests are each answered within 2 s, during the attack and right after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    attackers = []
    try:
        for _ in range(1100):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"POST /v2/models/tail/infer HTTP/1.1\r\nHost: x\r\n")
            attackers.append(s)
        times = [_good(server) for _ in range(5)]
        assert max(times) < 2.0, times
    finally:
        for s in attackers:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert _good(server) < 2.0


def test_a_body_that_is_another_request_gets_one_response(server: EdgeCloudServer) -> None:
    """A GET whose Content-Length body is a second request: one response, not two (no
    request desync behind a proxy)."""
    inner = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    outer = (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: "
             + str(len(inner)).encode() + b"\r\n\r\n" + inner)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(outer)
        time.sleep(1.0)
        s.settimeout(0.5)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            pass
    assert got.count(b"HTTP/1.1 ") == 1, got


def test_huge_json_bodies_are_refused_before_they_are_read(server: EdgeCloudServer) -> None:
    """Four 60 MB JSON bodies at once: 413 each, and the server's peak memory grows < 256 MB
    (the old server grew 356-540 MB per request); an honest client is served meanwhile."""
    before = _rss_peak_mb(server.process.pid)
    body = b'{"inputs": [{"name": "x", "shape": [1, 1024], "datatype": "FP32", "data": [' + \
        b"0.5, " * (12 * 2**20) + b"0.5]}]}"
    statuses: list[int] = []

    def post() -> None:
        try:
            r = requests.post(f"http://{server.url}/v2/models/tail/infer", data=body,
                              headers={**AUTH, "Content-Type": "application/json"}, timeout=60)
            statuses.append(r.status_code)
        except requests.ConnectionError:
            statuses.append(413)  # refused and closed while the client was still sending
    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    assert _good(server) < 2.0
    for t in threads:
        t.join()
    assert statuses == [413] * 4
    assert _rss_peak_mb(server.process.pid) - before < 256


def test_a_huge_binary_body_costs_its_size_once(server: EdgeCloudServer) -> None:
    """A 60 MB binary tensor of the wrong shape: read once into one buffer, then 400."""
    before = _rss_peak_mb(server.process.pid)
    blob = np.zeros(15 * 2**20, np.float32).tobytes()
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 15 * 2**20],
                                   "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()
    r = requests.post(f"http://{server.url}/v2/models/tail/infer", data=head + blob,
                      headers={**AUTH, "Inference-Header-Content-Length": str(len(head))},
                      timeout=60)
    assert r.status_code == 400 and "shape" in r.json()["error"]
    assert _rss_peak_mb(server.process.pid) - before < 256


def test_chunked_huge_bodies_are_held_one_at_a_time(server: EdgeCloudServer) -> None:
    """Four 60 MB binary bodies at once without a Content-Length (chunked): each counts twice
    the body limit against the 192 MB held at once, so one is read at a time and the others are
    told 503; the server's peak memory grows < 256 MB (4 held at once, joined: ~480 MB)."""
    before = _rss_peak_mb(server.process.pid)
    blob = np.zeros(15 * 2**20, np.float32).tobytes()
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 15 * 2**20], "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()
    statuses: list[int] = []
    ready = threading.Barrier(4)

    def chunks() -> Iterator[bytes]:
        yield head
        ready.wait(timeout=30)  # every request's headers are in before any body is
        for i in range(0, len(blob), 2**20):
            yield blob[i:i + 2**20]

    def post() -> None:
        try:
            r = requests.post(f"http://{server.url}/v2/models/tail/infer", data=chunks(),
                              headers={**AUTH, "Inference-Header-Content-Length":
                                       str(len(head))}, timeout=60)
            statuses.append(r.status_code)
        except requests.ConnectionError:
            statuses.append(503)  # answered and closed while the client was still sending
    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) in ([400, 503, 503, 503], [400, 400, 503, 503],
                                [400, 400, 400, 503], [400] * 4)
    assert statuses.count(503) >= 1
    assert _rss_peak_mb(server.process.pid) - before < 256


@pytest.mark.parametrize("label,body", [
    ("100k-deep JSON", b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("deep tensor data", json.dumps({"inputs": [{"name": "x", "shape": [1, 1024],
                                                 "datatype": "FP32"}]}).encode()[:-3]
     + b', "data": ' + b"[" * 5000 + b"1" + b"]" * 5000 + b"}]}"),
    ("output name is a list", json.dumps({
        "inputs": [{"name": "x", "shape": [1, 1024], "datatype": "FP32", "data": [0.0] * 1024}],
        "outputs": [{"name": ["y"]}]}).encode()),
], ids=lambda value: value if isinstance(value, str) else "body")  # a body in the test's id
# would be in PYTEST_CURRENT_TEST too: past 128 KB no child process could start (E2BIG)
def test_malformed_json_is_a_400(server: EdgeCloudServer, label: str, body: bytes) -> None:
    r = requests.post(f"http://{server.url}/v2/models/tail/infer", data=body,
                      headers={**AUTH, "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400, (label, r.status_code, r.text[:200])
    assert "error" in r.json()


def test_overload_is_a_503_at_once(split_dir: Path) -> None:
    """One inference in progress allowed (its body still arriving): a second one is told 503
    at once, not queued; once the first is done the next is served."""
    srv = serve(split_dir, token=TOKEN, max_inflight=1)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as slow:
            slow.sendall(b"POST /v2/models/tail/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            time.sleep(0.3)
            start = time.perf_counter()
            x = {"inputs": [{"name": "x", "shape": [1, 1024], "datatype": "FP32",
                             "data": [0.0] * 1024}]}
            r = requests.post(f"http://{srv.url}/v2/models/tail/infer", json=x, headers=AUTH,
                              timeout=10)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert time.perf_counter() - start < 0.5
        time.sleep(0.3)  # the slow request is gone with its connection
        assert _good(srv) < 2.0
    finally:
        srv.close()
