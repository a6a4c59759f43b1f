"""The split runtime end to end on loopback: `edge partition` writes every cut of its bandwidth
table, `serve-cloud` serves all their tails, and the edge client runs any of them (or switches
by itself) and returns what the whole model returns."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge.core.errors import DeviceError, UsageError
from edge.flows.serve_cloud import EdgeCloudServer, serve
from partition.client import SplitClient
from partition.split import model_outputs, read_split_yaml
from tests.support.cli import run_cli
from tests.support.splitnet import SplitNet

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def split_dir(splitnet: SplitNet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """splitnet split for a slow device (estimated costs) over 10 Mbit/s, int8 on the wire."""
    out = tmp_path_factory.mktemp("split") / "splitnet-split"
    result = run_cli("partition", str(splitnet.onnx), "--profile", "rpi-zero-2w", "--cloud",
                     "cloud-t4", "--bandwidth", "10", "--rtt", "1", "--compress", "int8",
                     "--calib", str(splitnet.samples), "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def server(split_dir: Path) -> Iterator[EdgeCloudServer]:
    srv = serve(split_dir, token=TOKEN, threads=1)
    yield srv
    srv.close()


def _assert_same_answer(got: np.ndarray, want: np.ndarray, *, exact: bool) -> None:
    """Equal within 1e-5 (fp32 on the wire), or within int8 transfer error (5% of the largest
    logit) with the same class whenever the model's top two logits are further apart than that."""
    assert got.shape == want.shape
    tolerance = 1e-5 if exact else 0.05 * float(np.abs(want).max()) + 1e-3
    assert float(np.abs(got - want).max()) <= tolerance
    top2 = np.sort(want.ravel())[-2:]
    if top2[1] - top2[0] > 2 * tolerance:
        assert int(got.argmax()) == int(want.argmax())


def _frames(splitnet: SplitNet, count: int = 4) -> np.ndarray:
    return np.load(splitnet.samples)[:count]


def test_partition_writes_every_cut_of_the_table(split_dir: Path) -> None:
    plan = read_split_yaml(split_dir)
    kinds = {c.kind for c in plan.cuts}
    assert kinds == {"all-edge", "split", "all-cloud"}, kinds
    ids = {c.id for c in plan.cuts}
    assert {row["cut_id"] for row in plan.bandwidth_table} <= ids
    assert plan.compression == "int8"
    for cut in plan.cuts:
        for half in (cut.split.head, cut.split.tail):
            assert half is None or half.is_file()
    split = next(c for c in plan.cuts if c.kind == "split")
    wire = [c for c in plan.cut if c.get("tensor")]
    assert wire and all(c["dtype"] == "uint8" for c in wire)  # compressed on the wire
    # the device sends a quarter of the float bytes of the cut
    assert split.up_bytes == sum(c["bytes"] for c in plan.cut if c["name"] in
                                 split.split.tail_inputs)


@pytest.mark.parametrize("kind", ["all-edge", "split", "all-cloud"])
def test_every_cut_returns_the_models_answer(kind: str, split_dir: Path, server: EdgeCloudServer,
                                             splitnet: SplitNet) -> None:
    frames = _frames(splitnet)
    with SplitClient(split_dir, server.url, token=TOKEN, cut=kind) as client:
        for frame in frames:
            feeds = {"frame": frame[None]}
            want = model_outputs(splitnet.onnx, feeds)["logits"]
            got = client.infer(feeds)
            assert got.kind == kind
            _assert_same_answer(got.outputs["logits"], want, exact=kind != "split")
            if kind == "all-edge":
                assert got.up_bytes == 0 and got.link_ms == 0.0
            else:
                assert got.up_bytes > 0 and got.cloud_ms > 0.0


def test_split_sends_far_less_than_the_frame(split_dir: Path, server: EdgeCloudServer,
                                             splitnet: SplitNet) -> None:
    feeds = {"frame": _frames(splitnet, 1)}
    with SplitClient(split_dir, server.url, token=TOKEN, cut="split") as client:
        split = client.infer(feeds)
    with SplitClient(split_dir, server.url, token=TOKEN, cut="all-cloud") as client:
        cloud = client.infer(feeds)
    assert split.up_bytes * 8 < cloud.up_bytes  # int8 features vs the float32 frame


