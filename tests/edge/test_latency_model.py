"""A device's latency model (issue 44): the probe models, their features, the fit and its
conformal interval, the calibrations kept (validated), and ``edge devices probe --calibrate``
end to end on the embedded local device, then used by ``edge devices compare``."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from edge.core.latency.model import FEATURES, Timed, features, fit
from edge.core.latency.probes import PROBES, write_probes
from edge.core.latency.store import Calibration, ProbeTiming, add_model, fitted, keep, kept
from edge.flows.calibrate import emulated
from tests.support.cli import run_cli

#: A made-up device's true costs, ms per feature unit.
TRUTH = {"call": 0.01, "nodes": 0.0005, "values_m": 0.05, "layer_values_m": 0.08,
         "dense_mmacs": 0.02, "depthwise_mmacs": 0.04, "matmul_mmacs": 0.03}


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_probes(tmp_path_factory.mktemp("probes"))


def _truly(found: dict[str, float]) -> float:
    return sum(TRUTH[k] * found[k] for k in FEATURES)


def test_the_probes_are_fixed_and_each_kind_of_work_is_in_two(probes: dict[str, Path],
                                                                tmp_path: Path) -> None:
    again = write_probes(tmp_path / "again")
    assert list(probes) == list(PROBES) and len(probes) == 11
    assert all(probes[k].read_bytes() == again[k].read_bytes() for k in probes)  # same bytes
    found = {k: features(p) for k, p in probes.items()}
    for kind in ("dense_mmacs", "depthwise_mmacs", "matmul_mmacs"):
        assert sum(1 for f in found.values() if f[kind] > 0) >= 2, kind
    assert found["conv_large"]["dense_mmacs"] > 100 and found["call"]["nodes"] == 1
    assert found["depthwise_wide"]["depthwise_mmacs"] > 0 == found["depthwise_wide"][
        "dense_mmacs"]
    assert found["nodes"]["nodes"] == 60 and found["values_large"]["values_m"] > 6
    assert found["values_large"]["layer_values_m"] == 0 < found["conv_large"]["layer_values_m"]


def test_a_device_that_is_its_features_is_fitted_exactly(probes: dict[str, Path]) -> None:
    timed = [Timed(name=k, features=features(p), ms=_truly(features(p)))
             for k, p in probes.items()]
    model = fit(timed)
    assert all(math.isclose(model.costs[k], TRUTH[k], rel_tol=1e-6) for k in FEATURES)
    assert model.bound < 1e-6 and max(abs(e) for e in model.loo_errors) < 1e-6
    guess = model.predict({"call": 1, "dense_mmacs": 10}, basis="b")
    assert math.isclose(guess.ms, 0.01 + 0.2)


def test_the_interval_holds_most_held_out_probes(probes: dict[str, Path]) -> None:
    """Noisy timings: the interval is the held-out error that 80 % of the probes stayed
    within, and a prediction's interval brackets it by that factor on both sides."""
    noise = [1.3, 0.8, 1.1, 0.95, 1.2, 0.7, 1.05, 1.0, 0.9, 1.15, 1.25]
    timed = [Timed(name=k, features=features(p), ms=_truly(features(p)) * n)
             for (k, p), n in zip(probes.items(), noise, strict=True)]
    model = fit(timed)
    held = sorted(abs(math.log1p(e)) for e in model.loo_errors)
    assert model.bound == held[math.ceil(12 * 0.8) - 1]
    inside = sum(abs(math.log1p(e)) <= model.bound + 1e-12 for e in model.loo_errors)
    assert inside >= 0.8 * len(timed)
    guess = model.predict(features(probes["mlp_large"]), basis="b")
    assert math.isclose(guess.high_ms / guess.ms, math.exp(model.bound))
    assert math.isclose(guess.ms / guess.low_ms, math.exp(model.bound))
    with pytest.raises(ValueError, match="at least three"):
        fit(timed[:2])


def _calibration(**changes: object) -> Calibration:
    timing = ProbeTiming(name="p", features={"call": 1.0}, ms=1.0)
    base = {"profile": "lab", "device": "d", "threads": 1,
            "timed": {"onnxruntime|fp32": (timing, timing, timing)}}
    return Calibration.from_json(base | changes)


