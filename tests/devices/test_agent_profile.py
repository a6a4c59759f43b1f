"""The agent's ``profile``: per-node kernel ms and the optimized model's ms, run as the one
file (zipapp) it is on a device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from devices.agentfile import agent_file
from targets.onnxruntime import agent as ort_agent
from tests.support.heavy import NODES, heavy_matmul_model


def _agent(*args: str, python_prelude: str = "") -> tuple[int, dict]:
    agent = str(agent_file())
    if python_prelude:
        code = (f"{python_prelude}; import runpy, sys; sys.argv = {[agent, *args]!r}; "
                f"runpy.run_path({agent!r}, run_name='__main__')")
        argv = [sys.executable, "-c", code]
    else:
        argv = [sys.executable, agent, *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return heavy_matmul_model(tmp_path_factory.mktemp("profile") / "heavy.onnx")


def _traces() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("edge-profile-")}


def test_profile_reports_every_node_and_the_whole_model(model: Path) -> None:
    before = _traces()
    status, reply = _agent("profile", "--model", str(model), "--threads", "1", "--runs", "10")
    assert status == 0, reply
    assert set(reply) >= {"nodes", "whole_ms", "device", "runtime"}
    assert set(reply["nodes"]) == set(NODES)
    assert reply["ops"] == {"big_matmul": "MatMul", "bias_add": "Add", "row_sum": "ReduceSum",
                            "tiny_relu": "Relu"}
    assert all(ms >= 0 for ms in reply["nodes"].values())
    assert reply["whole_ms"] > 0
    assert reply["nodes"]["big_matmul"] > reply["nodes"]["tiny_relu"]
    assert reply["nodes"]["big_matmul"] > 0.5 * sum(reply["nodes"].values())
    import onnxruntime

    assert reply["runtime"] == {"onnxruntime": onnxruntime.__version__}
    assert reply["device"]["cores"] >= 1 and reply["device"]["python"]
    assert reply["runs"] == 10 and reply["threads"] == 1
    assert _traces() <= before  # the ORT trace and its directory are gone


def test_profile_without_onnxruntime_names_it(model: Path) -> None:
    status, reply = _agent("profile", "--model", str(model),
                           python_prelude="import sys; sys.modules['onnxruntime'] = None")
    assert status == 3
    assert "onnxruntime" in reply["error"] and "not installed" in reply["error"]


def test_profile_bad_requests_are_json(model: Path, tmp_path: Path) -> None:
    status, reply = _agent("profile", "--model", str(tmp_path / "missing.onnx"))
    assert status == 2 and "not found" in reply["error"]
    status, reply = _agent("profile", "--model", str(model), "--runs", "0")
    assert status == 2 and "--runs" in reply["error"]
    tflite = tmp_path / "m.tflite"
    tflite.write_bytes(b"x")
    status, reply = _agent("profile", "--model", str(tflite))
    assert status == 2 and ".onnx" in reply["error"]


def test_profile_of_a_corrupt_model_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    status, reply = _agent("profile", "--model", str(bad))
    assert status == 3 and "onnxruntime cannot load" in reply["error"]
    assert "\n" not in reply["error"]


def test_kernel_ms_drops_the_warm_up_and_averages() -> None:
    def event(name: str, dur: float, cat: str = "Node") -> dict:
        return {"cat": cat, "name": name, "dur": dur, "args": {}}

    events = [event("a_kernel_time", 9000), event("b_kernel_time", 9000),  # warm-up
              event("a_kernel_time", 1000), event("b_kernel_time", 3000),
              event("a_kernel_time", 2000), event("b_kernel_time", 5000),
              event("a_fence_before", 7000), event("SequentialExecutor::Execute", 1e6, "Session"),
              {"cat": "Node", "name": "x_kernel_time", "dur": 4000, "args": {"node_name": "c"}}]
    assert ort_agent.kernel_ms(events, 2) == pytest.approx({"a": 1.5, "b": 4.0, "c": 2.0})


def test_kernel_ops_name_each_nodes_operator() -> None:
    events = [{"cat": "Node", "name": "a_kernel_time", "dur": 1, "args": {"op_name": "Conv"}},
              {"cat": "Node", "name": "b_kernel_time", "dur": 1, "args": {}},
              {"cat": "Node", "name": "c_fence_before", "dur": 1, "args": {"op_name": "Add"}}]
    assert ort_agent.kernel_ops(events) == {"a": "Conv", "b": "?"}


def test_profile_feeds_follow_the_cost_model() -> None:
    class Arg:
        def __init__(self, name: str, shape: list, type_: str) -> None:
            self.name, self.shape, self.type = name, shape, type_

    feeds = ort_agent.profile_feeds(np, [Arg("x", ["batch", 3], "tensor(float)"),
                                     Arg("ids", [None, 4], "tensor(int64)"),
                                     Arg("mask", [2], "tensor(bool)")])
    assert feeds["x"].shape == (1, 3) and feeds["x"].dtype == np.float32
    assert feeds["ids"].shape == (1, 4) and not feeds["ids"].any()
    assert feeds["mask"].dtype == np.bool_ and not feeds["mask"].any()
