"""Serve a tail model on MLServer over KServe v2; drive it with real tritonclient (HTTP and gRPC)
and raw bad requests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import requests
import yaml
from onnx import TensorProto, helper, numpy_helper

from edge.core.errors import UsageError
from edge.flows.serve_cloud import Batching, EdgeCloudServer, export_repository, serve
from tests.support.cli import run_cli
from tests.support.mediapipe import cache_dir
from tests.support.zoo import wheel

httpclient = pytest.importorskip("tritonclient.http")

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 1 << 20
RNG = np.random.default_rng(0)


def _tail_model() -> onnx.ModelProto:
    """Tail with a symbolic-batch FP32 input and a fixed INT64 input, one output each."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "w")
    one = numpy_helper.from_array(np.array([1], dtype=np.int64), "one")
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["y"]),
        helper.make_node("Add", ["b", "one"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tail",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("b", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("z", TensorProto.INT64, [2]),
        ],
        initializer=[w, one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A split directory holding tail.onnx."""
    d = tmp_path_factory.mktemp("split")
    onnx.save(_tail_model(), str(d / "tail.onnx"))
    return d


@pytest.fixture(scope="module")
def server(split_dir: Path) -> Iterator[EdgeCloudServer]:
    """A running authenticated server."""
    srv = serve(split_dir, token=TOKEN, max_body=MAX_BODY)
    yield srv
    srv.close()


@pytest.fixture()
def client(server: EdgeCloudServer) -> Iterator[httpclient.InferenceServerClient]:
    """A tritonclient pointed at the server."""
    c = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    yield c
    c.close()


def _feeds(n: int = 3) -> dict[str, np.ndarray]:
    """Random valid inputs."""
    return {
        "a": RNG.standard_normal((n, 4)).astype(np.float32),
        "b": np.array([5, -7], dtype=np.int64),
    }


def _local(split_dir: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Reference outputs from onnxruntime in-process."""
    sess = ort.InferenceSession(str(split_dir / "tail.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(["y", "z"], feeds)


def _infer(
    client: httpclient.InferenceServerClient, feeds: dict[str, np.ndarray], binary: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Infer y and z through tritonclient."""
    inputs = []
    for name, dt in (("a", "FP32"), ("b", "INT64")):
        inp = httpclient.InferInput(name, list(feeds[name].shape), dt)
        inp.set_data_from_numpy(feeds[name], binary_data=binary)
        inputs.append(inp)
    outs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("y", "z")]
    res = client.infer(
        "tail", inputs, outputs=outs, headers=dict(AUTH)
    )  # tritonclient mutates headers
    return res.as_numpy("y"), res.as_numpy("z")


def _url(server: EdgeCloudServer, path: str) -> str:
    """Absolute URL on the test server."""
    return f"http://127.0.0.1:{server.port}{path}"


def _good_body(n: int = 2) -> dict:
    """A valid JSON infer request."""
    f = _feeds(n)
    return {
        "inputs": [
            {"name": "a", "shape": [n, 4], "datatype": "FP32", "data": f["a"].ravel().tolist()},
            {"name": "b", "shape": [2], "datatype": "INT64", "data": [1, 2]},
        ]
    }


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_tritonclient_matches_local(client, split_dir: Path, binary: bool, n: int) -> None:
    """tritonclient results (JSON and binary tensors) equal a local onnxruntime run."""
    feeds = _feeds(n)
    y, z = _infer(client, feeds, binary)
    ref_y, ref_z = _local(split_dir, feeds)
    assert y.dtype == np.float32 and z.dtype == np.int64
    np.testing.assert_allclose(y, ref_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(z, ref_z)


def test_metadata_and_health(client, server: EdgeCloudServer) -> None:
    """Model metadata, readiness and health via tritonclient; health needs no token."""
    meta = client.get_model_metadata("tail", headers=AUTH)
    assert meta["name"] == "tail" and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [
        {"name": "a", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "b", "datatype": "INT64", "shape": [2]},
    ]
    assert meta["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "z", "datatype": "INT64", "shape": [2]},
    ]
    assert client.is_model_ready("tail", headers=AUTH)
    assert client.is_server_live() and client.is_server_ready()
    assert requests.get(_url(server, "/v2/health/live"), timeout=5).status_code == 200
    assert requests.get(_url(server, "/v2/models/tail/ready"), timeout=5).status_code == 401


def test_requested_output_subset(server: EdgeCloudServer) -> None:
    """Only the requested outputs come back."""
    body = {**_good_body(), "outputs": [{"name": "z"}]}
    r = requests.post(_url(server, "/v2/models/tail/infer"), json=body, headers=AUTH, timeout=5)
    assert r.status_code == 200
    doc = r.json()
    assert doc["model_name"] == "tail"
    assert doc["outputs"] == [{"name": "z", "shape": [2], "datatype": "INT64", "data": [2, 3]}]


def _bad_requests() -> list[tuple[str, dict, bytes, int]]:
    """(label, headers, body, expected status) for raw bad requests."""
    good = _good_body()

    def mutate(i: int, **kw: object) -> bytes:
        doc = json.loads(json.dumps(good))
        doc["inputs"][i].update(kw)
        return json.dumps(doc).encode()

    js = {**AUTH, "Content-Type": "application/json"}
    ok = json.dumps(good).encode()
    return [
        ("malformed json", js, b'{"inputs": [', 400),
        ("not an object", js, b"[1, 2]", 400),
        ("wrong shape", js, mutate(0, shape=[2, 5], data=[0.0] * 10), 400),
        ("wrong rank", js, mutate(0, shape=[8], data=[0.0] * 8), 400),
        ("zero symbolic dim", js, mutate(0, shape=[0, 4], data=[]), 400),
        ("wrong dtype", js, mutate(0, datatype="FP64"), 400),
        ("data length", js, mutate(1, data=[1, 2, 3]), 400),
        ("data values", js, mutate(1, data=["x", 2]), 400),
        ("unknown input", js, mutate(1, name="c"), 400),
        ("missing input", js, json.dumps({"inputs": good["inputs"][:1]}).encode(), 400),
        ("unknown output", js, json.dumps({**good, "outputs": [{"name": "q"}]}).encode(), 400),
        ("bad binary header", {**js, "Inference-Header-Content-Length": "99999"}, ok, 400),
        ("oversize body", js, b" " * (MAX_BODY + 1), 413),
        ("missing token", {"Content-Type": "application/json"}, ok, 401),
        (
            "wrong token",
            {"Authorization": "Bearer nope", "Content-Type": "application/json"},
            ok,
            401,
        ),
        ("basic auth", {"Authorization": "Basic " + TOKEN}, ok, 401),
    ]


@pytest.mark.parametrize(
    "label,headers,body,status", _bad_requests(), ids=[b[0] for b in _bad_requests()]
)
def test_bad_request_rejected_then_good_succeeds(
    server: EdgeCloudServer,
    client,
    split_dir: Path,
    label: str,
    headers: dict,
    body: bytes,
    status: int,
) -> None:
    """Each bad request gets its 4xx JSON error, and the server still serves a good request."""
    r = requests.post(_url(server, "/v2/models/tail/infer"), data=body, headers=headers, timeout=10)
    assert r.status_code == status, (label, r.text)
    assert "error" in r.json()
    feeds = _feeds()
    y, _ = _infer(client, feeds)
    np.testing.assert_allclose(y, _local(split_dir, feeds)[0], rtol=1e-6, atol=1e-6)


def test_metadata_needs_token(server: EdgeCloudServer) -> None:
    """Metadata without a token is 401; unknown routes are 404."""
    assert requests.get(_url(server, "/v2/models/tail"), timeout=5).status_code == 401
    assert (
        requests.get(_url(server, "/v2/models/other"), headers=AUTH, timeout=5).status_code == 404
    )


def test_refuses_to_start_without_token(split_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No token and no explicit insecure flag is an error; the flag serves without auth."""
    monkeypatch.delenv("EDGE_CLOUD_TOKEN", raising=False)
    with pytest.raises(UsageError, match="no token"):
        serve(split_dir)
    refused = run_cli("serve-cloud", str(split_dir), "--port", "0")
    assert refused.status == 2 and "no token configured" in refused.stderr
    srv = serve(split_dir / "tail.onnx", insecure_no_auth=True)
    try:
        assert requests.get(_url(srv, "/v2/models/tail"), timeout=5).status_code == 200
    finally:
        srv.close()


def test_token_from_env_and_file(
    split_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EDGE_CLOUD_TOKEN and token files configure auth."""
    monkeypatch.setenv("EDGE_CLOUD_TOKEN", "from-env")
    srv = serve(split_dir)
    try:
        url = _url(srv, "/v2/models/tail")
        assert (
            requests.get(url, headers={"Authorization": "Bearer from-env"}, timeout=5).status_code
            == 200
        )
        assert requests.get(url, headers=AUTH, timeout=5).status_code == 401
    finally:
        srv.close()
    (tmp_path / "tok").write_text("from-file\n")
    srv = serve(split_dir, token_file=tmp_path / "tok")
    try:
        url = _url(srv, "/v2/models/tail")
        assert (
            requests.get(url, headers={"Authorization": "Bearer from-file"}, timeout=5).status_code
            == 200
        )
    finally:
        srv.close()


def test_export_model_repository(split_dir: Path, tmp_path: Path) -> None:
    """The Triton layout has the model bytes and a config with types and dims; the tail's
    fixed [2] input keeps it unbatched (max_batch_size 0, the batch dim stays in dims)."""
    (tail,) = export_repository(split_dir / "tail.onnx", tmp_path / "repo")
    model_dir = tmp_path / "repo" / "tail"
    assert tail.name == "tail" and tail.max_batch == 0 and "'b'" in tail.note
    assert (model_dir / "1" / "model.onnx").read_bytes() == (split_dir / "tail.onnx").read_bytes()
    config = _triton_config(model_dir / "config.pbtxt")
    assert config.name == "tail" and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("a", [-1, 4]), ("b", [2])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [-1, 3]), ("z", [2])]
    settings = json.loads((model_dir / "model-settings.json").read_text())
    assert settings["implementation"] == "edge.flows.cloud.mlserver.runtime.TailRuntime"
    assert "max_batch_size" not in settings
    service = yaml.safe_load((tmp_path / "repo" / "inference-service.yaml").read_text())
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1",
                                                       "InferenceService")
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", service["metadata"]["name"])  # DNS-1035
    model = service["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "triton" and model["protocolVersion"] == "v2"
    assert model["storageUri"].endswith("/repo")


KSERVE_SDK = (("kserve", "0.21.0"), ("kubernetes", "37.0.1"))


def _kserve_sdk() -> Path:
    """The kserve SDK and the kubernetes client its models use, unpacked from their wheels
    (fetched once from the registry into the test cache): see tests/support/kserve_check.py."""
    root = cache_dir() / ("kserve-sdk-" + "-".join(v for _, v in KSERVE_SDK))
    if not (root / "kserve" / "models").is_dir():
        for package, version in KSERVE_SDK:
            with zipfile.ZipFile(wheel(package, version)) as zf:
                zf.extractall(root)
    return root


def _kserve_problems(manifest: Path) -> list[str]:
    done = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "support" /
                                               "kserve_check.py"), str(_kserve_sdk()),
                           str(manifest)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["problems"]


def test_the_inference_service_is_what_the_kserve_sdk_builds(split_dir: Path,
                                                             tmp_path: Path) -> None:
    """Every key of the exported InferenceService is a field of the kserve SDK's own model for
    it, of the right type, and the SDK serializes it back to the same document; a misspelled
    key or a wrong type is caught (so the check can fail)."""
    export_repository(split_dir / "tail.onnx", tmp_path / "repo")
    manifest = tmp_path / "repo" / "inference-service.yaml"
    assert _kserve_problems(manifest) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace("storageUri", "storageURI")
                   .replace("maxReplicas: 4", "maxReplicas: four"))
    assert sorted(_kserve_problems(bad)) == [
        "$.spec.predictor.maxReplicas: 'four' is not int",
        "$.spec.predictor.model.storageURI: not a field of V1beta1ModelSpec"]


def _triton_config(path: Path):  # noqa: ANN202 - a protobuf message
    """config.pbtxt parsed with Triton's own model-config schema (shipped by tritonclient)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


# ---------------------------------------------------------------- gRPC


def _grpc_inputs(grpcclient, feeds: dict[str, np.ndarray]) -> list:  # noqa: ANN001
    inputs = []
    for name, dt in (("a", "FP32"), ("b", "INT64")):
        tensor = grpcclient.InferInput(name, list(feeds[name].shape), dt)
        tensor.set_data_from_numpy(feeds[name])
        inputs.append(tensor)
    return inputs


def test_grpc_matches_local_and_needs_the_token(server: EdgeCloudServer, split_dir: Path) -> None:
    """tritonclient's gRPC client (raw binary tensors) gets the local answer; without the token
    UNAUTHENTICATED, with a bad shape INVALID_ARGUMENT, and health needs no token."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(server.grpc_url)
    feeds = _feeds(5)
    result = client.infer("tail", _grpc_inputs(grpcclient, feeds),
                          headers={"authorization": f"Bearer {TOKEN}"})
    ref_y, ref_z = _local(split_dir, feeds)
    np.testing.assert_allclose(result.as_numpy("y"), ref_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(result.as_numpy("z"), ref_z)
    assert client.is_server_live() and client.is_server_ready()
    with pytest.raises(InferenceServerException, match="UNAUTHENTICATED"):
        client.infer("tail", _grpc_inputs(grpcclient, feeds))
    bad = {**feeds, "a": np.zeros((2, 5), np.float32)}
    with pytest.raises(InferenceServerException, match="INVALID_ARGUMENT.*shape"):
        client.infer("tail", _grpc_inputs(grpcclient, bad),
                     headers={"authorization": f"Bearer {TOKEN}"})
    meta = client.get_model_metadata("tail", headers={"authorization": f"Bearer {TOKEN}"},
                                     as_json=True)
    assert [i["name"] for i in meta["inputs"]] == ["a", "b"]
    client.close()


# ---------------------------------------------------------------- dynamic batching


@pytest.fixture(scope="module")
def batchable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-frame tail (leading dim 1 everywhere): a 4->3 layer with a ReLU."""
    d = tmp_path_factory.mktemp("batchable")
    w = numpy_helper.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(d / "tail.onnx"))
    return d


def test_batchable_tail_exports_a_dynamic_batch_dim(batchable: Path, tmp_path: Path) -> None:
    (tail,) = export_repository(batchable, tmp_path / "repo", Batching(max_batch=8,
                                                                       max_delay_ms=3))
    assert tail.max_batch == 8 and tail.inputs[0].shape == (-1, 4)
    config = _triton_config(tmp_path / "repo" / "tail" / "config.pbtxt")
    assert config.max_batch_size == 8
    assert config.dynamic_batching.max_queue_delay_microseconds == 3000
    assert [list(t.dims) for t in config.input] == [[4]]  # the batch dim is implicit
    assert [list(t.dims) for t in config.output] == [[3]]
    settings = json.loads((tmp_path / "repo" / "tail" / "model-settings.json").read_text())
    assert settings["max_batch_size"] == 8 and settings["max_batch_time"] == 0.003
    session = ort.InferenceSession(str(tail.onnx), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    rows = [session.run(None, {"x": x[i:i + 1]})[0] for i in range(8)]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], np.concatenate(rows), atol=1e-6)


def test_requests_are_batched_and_each_gets_its_own_rows(batchable: Path,
                                                        tmp_path: Path) -> None:
    """With a 1 s max delay, a lone request is still answered at once (nothing else is on its
    way); 8 at once each get the answer for their own input (served from the exported
    repository: the engine loads the exported settings)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    export_repository(batchable, tmp_path / "repo", Batching(max_batch=8, max_delay_ms=1000))
    srv = serve(tmp_path / "repo", token=TOKEN)
    try:
        session = ort.InferenceSession(str(batchable / "tail.onnx"),
                                       providers=["CPUExecutionProvider"])

        def one(x: np.ndarray) -> tuple[np.ndarray, float]:
            client = httpclient.InferenceServerClient(srv.url)  # gevent: one per thread
            tensor = httpclient.InferInput("x", [1, 4], "FP32")
            tensor.set_data_from_numpy(x)
            start = time.perf_counter()
            got = client.infer("tail", [tensor], headers=dict(AUTH)).as_numpy("y")
            elapsed = time.perf_counter() - start
            client.close()
            return got, elapsed

        frames = RNG.standard_normal((8, 1, 4)).astype(np.float32)
        _, lone_s = one(frames[0])
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, frames))
        for frame, (got, _) in zip(frames, answers, strict=True):
            np.testing.assert_allclose(got, session.run(None, {"x": frame})[0], atol=1e-6)
        assert lone_s < 0.5 and max(s for _, s in answers) < 0.9
    finally:
        srv.close()


def test_a_repository_exported_before_the_engine_moved_still_serves(batchable: Path,
                                                                     tmp_path: Path) -> None:
    """Repositories exported by earlier releases name ``partition.cloud.runtime.TailRuntime``:
    serve-cloud serves them (a mirror naming today's runtime), the export left as it was."""
    export_repository(batchable, tmp_path / "repo")
    settings = tmp_path / "repo" / "tail" / "model-settings.json"
    old = json.loads(settings.read_text())
    old["implementation"] = "partition.cloud.runtime.TailRuntime"
    settings.write_text(json.dumps(old, indent=2) + "\n")
    srv = serve(tmp_path / "repo", token=TOKEN)
    try:
        client = httpclient.InferenceServerClient(srv.url)
        tensor = httpclient.InferInput("x", [1, 4], "FP32")
        x = RNG.standard_normal((1, 4)).astype(np.float32)
        tensor.set_data_from_numpy(x)
        got = client.infer("tail", [tensor], headers=dict(AUTH)).as_numpy("y")
        client.close()
        session = ort.InferenceSession(str(batchable / "tail.onnx"),
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], atol=1e-6)
    finally:
        srv.close()
    assert json.loads(settings.read_text()) == old


def test_several_processes_share_the_ports(split_dir: Path) -> None:
    """--processes 2: two engines on one REST and one gRPC port, both answering (connections
    spread by the kernel), and both stop with the parent."""
    import tritonclient.grpc as grpcclient

    srv = serve(split_dir, token=TOKEN, processes=2)
    try:
        listed = Path(f"/proc/{srv.process.pid}/task/{srv.process.pid}/children")
        children = [int(p) for p in listed.read_text().split()]
        assert len(children) >= 2
        feeds = _feeds(2)
        for _ in range(6):  # a new connection each time
            client = httpclient.InferenceServerClient(srv.url)
            y, _ = _infer(client, feeds, binary=True)
            np.testing.assert_allclose(y, _local(split_dir, feeds)[0], rtol=1e-6, atol=1e-6)
            client.close()
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        got = grpc.infer("tail", _grpc_inputs(grpcclient, feeds),
                         headers={"authorization": f"Bearer {TOKEN}"})
        assert got.as_numpy("z").tolist() == [6, -6]
        grpc.close()
    finally:
        srv.close()
    assert srv.process.returncode is not None
    time.sleep(0.5)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text()]


def test_the_cloud_side_imports_no_tensorflow() -> None:
    """``edge[cloud]`` installs no TensorFlow: serve-cloud's modules, the engine and the tail
    runtime import none of the converter stacks."""
    code = ("import sys; import edge.cli.partition, edge.flows.serve_cloud, "
            "edge.flows.cloud.mlserver.server, edge.flows.cloud.mlserver.runtime, "
            "edge.flows.cloud.repository; "
            "print(sorted(m for m in ('tensorflow', 'torch', 'openvino', 'onnx2tf', 'keras') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("where", ["port in use", "grpc port in use", "not this host"])
def test_an_address_it_cannot_listen_on_is_one_line(split_dir: Path, where: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A port another process holds, or a --bind address this host does not have: exit 2
    naming the address, before anything starts (was: an internal error from the engine)."""
    import socket

    monkeypatch.setenv("EDGE_CLOUD_TOKEN", TOKEN)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        argv = {"port in use": ["--port", str(busy)],
                "grpc port in use": ["--port", "0", "--grpc-port", str(busy)],
                "not this host": ["--bind", "192.0.2.1", "--port", "0"]}[where]
        done = run_cli("serve-cloud", str(split_dir), *argv)
    assert done.status == 2, done.stderr
    assert len(done.error_lines) == 1 and "cannot listen on" in done.stderr
