"""The split client against a server that answers badly (issue 27): every reply is bounded in
time and size and checked against the tail before it becomes an array; a split folder holding
a FIFO is refused before anything opens it."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge.core.errors import DeviceError, UsageError
from edge.core.files import only_regular_files
from edge.flows.runsplit import RunSplitOptions, run
from edge.flows.serve_cloud import export_repository
from partition.client import SplitClient
from partition.kserve import BadReply, Declared, Expected, json_tensor, raw_tensor
from tests.support.cli import run_cli
from tests.support.hostile_client import (
    GOOD_OUTPUT,
    Answer,
    HostileServer,
    binary_reply,
    copy_split,
    endless_chunks,
    json_reply,
    sends,
    silent,
    trickle,
)

FRAME = {"input": np.zeros((1, 1, 8, 8), np.float32)}


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_split(tmp_path_factory.mktemp("split"))


def _infer(split: Path, answer: Answer, timeout_s: float = 30.0) -> dict[str, np.ndarray]:
    server = HostileServer(answer)
    try:
        with SplitClient(split, server.url, cut="all-cloud", timeout_s=timeout_s) as client:
            return client.infer(FRAME).outputs
    finally:
        server.close()


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_good_binary_reply_is_taken(split: Path) -> None:
    logits = np.arange(10, dtype=np.float32)
    got = _infer(split, binary_reply([{**GOOD_OUTPUT, "parameters": {"binary_data_size": 40}}],
                                     logits.tobytes()))
    assert np.array_equal(got["logits"], logits.reshape(1, 10))


def test_a_good_json_reply_is_taken(split: Path) -> None:
    got = _infer(split, json_reply({"outputs": [{**GOOD_OUTPUT, "data": [0.5] * 10}]}))
    assert got["logits"].dtype == np.float32 and got["logits"].shape == (1, 10)


@pytest.mark.parametrize(("answer", "why"), [
    (json_reply("[" * 200_000 + "]" * 200_000), "nested too deep"),
    (json_reply({"outputs": []}), "no output 'logits'"),
    (json_reply({"outputs": [{**GOOD_OUTPUT, "name": "y", "data": [0.5] * 10}]}),
     "'y' was not asked for"),
    (json_reply({"outputs": [{**GOOD_OUTPUT, "shape": [3, 7], "data": [0.5] * 21}]}),
     "shape [3, 7]; the tail declares [1, 10]"),
    (json_reply({"outputs": [{**GOOD_OUTPUT, "datatype": "INT64", "data": [1e30] * 10}]}),
     "is INT64; the tail declares FP32"),
    (json_reply({"outputs": [{**GOOD_OUTPUT, "data": [1e39] * 10}]}), "not FP32"),
    (binary_reply([{**GOOD_OUTPUT, "parameters": {"binary_data_size": 44}}], b"\0" * 44),
     "44 bytes for shape [1, 10]"),
    (json_reply("[" * 200_000 + "]" * 200_000, status=500), "nested too deep"),
], ids=["nested", "no outputs", "renamed", "shape 3x7", "INT64 1e30", "FP32 1e39",
        "bytes", "error nested"])
def test_a_bad_reply_is_one_device_error_naming_the_server(split: Path, answer: Answer,
                                                           why: str) -> None:
    with pytest.raises(DeviceError, match="127.0.0.1:") as caught:
        _infer(split, answer)
    assert why in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_json_reply_are_refused(split: Path, constant: str) -> None:
    """JSON (RFC 8259) has no NaN or Infinity: Python's json reads them, the client must not."""
    data = ", ".join([constant] + ["0.5"] * 9)
    answer = json_reply('{"outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 10], '
                        f'"data": [{data}]}}]}}')
    with pytest.raises(DeviceError, match="127.0.0.1:") as caught:
        _infer(split, answer)
    assert f"{constant} (not a JSON number)" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_nan_in_an_error_body_is_shown_as_text(split: Path) -> None:
    with pytest.raises(DeviceError, match="HTTP 500") as caught:
        _infer(split, json_reply('{"error": NaN}', status=500))
    assert '{"error": NaN}' in str(caught.value)


def test_a_huge_content_length_is_refused_before_reading(split: Path) -> None:
    before = _peak_mb()
    with pytest.raises(DeviceError, match="Content-Length"):
        _infer(split, sends(b"HTTP/1.1 200 X\r\nContent-Length: 1000000000000\r\n\r\n{"))
    assert _peak_mb() - before < 64


def test_an_endless_chunked_body_is_cut_off_at_the_cap(split: Path) -> None:
    """It grew the client 1.9 GB in 2 s and kept going; now at most the 256 MiB cap is read."""
    before, start = _peak_mb(), time.monotonic()
    with pytest.raises(DeviceError, match="chunked"):
        _infer(split, endless_chunks())
    assert time.monotonic() - start < 20 and _peak_mb() - before < 700


@pytest.mark.parametrize("answer", [
    trickle(b"HTTP/1.1 200 X\r\nContent-Length: 2\r\n\r\n{}", 1.0), silent,
    trickle(b"HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\n \r\n" * 100, 0.2),
], ids=["trickled head", "silent", "trickled chunks"])
def test_the_whole_reply_has_one_deadline(split: Path, answer: Answer) -> None:
    """A byte every second kept a per-read timeout from ever firing (still waiting at 60 s)."""
    start = time.monotonic()
    with pytest.raises(DeviceError, match="no complete reply within 2 s"):
        _infer(split, answer, timeout_s=2.0)
    assert time.monotonic() - start < 4


