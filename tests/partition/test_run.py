"""``edge partition`` end to end: cost, optimal cut, verified split files, bandwidth table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partition.split import read_split_yaml, run_split
from tests.support.cli import run_cli


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small CNN whose late layers are heavy, exported from torch."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 256, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).eval()
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    torch.onnx.export(model, torch.zeros(1, 3, 128, 128), str(path), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)
    return path


def _partition(cnn: Path, out: Path, bandwidth: float) -> dict:
    result = run_cli("partition", str(cnn), "--profile", "rpi-zero-2w", "--cloud", "cloud-t4",
                     "--bandwidth", str(bandwidth), "--rtt", "5", "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    return result.json()


def test_the_cut_follows_the_link(cnn: Path, tmp_path: Path) -> None:
    slow = _partition(cnn, tmp_path / "slow", 0.1)
    fast = _partition(cnn, tmp_path / "fast", 10_000)
    assert slow["chosen"]["kind"] == "all-edge"
    assert fast["chosen"]["kind"] in ("split", "all-cloud")
    for report in (slow, fast):
        best = report["chosen"]["total_ms"]
        assert best <= report["all_edge_ms"] + 1e-3 and best <= report["all_cloud_ms"] + 1e-3
    kinds = [row["kind"] for row in fast["bandwidth_table"]]
    assert kinds[0] == "all-edge" and kinds[-1] in ("split", "all-cloud")


def test_a_split_reproduces_the_model(cnn: Path, tmp_path: Path) -> None:
    table = _partition(cnn, tmp_path / "probe", 1.0)["bandwidth_table"]
    splits = [row for row in table if row["kind"] == "split"]
    assert splits, table  # the heavy tail pays off in some bandwidth range
    mbps = splits[0]["min_mbps"]
    report = _partition(cnn, tmp_path / "split", mbps)
    assert report["chosen"]["kind"] == "split" and report["max_abs_diff"] <= 1e-5
    plan = read_split_yaml(tmp_path / "split")
    assert plan.split.head and plan.split.tail and plan.cut
    assert plan.predicted["total_ms"] == pytest.approx(report["chosen"]["total_ms"])
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((1, 3, 128, 128)).astype(np.float32)
    whole = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"])
    split = run_split(plan.split, {"x": x})
    assert np.max(np.abs(whole.run(None, {"x": x})[0] - split["y"])) <= 1e-5


def test_serve_cloud_serves_the_tail_to_a_real_client(cnn: Path, tmp_path: Path) -> None:
    import os
    import socket
    import subprocess
    import sys
    import time

    tritonclient = pytest.importorskip("tritonclient.http")
    table = _partition(cnn, tmp_path / "probe", 1.0)["bandwidth_table"]
    mbps = next(row["min_mbps"] for row in table if row["kind"] == "split")
    _partition(cnn, tmp_path / "split", mbps)
    plan = read_split_yaml(tmp_path / "split")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, EDGE_CLOUD_TOKEN="t0ken")
    server = subprocess.Popen([sys.executable, "-m", "edge", "serve-cloud", str(tmp_path / "split"),
                               "--port", str(port), "--grpc-port", "0"], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        client = tritonclient.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while not _live(client) and time.monotonic() < deadline:
            time.sleep(0.2)
        x = np.random.default_rng(2).standard_normal((1, 3, 128, 128)).astype(np.float32)
        import onnxruntime as ort

        head = ort.InferenceSession(str(tmp_path / "split" / plan.split.head),
                                    providers=["CPUExecutionProvider"])
        cut = dict(zip(plan.split.head_outputs, head.run(list(plan.split.head_outputs),
                                                          {"x": x}), strict=True))
        inputs = []
        for name in plan.split.tail_inputs:
            tensor = tritonclient.InferInput(name, list(cut[name].shape), "FP32")
            tensor.set_data_from_numpy(cut[name], binary_data=False)
            inputs.append(tensor)
        result = client.infer("tail", inputs, headers={"Authorization": "Bearer t0ken"})
        whole = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"])
        assert np.max(np.abs(result.as_numpy("y") - whole.run(None, {"x": x})[0])) <= 1e-5
        with pytest.raises(Exception, match="401|[Uu]nauthori"):
            client.infer("tail", inputs, headers={"Authorization": "Bearer wrong"})
    finally:
        server.terminate()
        server.wait(timeout=10)


def _live(client: object) -> bool:
    try:
        return bool(client.is_server_live())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not up yet
        return False
