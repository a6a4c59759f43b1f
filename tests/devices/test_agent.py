"""The on-device agent, run as the one file (a zipapp) it is on a device."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from devices.agent import timing
from devices.agentfile import agent_file


def _agent(*args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(agent_file()), *args], capture_output=True,
                          text=True, check=False)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_percentiles_match_numpy() -> None:
    values = list(np.random.default_rng(0).exponential(size=101))
    for q in (50, 90, 99):
        assert timing.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_install_moves_only_a_verified_file(tmp_path: Path) -> None:
    src, dest = tmp_path / "up.partial", tmp_path / "rel" / "model.onnx"
    src.write_bytes(b"payload")
    status, reply = _agent("install", str(src), str(dest), "--sha256", "0" * 64)
    assert status == 3 and "checksum mismatch" in reply["error"]
    assert not src.exists() and not dest.exists()
    src.write_bytes(b"payload")
    status, reply = _agent("install", str(src), str(dest), "--sha256",
                           hashlib.sha256(b"payload").hexdigest())
    assert status == 0 and dest.read_bytes() == b"payload" and not src.exists()


def test_activate_switches_current_and_refuses_escapes(tmp_path: Path) -> None:
    (tmp_path / "releases" / "abc").mkdir(parents=True)
    assert _agent("activate", str(tmp_path), "abc")[0] == 0
    assert (tmp_path / "current").resolve() == (tmp_path / "releases" / "abc").resolve()
    for bad in ("../abc", "..", "nope"):
        status, reply = _agent("activate", str(tmp_path), bad)
        assert status == 2 and "error" in reply
    assert (tmp_path / "current").resolve() == (tmp_path / "releases" / "abc").resolve()


def test_bench_onnx_reports_percentiles_and_memory() -> None:
    model = Path(__file__).parents[2] / "edge" / "samples" / "digits.onnx"
    status, reply = _agent("bench", str(model), "--runs", "12", "--warmup", "2",
                           "--threads", "1")
    assert status == 0, reply
    (result,) = reply["results"]
    assert result["runs"] == 12 and result["threads"] == 1 and result["model"] == str(model)
    assert 0 < result["p50_ms"] <= result["p90_ms"] <= result["p99_ms"]
    assert reply["rounds"] == 5 and reply["order"] == [[0]] * 5
    assert reply["peak_rss_mb"] > 10 and reply["device"]["cores"] >= 1


def test_bench_errors_are_json(tmp_path: Path) -> None:
    status, reply = _agent("bench", str(tmp_path / "missing.onnx"))
    assert status == 2 and "not found" in reply["error"]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    status, reply = _agent("bench", str(bad))
    assert status == 3 and reply["error"].startswith(f"onnxruntime cannot load {bad}: ")
    assert "\n" not in reply["error"]
    status, reply = _agent("bench", str(bad), "--rounds", "0")
    assert status == 2 and "--rounds" in reply["error"]


def _matmul_model(path: Path, n: int, seed: int | None = None) -> Path:
    """x[1, n] @ W[n, n]: the work grows with n squared (weights from ``seed``, default n)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(n if seed is None else seed).standard_normal((n, n))
        .astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], f"mm{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_bench_times_several_models_interleaved(tmp_path: Path) -> None:
    small, big = _matmul_model(tmp_path / "s.onnx", 16), _matmul_model(tmp_path / "b.onnx", 1024)
    status, reply = _agent("bench", str(small), str(big), "--runs", "12", "--rounds", "4",
                           "--warmup", "1", "--idle-s", "0.01", "--threads", "1")
    assert status == 0, reply
    assert [r["model"] for r in reply["results"]] == [str(small), str(big)]
    assert [r["runs"] for r in reply["results"]] == [12, 12]  # 3 timed calls in each round
    assert reply["rounds"] == 4 and reply["order"] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    fast, slow = (r["p50_ms"] for r in reply["results"])
    assert 0 < fast < slow, reply  # 4096x the multiply-adds: a structural gap
    status, reply = _agent("bench", str(small), str(big), "--runs", "1000", "--rounds", "1000",
                           "--warmup", "0", "--idle-s", "0", "--min-rounds", "3",
                           "--budget-s", "0.000001")
    assert status == 0 and reply["rounds"] == 3, reply  # over budget: the fewest allowed
    assert [r["runs"] for r in reply["results"]] == [3, 3]