def test_client_measures_the_link_and_picks_the_best_predicted_cut(
        split_dir: Path, server: EdgeCloudServer, splitnet: SplitNet) -> None:
    with SplitClient(split_dir, server.url, token=TOKEN, probe_every_s=0.0) as client:
        assert not client.link.measured
        for frame in _frames(splitnet, 8):
            client.infer({"frame": frame[None]})
        link = client.link
        best = min(client.cuts, key=lambda c: c.predicted_ms(link.uplink_mbps,
                                                             link.downlink_mbps, link.rtt_ms))
        assert link.measured and link.uplink_mbps > 10  # loopback is much faster than planned
        assert link.rtt_ms < 50
        assert client.choose().id == best.id or best.split.tail is None


def test_cloud_down_falls_back_to_the_device(split_dir: Path, splitnet: SplitNet) -> None:
    srv = serve(split_dir, token=TOKEN, threads=1)
    url = srv.url
    srv.close()
    feeds = {"frame": _frames(splitnet, 1)}
    with SplitClient(split_dir, url, token=TOKEN, probe_every_s=0.0, timeout_s=2) as client:
        got = client.infer(feeds)
        assert got.kind == "all-edge"
        assert client.last_error and "cannot reach" in client.last_error
    with SplitClient(split_dir, url, token=TOKEN, cut="split", timeout_s=2) as client, \
            pytest.raises(DeviceError, match="cannot reach the cloud server"):
        client.infer(feeds)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("token", ["wrong", None])
