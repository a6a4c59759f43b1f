"""``edge devices compare`` (issue 44, its offline board question): every catalog profile's
fastest estimated candidate for a model, with an interval and a calibrated/estimated label, in
text and in --json; calibration comes from the timings edge kept, and only a profile of the
same arch lends its corrections."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from edge.core import estimate as est
from edge.core.profile import catalog_ids, load_profile
from edge.core.values import Candidate
from edge.flows import compare as compare_flow
from edge.flows.worklist import corrections
from tests.support.cli import run_cli


@pytest.fixture(autouse=True)
def nothing_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own cache: no timings kept but those it keeps."""
    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))


def _compared(*args: str) -> dict:
    result = run_cli("devices", "compare", "sample:digits", "--json", *args)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def test_every_catalog_profile_is_estimated_with_an_interval_and_a_label() -> None:
    """Nothing kept: each device's best candidate by its roofline, the interval open above and
    labelled so, fastest first; a profile nothing can be made for here says why."""
    doc = _compared()
    rows = {r["profile"]: r for r in doc["rows"]}
    assert set(rows) == set(catalog_ids()) and doc["macs"] > 0
    estimated = [r for r in doc["rows"] if r.get("ms") is not None]
    assert len(estimated) >= len(rows) - 2, [r["why"] for r in doc["rows"] if r["why"]]
    for row in estimated:
        assert row["calibration"].startswith("roofline") and row["high_ms"] is None, row
        assert (row["unit"] == "CPU") == (row["calibration"] == "roofline"), row
        assert 0 < row["low_ms"] <= row["ms"] and row["memory_mb"] > 0 and row["energy_mj"] > 0
    assert [r["ms"] for r in estimated] == sorted(r["ms"] for r in estimated)
    assert all(r["why"] for r in doc["rows"] if r.get("ms") is None)
    # the slowest CPU estimate is the Pi Zero's, not a faster board's
    assert rows["rpi-zero-2w"]["ms"] > rows["rpi5"]["ms"] > rows["cloud-c7i"]["ms"]
    text = run_cli("devices", "compare", "sample:digits")
    assert text.status == 0 and "estimated, not measured" in text.stdout
    assert all(p in text.stdout for p in catalog_ids())


def test_kept_timings_calibrate_a_profile_and_lend_to_its_arch_only() -> None:
    """Three models' kept timings of x86-64's CPU runtimes calibrate it (a bounded interval);
    the c7i cloud server (x86_64 too) borrows them, widened and named; no aarch64 board does
    (another arch's runtime builds and kernels differ)."""
    kept = corrections()
    for model, ratio in (("a" * 64, 3.0), ("b" * 64, 4.0), ("c" * 64, 5.0)):
        kept.add({f"x86-64|{t}|{p}": ratio for t, p in (
            ("onnxruntime", "int8"), ("onnxruntime", "int8-dynamic"), ("onnxruntime", "fp32"),
            ("tflite", "int8"), ("tflite", "fp32"), ("openvino", "int8"),
            ("openvino", "fp32"))}, model)
    rows = {r["profile"]: r for r in _compared("--profiles", "x86-64,cloud-c7i,rpi4")["rows"]}
    mine, lent, pi = rows["x86-64"], rows["cloud-c7i"], rows["rpi4"]
    assert mine["calibration"] == "calibrated" and mine["high_ms"] is not None
    assert mine["low_ms"] < mine["ms"] < mine["high_ms"]
    assert lent["calibration"] == "from x86-64" and lent["high_ms"] is not None, lent
    assert lent["high_ms"] - lent["low_ms"] > mine["high_ms"] - mine["low_ms"]  # widened
    assert pi["calibration"] == "roofline" and pi["high_ms"] is None


def test_an_accelerator_candidate_is_estimated_on_its_units_tops() -> None:
    rock = load_profile("rock5b")
    unit, peak = compare_flow._unit(rock, Candidate(target="rknn", precision="int8"))
    assert unit == "Rockchip RK3588 NPU" and peak == 6000.0
    assert compare_flow._unit(rock, Candidate(target="onnxruntime", precision="int8")) == (
        "CPU", None)
    done = est.Work(macs=10**9, weight_values=0, other_values=0, nodes=0)
    npu = est.roofline(done, rock, "int8", peak_gops=peak)
    cpu = est.roofline(done, rock, "int8")
    assert math.isclose(npu.compute_ms, 2e9 / 6e12 * 1e3)
    assert cpu.compute_ms > npu.compute_ms


def test_a_model_that_cannot_be_read_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    result = run_cli("devices", "compare", str(bad))
    assert result.status == 2 and result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = run_cli("devices", "compare", "sample:digits", "--profiles", "no-such-board")
    assert result.status == 2 and "no-such-board" in result.stderr


def test_only_the_order_decides_between_estimates_that_may_each_be_fastest() -> None:
    from edge.core.select import may_be_fastest

    spans = {"a": (1.0, 2.0), "b": (3.0, 4.0), "c": (0.5, math.inf)}
    assert may_be_fastest(spans, ["b", "c", "a"]) == "c"  # b is surely slower than a
    assert may_be_fastest(spans, ["b", "a", "c"]) == "a"
    assert may_be_fastest({"a": (1.0, math.inf), "b": (9.0, math.inf)}, ["b", "a"]) == "b"