def test_bench_of_several_models_drops_one_that_does_not_load(tmp_path: Path) -> None:
    model = _matmul_model(tmp_path / "m.onnx", 8)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    status, reply = _agent("bench", str(broken), str(model), "--runs", "3")
    assert status == 0, reply
    failed, timed = reply["results"]
    assert failed["error"].startswith(f"onnxruntime cannot load {broken}")
    assert "p50_ms" not in failed
    assert timed["runs"] == 3 and reply["order"] == [[1]] * 3
    status, reply = _agent("bench", str(broken), str(broken))
    assert status == 3 and "cannot load" in reply["error"]  # none loads: the first error


def test_perf_reads_openvino_counters_and_refuses_other_models(tmp_path: Path) -> None:
    import openvino as ov

    onnx_model = _matmul_model(tmp_path / "m.onnx", 256)
    xml = tmp_path / "m.xml"
    ov.save_model(ov.convert_model(str(onnx_model)), str(xml), compress_to_fp16=False)
    status, reply = _agent("perf", "--model", str(xml), "--runs", "5")
    assert status == 0, reply
    assert reply["whole_ms"] > 0 and reply["runs"] == 5
    assert any(node["op"] in ("MatMul", "FullyConnected") and node["ms"] > 0  # CPU plugin op
               for node in reply["nodes"].values()), reply["nodes"]
    status, reply = _agent("perf", "--model", str(onnx_model))
    assert status == 2 and "not an OpenVINO IR" in reply["error"]


def test_an_ir_computes_as_it_records_or_the_agent_refuses_it(tmp_path: Path) -> None:
    import openvino as ov

    xml = tmp_path / "m.xml"
    model = ov.convert_model(str(_matmul_model(tmp_path / "m.onnx", 64)))
    model.set_rt_info("f16", ["edge", "inference_precision"])  # as the OpenVINO target records
    ov.save_model(model, str(xml), compress_to_fp16=False)
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f16"})
    here = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # this CPU's f16
    for command in (("bench", str(xml), "--runs", "3"), ("perf", "--model", str(xml))):
        status, reply = _agent(*command)
        if here == "f16":  # a CPU with fp16 arithmetic computes it as recorded
            assert status == 0, reply
        else:  # OpenVINO would silently compute another precision: refused, saying which
            assert status == 3 and f"made to compute in f16, but OpenVINO computes {here}" \
                in reply["error"], reply


def test_perf_on_device_keeps_irs_with_the_same_xml_apart(tmp_path: Path) -> None:
    """Two IRs whose .xml is identical (same graph) but whose weights differ must not share a
    stored .bin on the device: each pair is stored under a name from both files."""
    import openvino as ov

    from devices.device import open_device
    from devices.transport import LocalTransport
    from targets.openvino.profiling import openvino_counters

    irs = []
    for seed in (1, 2):
        onnx_model = _matmul_model(tmp_path / f"m{seed}.onnx", 64, seed=seed)
        irs.append(tmp_path / f"ir{seed}" / "model.xml")
        irs[-1].parent.mkdir()
        ov.save_model(ov.convert_model(str(onnx_model)), str(irs[-1]), compress_to_fp16=False)
    irs[1].write_bytes(irs[0].read_bytes())  # same graph, same offsets: only the weights differ
    assert irs[0].with_suffix(".bin").read_bytes() != irs[1].with_suffix(".bin").read_bytes()
    device = open_device(LocalTransport(tmp_path / "device"), python=sys.executable,
                         work_dir="~/.edge")
    for ir in irs:
        assert openvino_counters(ir, runs=2, device=device)["whole_ms"] > 0
    stored = sorted((tmp_path / "device" / ".edge" / "models").glob("*.bin"))
    assert len(stored) == 2 and stored[0].read_bytes() != stored[1].read_bytes()