def test_a_kept_calibration_is_validated_and_an_emulated_one_never_fitted() -> None:
    keep(_calibration())
    assert kept("lab") is not None and fitted(kept("lab"), "onnxruntime", "fp32") is not None
    assert fitted(kept("lab"), "onnxruntime", "int8") is None
    timing = ProbeTiming(name="m", features={"call": 1.0}, ms=2.0)
    assert not add_model("lab", "another device", "onnxruntime|fp32", timing)  # not its device
    assert add_model("lab", "d", "onnxruntime|fp32", timing)
    assert add_model("lab", "d", "onnxruntime|fp32", timing)  # the same model replaces itself
    assert [t.name for t in kept("lab").models["onnxruntime|fp32"]] == ["m"]  # type: ignore[union-attr]
    keep(_calibration(emulated=True))
    assert not add_model("lab", "d", "onnxruntime|fp32", timing)  # an emulator's: never
    assert kept("lab") is not None and fitted(kept("lab"), "onnxruntime", "fp32") is None
    path = Path(os.environ["EDGE_CACHE_DIR"]) / "latency"
    for lie in (-1.0, float("nan"), 1e300):
        data = _calibration().to_json()
        data["timed"]["onnxruntime|fp32"][0]["ms"] = lie
        (path / "lab.json").write_text(json.dumps(data))
        assert kept("lab") is None, lie
    (path / "lab.json").write_text("{torn")
    assert kept("lab") is None
    assert emulated({"machine": "aarch64", "cpu": "AMD EPYC 7B13 64-Core Processor"})
    assert not emulated({"machine": "aarch64", "cpu": "Cortex-A72"})
    assert not emulated({"machine": "x86_64", "cpu": "AMD EPYC 7B13 64-Core Processor"})


def test_calibrating_the_local_device_then_comparing_with_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("devices", "probe", "local", "--id", "lab-box", "--calibrate", "--json")
    assert result.status == 0, result.stderr
    doc = json.loads(result.stdout)
    timed = doc["calibration"]["timed"]
    assert set(timed) == {"onnxruntime|fp32", "onnxruntime|int8"}
    assert all(len(t) == len(PROBES) and all(p["ms"] > 0 for p in t) for t in timed.values())
    assert doc["calibration"]["emulated"] is False and len(doc["summary"]) == 2
    assert Path(doc["calibration_file"]).is_file()
    # the lab box runs ONNX Runtime alone (its other runtimes, uncalibrated, would contend)
    profile = tmp_path / "lab-box.yaml"
    profile.write_text(re.sub(r"(?m)^runtimes: \[.*$", "runtimes: [onnxruntime]",
                              profile.read_text()))
    compared = run_cli("devices", "compare", "sample:digits", "--profiles", str(profile),
                       "--json")
    assert compared.status == 0, compared.stderr
    row = json.loads(compared.stdout)["rows"][0]
    assert row["calibration"] == f"calibrated ({len(PROBES)} probes)", row
    assert row["candidate"].startswith("onnxruntime-int8") and row["unit"] == "CPU"
    assert 0 < row["low_ms"] < row["ms"] < row["high_ms"]
    assert f"fitted on {len(PROBES)} timings on local" in row["basis"], row

    # a deploy to the same device with that profile teaches its model the real model's time
    deployed = run_cli("deploy", "sample:digits", "--profile", str(profile), "-o",
                       str(tmp_path / "digits.bundle"), "--runs", "5", "--json")
    assert deployed.status == 0, deployed.stderr
    chosen = json.loads(deployed.stdout)["candidate"]
    taught = kept("lab-box")
    assert taught is not None and taught.device == doc["calibration"]["device"]
    learnt = {k: [t.name for t in v] for k, v in taught.models.items()}
    assert sum(map(len, learnt.values())) == 1 and set(learnt) <= set(timed), (chosen, learnt)
    again = json.loads(run_cli("devices", "compare", "sample:digits", "--profiles",
                               str(profile), "--json").stdout)["rows"][0]
    if again["candidate"] == chosen:
        assert again["calibration"] == f"calibrated ({len(PROBES)} probes + 1 models)", again
