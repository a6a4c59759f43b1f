"""The agent's bench metrics: throughput and sysfs sensors (read from a fake sysfs tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

from devices.agent import sensors
from devices.agentfile import agent_file
from devices.measure import bench_result
from edge.cli.render import render_deploy
from edge.core.profile import Profile, catalog_ids, load_profile
from edge.core.values import BenchResult, DeployReport

SNAPSHOT_KEYS = {"temperature_c", "throttling", "power_w"}


def _tiny_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    save(model, str(path))
    return path


def _write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def _fake_sysfs(root: Path) -> Path:
    _write(root, "class/thermal/thermal_zone0/type", "cpu-thermal")
    _write(root, "class/thermal/thermal_zone0/temp", "51250")
    _write(root, "class/thermal/thermal_zone1/type", "gpu-thermal")
    _write(root, "class/thermal/thermal_zone1/temp", "70000")  # hotter, but not a CPU zone
    _write(root, "class/thermal/thermal_zone2/type", "soc_thermal")
    _write(root, "class/thermal/thermal_zone2/temp", "49000")
    cpu = "devices/system/cpu"
    _write(root, f"{cpu}/cpufreq/policy0/scaling_cur_freq", "1500000")
    _write(root, f"{cpu}/cpufreq/policy0/cpuinfo_max_freq", "1500000")
    _write(root, f"{cpu}/cpufreq/policy4/scaling_cur_freq", "1200000")
    _write(root, f"{cpu}/cpufreq/policy4/cpuinfo_max_freq", "2000000")
    _write(root, f"{cpu}/cpu0/thermal_throttle/core_throttle_count", "3")
    _write(root, f"{cpu}/cpu0/thermal_throttle/package_throttle_count", "1")
    _write(root, f"{cpu}/cpu1/thermal_throttle/core_throttle_count", "2")
    _write(root, "class/hwmon/hwmon0/name", "rpi_volt")  # no power channel: ignored
    _write(root, "class/hwmon/hwmon1/name", "ina219")
    _write(root, "class/hwmon/hwmon1/power1_input", "2500000")  # µW
    _write(root, "class/hwmon/hwmon1/power1_label", "board")
    _write(root, "class/hwmon/hwmon2/name", "pmic")
    _write(root, "class/hwmon/hwmon2/in0_input", "5000")  # mV
    _write(root, "class/hwmon/hwmon2/curr0_input", "300")  # mA -> 1.5 W
    _write(root, "class/hwmon/hwmon2/in1_input", "3300")  # no curr1: ignored
    return root


def _jetson_sysfs(root: Path) -> Path:
    iio = "bus/i2c/drivers/ina3221x/1-0040/iio:device0"
    _write(root, f"{iio}/in_power0_input", "4200")  # mW
    _write(root, f"{iio}/rail_name_0", "VDD_IN")
    _write(root, f"{iio}/in_power1_input", "900")
    _write(root, f"{iio}/rail_name_1", "VDD_CPU_GPU_CV")
    _write(root, "class/hwmon/hwmon3/name", "ina3221")  # same chip via hwmon: not counted twice
    _write(root, "class/hwmon/hwmon3/in1_input", "5000")
    _write(root, "class/hwmon/hwmon3/curr1_input", "840")
    return root


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sys"
    root.mkdir()
    monkeypatch.setenv("EDGE_AGENT_SYSFS", str(root))
    return root


def test_bench_reports_throughput_and_sensor_snapshots(tmp_path: Path) -> None:
    model = _tiny_model(tmp_path / "tiny.onnx")
    env = dict(os.environ, EDGE_AGENT_SYSFS=str(_fake_sysfs(tmp_path / "sys")))
    done = subprocess.run([sys.executable, str(agent_file()), "bench", str(model), "--runs",
                           "20", "--warmup", "2", "--threads", "1"], capture_output=True,
                          text=True, check=False, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    (result,) = reply["results"]
    fps = result["throughput_fps"]
    assert fps > 0
    # runs / total timed seconds == 1000 / mean ms
    assert fps == pytest.approx(1e3 / result["mean_ms"], rel=1e-6)
    metrics = reply["metrics"]
    assert set(metrics) >= {"before", "after", "during"}
    for phase in ("before", "after"):
        assert set(metrics[phase]) == SNAPSHOT_KEYS
        assert metrics[phase]["temperature_c"]["value"] == pytest.approx(51.25)
        assert metrics[phase]["power_w"]["value"] == pytest.approx(4.0)
    assert metrics["during"]["power_w"]["value"] == pytest.approx(4.0)


def test_readers_parse_a_fake_sysfs_exactly(sysfs: Path) -> None:
    _fake_sysfs(sysfs)
    temp = sensors.read_cpu_temperature()
    assert temp == {"value": 51.25, "source": str(sysfs / "class/thermal/thermal_zone0/temp"),
                    "zone": "cpu-thermal"}
    throttling = sensors.read_throttling()
    cpu = sysfs / "devices/system/cpu"
    assert throttling["freq_ratio"] == {
        "value": 0.6, "source": str(cpu / "cpufreq/policy4/scaling_cur_freq")}
    assert throttling["throttle_count"] == {"value": 6, "source": [
        str(cpu / "cpu0/thermal_throttle/core_throttle_count"),
        str(cpu / "cpu0/thermal_throttle/package_throttle_count"),
        str(cpu / "cpu1/thermal_throttle/core_throttle_count")]}
    assert throttling["vcgencmd"] == {"value": None, "source": None}  # only with the real /sys
    power = sensors.read_power()
    board = str(sysfs / "class/hwmon/hwmon1/power1_input")
    pmic = (f"{sysfs / 'class/hwmon/hwmon2/in0_input'} x "
            f"{sysfs / 'class/hwmon/hwmon2/curr0_input'}")
    assert power["value"] == pytest.approx(4.0)
    assert power["source"] == [board, pmic]
    assert [(r["label"], r["watts"]) for r in power["rails"]] == [
        ("ina219/board", 2.5), ("pmic/in0", 1.5)]


def test_jetson_ina3221_rails_are_summed_with_labels(sysfs: Path) -> None:
    _jetson_sysfs(sysfs)
    power = sensors.read_power()
    iio = sysfs / "bus/i2c/drivers/ina3221x/1-0040/iio:device0"
    assert power["value"] == pytest.approx(5.1)
    assert [(r["label"], r["watts"], r["source"]) for r in power["rails"]] == [
        ("VDD_IN", 4.2, str(iio / "in_power0_input")),
        ("VDD_CPU_GPU_CV", 0.9, str(iio / "in_power1_input"))]


def test_jetson_hwmon_ina3221_without_i2c_tree(sysfs: Path) -> None:
    _write(sysfs, "class/hwmon/hwmon0/name", "ina3221")
    _write(sysfs, "class/hwmon/hwmon0/in1_label", "VDD_IN")
    _write(sysfs, "class/hwmon/hwmon0/in1_input", "5000")
    _write(sysfs, "class/hwmon/hwmon0/curr1_input", "840")
    power = sensors.read_power()
    assert power["value"] == pytest.approx(4.2)
    assert power["rails"][0]["label"] == "ina3221/VDD_IN"


def test_missing_and_unreadable_sensors_are_none(sysfs: Path) -> None:
    snapshot = sensors.sensor_snapshot()
    assert snapshot["temperature_c"] == {"value": None, "source": None, "zone": None}
    assert snapshot["power_w"] == {"value": None, "source": None, "rails": []}
    for reading in snapshot["throttling"].values():
        assert reading["value"] is None and reading["source"] is None
    _write(sysfs, "class/thermal/thermal_zone0/temp", "garbage")
    (sysfs / "class/hwmon/hwmon0/power1_input").mkdir(parents=True)  # unreadable: a directory
    assert sensors.read_cpu_temperature()["value"] is None
    assert sensors.read_power()["value"] is None


def test_any_zone_when_no_cpu_zone(sysfs: Path) -> None:
    _write(sysfs, "class/thermal/thermal_zone0/type", "acpitz")
    _write(sysfs, "class/thermal/thermal_zone0/temp", "40000")
    _write(sysfs, "class/thermal/thermal_zone1/type", "nvme")
    _write(sysfs, "class/thermal/thermal_zone1/temp", "45500")
    assert sensors.read_cpu_temperature()["value"] == pytest.approx(45.5)


def test_parse_throttled() -> None:
    assert sensors.parse_throttled("throttled=0x50005") == {
        "value": "0x50005", "under_voltage": True, "throttled_now": True,
        "throttled_since_boot": True}
    assert sensors.parse_throttled("throttled=0x0")["throttled_now"] is False
    assert sensors.parse_throttled("nonsense") == {"value": None}


def _reply(power: dict | None) -> dict:
    snap = {"temperature_c": {"value": 50.0, "source": "/sys/x"},
            "throttling": {"freq_ratio": {"value": 1.0, "source": "/sys/y"}},
            "power_w": power or {"value": None, "source": None}}
    result = {"model": "m.onnx", "runtime": "onnxruntime", "runtime_version": "1.31.1",
              "runs": 10, "warmup": 1, "threads": 2, "p50_ms": 1.0, "p90_ms": 1.2,
              "p99_ms": 1.5, "mean_ms": 1.1, "load_ms": 5.0, "throughput_fps": 909.1}
    return {"results": [result], "rounds": 5, "peak_rss_mb": 30.0, "device": {"cores": 4},
            "metrics": {"before": snap, "during": None, "after": snap}}


def _bench(reply: dict, profile: Profile | None, *, alone: bool = True) -> BenchResult:
    return bench_result(reply, reply["results"][0], "dev", profile=profile, alone=alone)


def test_host_estimates_power_from_the_profile_when_no_sensor() -> None:
    profile = catalog_ids()[0]
    spec = load_profile(profile)
    bench = _bench(_reply(None), spec)
    idle, top = spec.power.idle_w, spec.power.max_w
    expect = idle + (top - idle) * min(1.0, 2 / spec.compute.cores)
    assert bench.throughput_fps == 909.1 and bench.peak_rss_mb == 30.0
    assert bench.device["runtime_version"] == "1.31.1" and bench.device["interleaved_rounds"] == 5
    assert bench.metrics["power_w"] == pytest.approx(expect)
    assert bench.metrics["power_source"] == (
        f"estimated from the profile ({idle:g}..{top:g} W), not measured")
    text = render_deploy(DeployReport(target="dev", transport="ssh", profile=profile,
                                      candidate="c", artifact_sha256="0" * 64, release="r",
                                      bench=bench))
    assert "throughput" in text and "estimated from the profile" in text
    assert "CPU 50.0 -> 50.0 °C" in text


def test_host_labels_measured_power_and_no_profile() -> None:
    measured = {"value": 3.5, "source": ["/sys/class/hwmon/hwmon1/power1_input"]}
    bench = _bench(_reply(measured), None)
    assert bench.metrics["power_w"] == 3.5
    assert bench.metrics["power_source"] == "/sys/class/hwmon/hwmon1/power1_input"
    bench = _bench(_reply(None), None)
    assert bench.metrics["power_w"] is None
    assert bench.metrics["power_source"] == "not measured: no sensor and no profile"


def test_a_model_timed_beside_others_has_no_memory_or_sensors_of_its_own() -> None:
    bench = _bench(_reply(None), load_profile("rpi4"), alone=False)
    assert bench.p50_ms == 1.0 and bench.throughput_fps == 909.1
    assert bench.peak_rss_mb is None and bench.metrics == {}


def test_old_bench_json_still_loads() -> None:
    old = {"where": "dev", "runtime": "onnxruntime", "runs": 1, "warmup": 0, "threads": 1,
           "p50_ms": 1.0, "p90_ms": 1.0, "p99_ms": 1.0, "mean_ms": 1.0}
    bench = BenchResult.from_json(old)
    assert bench.throughput_fps is None and bench.metrics == {}
    assert BenchResult.from_json(bench.to_json()) == bench
