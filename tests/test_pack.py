"""``edge pack`` on the embedded local device (this host's cores are the device's): a pack of
three models planned, co-run and switched as one; refusals before connecting. (Faults during a
pack deploy: tests/test_pack_faults.py.)"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import run_cli
from tests.support.digits import DigitsModel, kept_digits
from tests.support.profiles import one_runtime

UNREACHABLE = "nobody@192.0.2.1"  # TEST-NET-1: a connection attempt would hang, not fail


@pytest.fixture(scope="module")
def other_digits(tmp_path_factory: pytest.TempPathFactory) -> DigitsModel:
    """A digits CNN trained here with another seed: other weights, another release."""
    return kept_digits(tmp_path_factory.mktemp("other-digits"), seed=1)


def _pack(folder: Path, digits: DigitsModel, other: DigitsModel, **extra: object) -> Path:
    for name, model in (("digits", digits), ("other", other)):
        shutil.copy(model.onnx, folder / f"{name}.onnx")
        shutil.copy(model.calib, folder / f"{name}-calib.npy")
    models = [{"model": "digits.onnx", "calib": "digits-calib.npy", "rate": 100, "p99_ms": 50},
              {"model": "other.onnx", "calib": "other-calib.npy", "rate": 50, "p99_ms": 50},
              {"model": "digits.onnx", "name": "digits-b", "calib": "digits-calib.npy",
               "rate": 20, "p99_ms": 100, **extra}]
    path = folder / "pack.yaml"
    path.write_text(json.dumps({"name": "three", "models": models}))
    return path


def test_a_pack_is_planned_proven_and_switched_as_one(tmp_path: Path, digits: DigitsModel,
                                                      other_digits: DigitsModel) -> None:
    pack = _pack(tmp_path, digits, other_digits)
    profile = str(one_runtime(tmp_path, base="x86-64"))
    done = run_cli("pack", "deploy", str(pack), "--profile", profile, "--seconds", "1",
                   "-o", str(tmp_path / "out"), "--json")
    assert done.status == 0, done.stderr
    doc = done.json()
    assert doc["deployed"] and doc["figures"].startswith("local:")
    assert doc["tried"][-1]["accepted"] and len(doc["tried"][-1]["models"]) == 3
    for model in doc["tried"][-1]["models"]:
        assert model["alone"]["served"] > 0 and model["together"]["served"] > 0
        assert model["peak_mb"] > 0
    switched = {s["slot"]: s["active"] for s in doc["switched"]}
    assert set(switched) == {"digits", "other", "digits-b"}
    listed = run_cli("releases", "--json").json()
    assert {s["name"]: s["active"] for s in listed["slots"]} == switched
    assert (tmp_path / "out" / "pack.json").is_file()
    text = run_cli("pack", "plan", str(pack), "--profile", profile, "--seconds", "1",
                   "-o", str(tmp_path / "out"))
    assert text.status == 0, text.stderr
    assert "cpu core 0" in text.stdout and "co-run on the device" in text.stdout


def _wide(path: Path, values: int) -> Path:
    """A model whose weights alone are ``values`` floats (its figures are all that is read)."""
    weight = numpy_helper.from_array(np.zeros((values // 64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, values // 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("case", ["memory", "latency", "rate"])
def test_impossible_packs_are_refused_before_connecting(tmp_path: Path, case: str) -> None:
    _wide(tmp_path / "wide.onnx", 4_000_000)
    profile = tmp_path / "small.yaml"
    profile.write_text("extends: rpi4\nid: small\nmemory: {ram_mb: 4096, model_budget_mb: "
                       f"{8 if case == 'memory' else 2048}}}\n")
    model = {"model": "wide.onnx", "rate": 1}
    models = [dict(model, name=f"w{i}") for i in range(3)]
    if case == "latency":
        models[1]["p99_ms"] = 1e-6
    if case == "rate":
        models[2]["rate"] = 100_000
    (tmp_path / "pack.yaml").write_text(json.dumps({"models": models}))
    started = time.monotonic()
    done = run_cli("pack", "deploy", str(tmp_path / "pack.yaml"), "--profile", str(profile),
                   "--host", UNREACHABLE)
    assert done.status == 2, done.stderr
    assert time.monotonic() - started < 60
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: pack cannot run on small: ")
    expected = {"memory": "over small's model budget of 8 MB (the largest: w",
                "latency": "w1 misses its p99 objective", "rate": "w2 cannot keep up with"}
    assert expected[case] in line


def test_a_pack_document_with_a_path_outside_its_folder_is_refused(tmp_path: Path) -> None:
    inner = tmp_path / "pack"
    inner.mkdir()
    _wide(tmp_path / "wide.onnx", 64 * 4)
    (inner / "pack.yaml").write_text(json.dumps({"models": [{"model": "../wide.onnx",
                                                              "rate": 1}]}))
    done = run_cli("pack", "plan", str(inner / "pack.yaml"), "--profile", "rpi4", "--dry-run")
    assert done.status == 2 and "outside the pack's folder" in done.stderr
    (inner / "pack.yaml").write_text(json.dumps({"models": [{"model": "a.onnx"}]}))
    done = run_cli("pack", "plan", str(inner / "pack.yaml"), "--profile", "rpi4", "--dry-run")
    assert done.status == 2 and "give a rate" in done.stderr

