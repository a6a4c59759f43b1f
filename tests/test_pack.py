"""``edge pack`` on the embedded local device (this host's cores are the device's): a pack of
three models planned, co-run and switched as one; refusals before connecting; a switch cut
short undone whole."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from devices.agentfile import agent_file
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


def test_a_pack_switch_cut_short_is_undone_whole(tmp_path: Path, digits: DigitsModel,
                                                 other_digits: DigitsModel) -> None:
    pack = _pack(tmp_path, digits, other_digits)
    profile = str(one_runtime(tmp_path, base="x86-64"))
    done = run_cli("pack", "deploy", str(pack), "--profile", profile, "--seconds", "1",
                   "-o", str(tmp_path / "out"), "--json")
    assert done.status == 0, done.stderr
    before = {s["name"]: s["active"] for s in run_cli("releases", "--json").json()["slots"]}
    work = Path(run_cli("releases", "--json").json()["work_dir"])
    # a switch that died after its first slot: the journal names every slot as it was
    agent = str(agent_file())
    journal = {"version": 1, "slots": [
        {"slot": "digits", "folder": ".", "made": False, "active": before["digits"],
         "history": _history_len(work), "top": "named"},
        {"slot": "new", "folder": "slots/new", "made": True, "active": None, "history": 0,
         "top": "named"}]}
    _agent(agent, "activate", str(work), before["other"], "--slot", "digits")
    _agent(agent, "activate", str(work), before["other"], "--slot", "new")
    (work / "pack-switch.json").write_text(json.dumps(journal))
    listed = run_cli("releases", "--json")
    assert listed.status == 0, listed.stderr
    after = listed.json()
    assert {s["name"]: s["active"] for s in after["slots"]} == before
    assert not (work / "pack-switch.json").exists() and not (work / "slots" / "new").exists()


def _history_len(work: Path) -> int:
    return len(json.loads((work / "history.json").read_text())["activations"])


def _agent(agent: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, agent, *args], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


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


KILLER = '''import os, signal, sys
agent = sys.argv[1]
sys.path.insert(0, agent)
import edge_agent.releases as releases
from edge_agent import cli
real = releases._switch_one
done = []
def first_then_killed(*args):
    done.append(real(*args))
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 after the first slot switched
releases._switch_one = first_then_killed
sys.argv = [agent, *sys.argv[2:]]
sys.exit(cli.entry())
'''


def _killing_python(folder: Path) -> Path:
    """A device python that runs every agent command, except ``activate-pack``, which it runs
    with the process killed (SIGKILL) right after the pack's first slot is switched."""
    (folder / "killer.py").write_text(KILLER)
    script = folder / "python"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = activate-pack ]; "
                      f"then exec {sys.executable} {folder / 'killer.py'} \"$@\"; fi\ndone\n"
                      f"exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def test_a_pack_switch_killed_midway_leaves_every_slot_whole(
        tmp_path: Path, digits: DigitsModel, other_digits: DigitsModel) -> None:
    first = _pack(tmp_path, digits, other_digits)
    profile = str(one_runtime(tmp_path, base="x86-64"))
    done = run_cli("pack", "deploy", str(first), "--profile", profile, "--seconds", "1",
                   "-o", str(tmp_path / "a"), "--json")
    assert done.status == 0, done.stderr
    listed = run_cli("releases", "--json").json()
    before, work = {s["name"]: s["active"] for s in listed["slots"]}, Path(listed["work_dir"])
    swapped = tmp_path / "swapped.yaml"  # each slot gets the other model: every slot changes
    swapped.write_text(json.dumps({"models": [
        {"model": "other.onnx", "name": "digits", "calib": "other-calib.npy", "rate": 20},
        {"model": "digits.onnx", "name": "other", "calib": "digits-calib.npy", "rate": 20},
        {"model": "other.onnx", "name": "digits-b", "calib": "other-calib.npy", "rate": 20}]}))
    killed = run_cli("pack", "deploy", str(swapped), "--profile", profile, "--seconds", "1",
                     "-o", str(tmp_path / "b"), "--device-python",
                     str(_killing_python(tmp_path)))
    assert killed.status == 3, killed.stderr
    assert "activate-pack was killed" in killed.stderr
    assert (work / "pack-switch.json").exists()  # cut short: its journal is still there
    assert Path(os.readlink(work / "current")).name != before["digits"]  # first slot switched
    listed = run_cli("releases", "--json")
    assert listed.status == 0, listed.stderr
    assert {s["name"]: s["active"] for s in listed.json()["slots"]} == before
    assert not (work / "pack-switch.json").exists()
    healed = run_cli("pack", "deploy", str(swapped), "--profile", profile, "--seconds", "1",
                     "-o", str(tmp_path / "b"), "--json")
    assert healed.status == 0, healed.stderr
    after = {s["name"]: s["active"] for s in run_cli("releases", "--json").json()["slots"]}
    assert after == {s["slot"]: s["active"] for s in healed.json()["switched"]}
    assert all(after[name] != before[name] for name in before)
