"""Agent replies checked against their schemas (devices/replies.py, issue 39): a lying device is
one DeviceError naming the command and the field; the real agent's replies pass."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devices.agentfile import agent_file
from devices.replies import SCHEMAS, check_reply
from edge.core.errors import DeviceError

ENTRY = {"model": "m.onnx", "runtime": "onnxruntime", "runtime_version": "1.20", "runs": 5,
         "warmup": 1, "threads": 1, "p50_ms": 1.0, "p90_ms": 1.2, "p99_ms": 1.3,
         "mean_ms": 1.1, "load_ms": 20.0, "round_ms": [1.0, 1.1], "throughput_fps": 900.0}
GOOD: dict[str, dict[str, Any]] = {
    "bench": {"results": [ENTRY], "rounds": 2, "threads": 1, "peak_rss_mb": 50.0,
              "device": {"cores": 4, "mem_total_mb": 3800.0, "machine": "aarch64"},
              "metrics": {"before": {}}},
    "health": {"healthy": True, "runtime": "onnxruntime", "load_ms": 3.0, "run_ms": 1.0},
    "verify": {"release": "ab12", "present": ["model.onnx"], "missing": [], "names": ["m"],
               "free_bytes": 10**9, "complete": True},
    "probe": {"agent": 1, "device": {"cores": 4}, "runtimes": {"onnxruntime": "1.20"}},
    "activate": {"active": "ab12", "previous": None, "changed": True},
    "rollback": {"active": "ab12", "previous": "cd34", "changed": True, "artifact": "x"},
    "releases": {"active": "ab12", "previous": None, "history": [{"release": "ab12"}],
                 "releases": [{"release": "ab12", "model": "/w/releases/ab12/model.onnx",
                               "complete": True, "active": True, "previous": False,
                               "size_bytes": 5, "files": {"model.onnx": 5},
                               "installed": "2026-11-29T00:00:00Z", "last_active": None,
                               "artifact": "onnxruntime-fp32"}]},
    "prune": {"kept": ["ab12"], "removed": [], "stale_removed": []},
    "space": {"work_dir": "/w", "free_bytes": 5},
    "install": {"installed": "/w/m", "sha256": "0" * 64},
    "corun": {"seconds": 5.0, "peak_mb": 120.5, "jobs": [
        {"name": "det", "runtime": "onnxruntime", "load_ms": 40.0, "threads": 1,
         "alone": {"frames": 50, "served": 50, "dropped": 0, "per_s": 10.0, "p50_ms": 8.0,
                   "p99_ms": 9.5, "max_ms": 9.9, "service_p50_ms": 7.9},
         "together": {"frames": 50, "served": 49, "dropped": 1, "per_s": 9.8, "p50_ms": 9.0,
                      "p99_ms": 12.5, "max_ms": 14.0, "service_p50_ms": 8.8},
         "peak_mb": 120.5}]},
    "activate-pack": {"slots": [{"active": "ab12", "previous": None, "changed": True,
                                 "slot": "det"}]},
}

#: (command, path to the value, the lie, the field the error names)
LIES = [
    ("corun", ("jobs", 0, "together", "p99_ms"), float("nan"), "jobs.0.together.p99_ms"),
    ("corun", ("jobs", 0, "together", "p99_ms"), None, "jobs.0.together: p99_ms is missing"),
    ("corun", ("jobs", 0, "together", "served"), 10**6, "jobs.0.together: served and dropped"),
    ("corun", ("jobs", 0, "peak_mb"), -1.0, "jobs.0.peak_mb"),
    ("corun", ("jobs",), [], "jobs"),
    ("activate-pack", ("slots", 0, "active"), 5, "slots.0.active"),
    ("activate-pack", ("slots",), [], "slots"),
    *(("bench", ("results", 0, key), value,
       f"results.0: {key} is missing" if value is None else f"results.0.{key}")
      for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "load_ms")
      for value in (float("nan"), float("inf"), -1.0, 1e308, "5", None, True)),
    ("bench", ("results", 0, "round_ms"), [1.0] * 2_000_000, "results.0.round_ms"),
    ("bench", ("results", 0, "round_ms"), [1.0, float("nan")], "results.0.round_ms.1"),
    ("bench", ("results", 0, "round_ms"), "1,2", "results.0.round_ms"),
    ("bench", ("results", 0, "runs"), 0, "results.0.runs"),
    ("bench", ("results", 0, "runs"), 1.5, "results.0.runs"),
    ("bench", ("results", 0, "threads"), 10**12, "results.0.threads"),
    ("bench", ("results", 0, "throughput_fps"), -3.0, "results.0.throughput_fps"),
    ("bench", ("results", 0, "runtime"), ["onnxruntime"], "results.0.runtime"),
    ("bench", ("results",), [], "results"),
    ("bench", ("results",), {"0": ENTRY}, "results"),
    ("bench", ("results",), [ENTRY] * 20_000, "results"),
    ("bench", ("peak_rss_mb",), float("nan"), "peak_rss_mb"),
    ("bench", ("peak_rss_mb",), -1, "peak_rss_mb"),
    ("bench", ("device", "cores"), 10**12, "device.cores"),
    ("bench", ("device", "cores"), 0, "device.cores"),
    ("bench", ("rounds",), 2_000_000, "rounds"),
    ("health", ("healthy",), "yes", "healthy"),
    ("health", ("healthy",), 1, "healthy"),
    ("health", ("load_ms",), float("-inf"), "load_ms"),
    ("health", ("run_ms",), "fast", "run_ms"),
    ("verify", ("free_bytes",), -5, "free_bytes"),
    ("verify", ("free_bytes",), 2**70, "free_bytes"),
    ("verify", ("missing",), "model.onnx", "missing"),
    ("verify", ("missing",), ["a"] * 20_000, "missing"),
    ("verify", ("present",), [1, 2], "present.0"),
    ("verify", ("complete",), "true", "complete"),
    ("verify", ("release",), None, "release"),
    ("probe", ("device", "cores"), 10**12, "device.cores"),
    ("probe", ("device", "cores"), -4, "device.cores"),
    ("probe", ("device", "cores"), "4", "device.cores"),
    ("probe", ("device", "mem_total_mb"), float("nan"), "device.mem_total_mb"),
    ("probe", ("runtimes",), ["onnxruntime"], "runtimes"),
    ("activate", ("changed",), "no", "changed"),
    ("activate", ("active",), 5, "active"),
    ("rollback", ("previous",), ["x"], "previous"),
    ("releases", ("history",), [{}] * 20_000, "history"),
    ("releases", ("releases",), [1], "releases.0"),
    ("releases", ("releases", 0, "size_bytes"), "1e999", "releases.0.size_bytes"),
    ("releases", ("releases", 0, "size_bytes"), -1, "releases.0.size_bytes"),
    ("releases", ("releases", 0, "release"), "../x", "releases.0.release"),
    ("releases", ("releases", 0, "complete"), "yes", "releases.0.complete"),
    ("releases", ("releases", 0, "files"), {"m": -5}, "releases.0.files.m"),
    ("rollback", ("active",), None, "active"),
    ("bench", ("metrics", "during"), 7, "metrics.during"),
    ("bench", ("metrics", "during"), {"power_w": {"value": "lots"}},
     "metrics.during.power_w.value"),
    ("bench", ("metrics", "during"), {"power_w": {"value": float("nan")}},
     "metrics.during.power_w.value"),
    ("bench", ("metrics", "during"), {"power_w": 3}, "metrics.during.power_w"),
    ("releases", ("releases",), "ab12", "releases"),
    ("prune", ("removed",), "ab12", "removed"),
    ("prune", ("removed",), [3], "removed.0"),
    ("space", ("free_bytes",), float("nan"), "free_bytes"),
    ("space", ("free_bytes",), -1, "free_bytes"),
    ("space", ("free_bytes",), "lots", "free_bytes"),
    ("install", ("sha256",), "0" * 63, "sha256"),
    ("install", ("installed",), None, "installed"),
]


def _lied(command: str, path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    reply = copy.deepcopy(GOOD[command])
    here: Any = reply
    for part in path[:-1]:
        here = here[part]
    here[path[-1]] = value
    return reply


@pytest.mark.parametrize("command", sorted(GOOD))
def test_good_replies_pass_as_they_are(command: str) -> None:
    assert check_reply(command, GOOD[command], "dev") == GOOD[command]


def test_every_schema_has_a_good_reply() -> None:
    assert set(SCHEMAS) == set(GOOD)


@pytest.mark.parametrize("command, path, value, field", LIES,
                         ids=[f"{c}-{f}-{str(v)[:12]}" for c, _, v, f in LIES])
def test_a_lie_is_one_device_error_naming_the_field(command: str, path: tuple[Any, ...],
                                                    value: Any, field: str) -> None:
    with pytest.raises(DeviceError) as caught:
        check_reply(command, _lied(command, path, value), "ssh://pi@dev:22")
    message = str(caught.value)
    assert message.startswith(f"ssh://pi@dev:22: agent {command} replied {field}"), message
    assert "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("key", ["runs", "p50_ms", "load_ms"])
def test_a_timed_entry_without_its_numbers_is_refused(key: str) -> None:
    reply = copy.deepcopy(GOOD["bench"])
    del reply["results"][0][key]
    with pytest.raises(DeviceError, match=f"{key} is missing"):
        check_reply("bench", reply, "dev")


def test_an_entry_that_dropped_out_needs_no_numbers() -> None:
    reply = {"results": [ENTRY, {"model": "b.tflite", "runtime": "tflite", "error": "no"}]}
    assert check_reply("bench", reply, "dev") == reply


def test_the_real_agents_replies_pass(tmp_path: Path) -> None:
    """probe, space and releases as the agent answers them on this host."""
    agent = agent_file()
    for command, *args in (("probe",), ("space", str(tmp_path)), ("releases", str(tmp_path))):
        done = subprocess.run([sys.executable, str(agent), command, *args], capture_output=True,
                              text=True, timeout=120, check=True)
        reply = json.loads(done.stdout.strip().splitlines()[-1])
        assert check_reply(command, reply, "local") == reply