def test_run_split_takes_a_timeout(split: Path) -> None:
    server = HostileServer(silent)
    try:
        start = time.monotonic()
        done = run_cli("run-split", str(split), "--url", server.url, "--cut", "all-cloud",
                       "--runs", "1", "--warmup", "0", "--timeout", "1.5")
    finally:
        server.close()
    assert done.status == 3 and "within 1.5 s" in done.stderr
    assert time.monotonic() - start < 5
    assert run_cli("run-split", str(split), "--url", "http://127.0.0.1:9",
                   "--timeout", "0").status == 2


# ---------------------------------------------------------------- the checks themselves


@pytest.mark.parametrize(("data", "datatype"), [
    ([1e30], "INT64"), ([-1], "UINT8"), ([256], "UINT8"), ([2**64], "UINT64"), ([2], "BOOL"),
    ([0.5], "INT32"), ([1e5], "FP16"), ([True], "FP32"), (["a"], "FP32"), ([[1], [2, 3]], "FP32"),
])
def test_json_values_outside_the_dtype_are_refused(data: list[object], datatype: str) -> None:
    with pytest.raises(BadReply):
        json_tensor(data, datatype, (len(data),), "y")


def test_json_values_inside_the_dtype_are_kept() -> None:
    assert json_tensor([0, 255], "UINT8", (2,), "y").tolist() == [0, 255]
    assert json_tensor([-(2**63), 2**63 - 1], "INT64", (2,), "y").dtype == np.int64
    assert json_tensor([1, 0], "BOOL", (1, 2), "y").tolist() == [[True, False]]
    assert np.isinf(json_tensor([float("inf")], "FP32", (1,), "y")[0])


def test_dynamic_dims_are_resolved_from_the_request() -> None:
    expect = Expected(("y", "z"), {"y": Declared("FP32", ("batch", 10)),
                                   "z": Declared("FP32", ("n", None))}, {"batch": 2})
    seen: dict[str, int] = {}
    assert expect.check("y", "FP32", [2, 10], seen)[2] == (2, 10)
    assert expect.check("z", "FP32", [7, 3], seen)[2] == (7, 3)
    with pytest.raises(BadReply, match="shape"):
        expect.check("y", "FP32", [3, 10], {})
    with pytest.raises(BadReply, match="shape"):
        expect.check("z", "FP32", [8, 3], seen)  # n was 7 in this reply


def test_raw_bytes_must_fill_the_shape_exactly() -> None:
    with pytest.raises(BadReply, match="bytes"):
        raw_tensor(b"\0" * 12, "FP32", (1, 2), "y")
    with pytest.raises(BadReply, match="BOOL"):
        raw_tensor(b"\x02", "BOOL", (1,), "y")
    assert raw_tensor(b"\0" * 8, "FP32", (1, 2), "y").shape == (1, 2)


def test_a_grpc_reply_is_checked_the_same_way() -> None:
    from tritonclient.grpc import service_pb2

    from partition.client_grpc import _decode

    expect = Expected(("y",), {"y": Declared("FP32", (1, 10))})
    reply = service_pb2.ModelInferResponse()
    reply.outputs.add(name="y", datatype="FP32", shape=[3, 7])
    reply.raw_output_contents.append(b"\0" * 84)
    with pytest.raises(BadReply, match="shape"):
        _decode(reply, expect)
    reply.outputs[0].name = "z"
    with pytest.raises(BadReply, match="not asked for"):
        _decode(reply, expect)
    good = service_pb2.ModelInferResponse()
    good.outputs.add(name="y", datatype="FP32", shape=[1, 10])
    with pytest.raises(BadReply, match="raw contents"):
        _decode(good, expect)
    good.raw_output_contents.append(b"\0" * 40)
    assert _decode(good, expect)["y"].shape == (1, 10)


# ---------------------------------------------------------------- FIFOs


@pytest.fixture
def fifo_split(tmp_path: Path) -> Iterator[Path]:
    split = copy_split(tmp_path)
    yield split


@pytest.mark.parametrize("relative", ["tail.onnx", "cuts/c2/head.onnx", "cuts/c2/tail.onnx"])
def test_a_fifo_in_the_split_folder_is_refused_before_it_is_opened(fifo_split: Path,
                                                                    relative: str) -> None:
    (fifo_split / relative).unlink()
    os.mkfifo(fifo_split / relative)
    with pytest.raises(UsageError, match="not a regular file"):
        run(fifo_split, RunSplitOptions(url="http://127.0.0.1:9", cut="c2", runs=1))
    with pytest.raises(UsageError, match="not a regular file"):
        export_repository(fifo_split, fifo_split.parent / "out")
    assert not (fifo_split.parent / "out").exists()


def test_only_regular_files_passes_a_plain_folder_and_missing_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nothing")
    only_regular_files(tmp_path, "folder")
    only_regular_files(tmp_path / "missing", "folder")
    os.mkfifo(tmp_path / "a" / "p")
    with pytest.raises(UsageError, match="a/p is not a regular file"):
        only_regular_files(tmp_path, "folder")
    assert json.dumps(str(tmp_path))  # the message names the path as given