def test_a_refused_token_names_the_fix(split_dir: Path, server: EdgeCloudServer,
                                       splitnet: SplitNet, protocol: str, token: str | None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP 401 and gRPC UNAUTHENTICATED are the user's to fix: one usage error saying how
    (not the gRPC port's refusal code)."""
    monkeypatch.delenv("EDGE_CLOUD_TOKEN", raising=False)
    want = ("refused the bearer token: give the token the server was started with" if token
            else "needs a bearer token and none was given: pass the server's token with "
                 "--token-file FILE or set $EDGE_CLOUD_TOKEN")
    with SplitClient(split_dir, server.url, token=token, cut="split",
                     protocol=protocol) as client, pytest.raises(UsageError) as caught:
        client.infer({"frame": _frames(splitnet, 1)})
    assert want in str(caught.value) and "\n" not in str(caught.value)
    assert "UNAUTHENTICATED" not in str(caught.value) and "HTTP 401" not in str(caught.value)


@pytest.mark.parametrize("protocol", ["auto", "http", "grpc"])
def test_the_link_is_grpc_when_offered_and_rest_when_asked(
        split_dir: Path, server: EdgeCloudServer, splitnet: SplitNet, protocol: str) -> None:
    """auto takes the gRPC port the server offers; both links give the model's answer and a
    server time."""
    frame = _frames(splitnet, 1)
    want = model_outputs(splitnet.onnx, {"frame": frame})["logits"]
    with SplitClient(split_dir, server.url, token=TOKEN, cut="all-cloud",
                     protocol=protocol) as client:
        got = client.infer({"frame": frame})
        assert client.protocol == ("http" if protocol == "http" else "grpc")
    _assert_same_answer(got.outputs["logits"], want, exact=True)
    assert got.cloud_ms > 0 and got.up_bytes >= frame.nbytes


def test_grpc_that_cannot_be_reached_falls_back_to_rest(split_dir: Path, splitnet: SplitNet,
                                                        tmp_path: Path) -> None:
    """A server whose gRPC port is not reachable from the device (a proxy that passes only
    HTTP, here a closed port): auto keeps going over REST, grpc is a device error."""
    from edge.flows.serve_cloud import Batching

    srv = serve(split_dir, token=TOKEN, threads=1, batching=Batching(max_batch=1))
    try:
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            closed = free.getsockname()[1]
        frame = {"frame": _frames(splitnet, 1)}
        with SplitClient(split_dir, srv.url, token=TOKEN, cut="all-cloud") as client:
            client._http._rest.ping()
            client._http._rest.grpc_port = closed  # what a proxy in front would hide
            client._http._decide()
            assert client.infer(frame).cloud_ms > 0 and client.protocol == "http"
    finally:
        srv.close()


def test_unknown_cut_is_refused(split_dir: Path) -> None:
    with pytest.raises(UsageError, match="not a cut of this split"):
        SplitClient(split_dir, "http://127.0.0.1:9", cut="c99")


def test_run_split_cli(split_dir: Path, server: EdgeCloudServer, splitnet: SplitNet,
                       tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    out = tmp_path / "outputs.npz"
    result = run_cli("run-split", str(split_dir), "--url", f"http://{server.url}", "--input",
                     str(splitnet.samples), "--runs", "5", "--cut", "split", "--token-file",
                     str(token_file), "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["kind"] for r in report["runs"]] == ["split"] * 5
    assert report["summary"]["runs"] == 5 and report["summary"]["median_ms"] > 0
    saved = np.load(out)
    frames = np.load(splitnet.samples)
    for i in range(5):
        want = model_outputs(splitnet.onnx, {"frame": frames[i:i + 1]})["logits"]
        _assert_same_answer(saved[f"logits/{i}"], want, exact=False)


def test_run_split_cli_errors(split_dir: Path, tmp_path: Path) -> None:
    bad_cut = run_cli("run-split", str(split_dir), "--url", "http://127.0.0.1:9", "--cut", "c99")
    assert bad_cut.status == 2 and bad_cut.stderr.count("\n") == 1
    assert "not a cut of this split" in bad_cut.stderr
    down = run_cli("run-split", str(split_dir), "--url", "http://127.0.0.1:9", "--cut", "split")
    assert down.status == 3 and down.stderr.count("\n") == 1, down.stderr
    assert not list(tmp_path.iterdir())
    missing = run_cli("run-split", str(tmp_path / "nope"), "--url", "http://127.0.0.1:9")
    assert missing.status == 2 and "split.yaml" in missing.stderr


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999", "http://h:port",
                                 "ftp://h:1"])
def test_a_url_that_is_not_one_is_one_line(split_dir: Path, url: str) -> None:
    done = run_cli("run-split", str(split_dir), "--url", url, "--cut", "all-cloud")
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    assert "is not http[s]://HOST:PORT" in done.stderr


def test_a_server_that_is_not_edge_is_named_not_echoed(split_dir: Path) -> None:
    """An HTTP server that answers 404 to the health check: exit 3 naming the address, without
    echoing what it sent."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"<html>SECRET-PAGE</html>\n" * 50)

        def log_message(self, *args: object) -> None:
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        done = run_cli("run-split", str(split_dir), "--url",
                       f"http://127.0.0.1:{httpd.server_address[1]}", "--cut", "all-cloud")
    finally:
        httpd.shutdown()
    assert done.status == 3 and len(done.error_lines) == 1, done.stderr
    assert "HTTP 404" in done.stderr and "SECRET-PAGE" not in done.stderr


def test_tritonclient_reaches_every_served_tail(split_dir: Path, server: EdgeCloudServer,
                                                splitnet: SplitNet) -> None:
    import tritonclient.http as httpclient

    plan = read_split_yaml(split_dir)
    cloud = next(c for c in plan.cuts if c.kind == "all-cloud")
    client = httpclient.InferenceServerClient(server.url)
    frame = _frames(splitnet, 1).astype(np.float32)
    tensor = httpclient.InferInput("frame", list(frame.shape), "FP32")
    tensor.set_data_from_numpy(frame, binary_data=True)
    result = client.infer(cloud.model, [tensor],
                          headers={"Authorization": f"Bearer {TOKEN}"})
    want = model_outputs(splitnet.onnx, {"frame": frame})["logits"]
    np.testing.assert_allclose(result.as_numpy("logits"), want, atol=1e-5)
    client.close()


def test_start_up_time_does_not_trigger_a_probe(split_dir: Path, server: EdgeCloudServer) -> None:
    """A client that takes a while between being made and its first inference (a slow device
    loading grpc, say) does not spend that first inference on a probe: the probe clock starts
    when the link is first measured."""
    import time

    with SplitClient(split_dir, server.url, token=TOKEN, probe_every_s=1.0) as client:
        time.sleep(1.2)
        assert client._probe_due()  # idle since it was made...
        client.measure_rtt()
        assert not client._probe_due()  # ...but the link has just come up
