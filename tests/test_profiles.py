"""The device profile catalog and the profile loader (edge.core.profile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from edge.core.errors import UsageError
from edge.core.profile import (
    Profile,
    catalog_ids,
    known_runtimes,
    load_profile,
    profile_schema,
    validate_file,
)

REQUIRED_IDS = {
    "rpi4",
    "rpi5",
    "jetson-nano",
    "jetson-orin-nano",
    "coral-dev-board",
    "pixel-8",
    "intel-nuc",
    "imx8mp",
    "x86-64",
    "cloud-t4",
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- the catalog -------------------------------------------------------------------------------


def test_catalog_has_the_required_profiles() -> None:
    ids = catalog_ids()
    assert len(ids) >= 10
    assert REQUIRED_IDS <= set(ids)
    assert ids == sorted(ids)


def test_catalog_ids_are_the_yaml_file_names() -> None:
    names = {p.name for p in resources.files("profiles").iterdir() if p.name.endswith(".yaml")}
    assert {f"{i}.yaml" for i in catalog_ids()} == names


@pytest.mark.parametrize("profile_id", catalog_ids())
def test_catalog_profile_loads_and_its_id_matches_its_file(profile_id: str) -> None:
    profile = load_profile(profile_id)
    assert isinstance(profile, Profile)
    assert profile.id == profile_id
    # The id is written in the file, not only defaulted from the file name.
    entry = resources.files("profiles") / f"{profile_id}.yaml"
    assert f"id: {profile_id}\n" in entry.read_text(encoding="utf-8")
    assert profile.source.strip()
    assert profile.memory.model_budget_mb <= profile.memory.ram_mb
    assert profile.power.idle_w <= profile.power.max_w
    assert set(profile.runtimes) <= set(known_runtimes())
    # Every accelerator is reached by a runtime the profile lists.
    for accel in profile.accelerators:
        assert accel.runtime in profile.runtimes, (profile_id, accel.name)
    assert profile.compute.default_threads >= 1


@pytest.mark.parametrize("profile_id", catalog_ids())
def test_catalog_file_validates_by_path(profile_id: str) -> None:
    entry = Path(str(resources.files("profiles") / f"{profile_id}.yaml"))
    assert validate_file(entry) == load_profile(profile_id)
    assert load_profile(entry) == load_profile(profile_id)


def test_required_profiles_prefer_the_right_runtime() -> None:
    assert load_profile("pixel-8").runtimes[0] == "nnapi"
    assert load_profile("pixel-8").access.transport == "adb"
    assert load_profile("intel-nuc").runtimes[:3] == ("openvino-npu", "openvino-gpu", "openvino")
    assert load_profile("rock5b").runtimes[0] == "rknn"
    assert load_profile("imx8mp").runtimes[0] == "tflite-delegate"
    assert load_profile("imx93").runtimes[0] == "ethos-u"
    assert load_profile("jetson-nano").runtimes[:2] == ("tensorrt", "onnxruntime")
    assert load_profile("jetson-orin-nano").runtimes[:2] == ("tensorrt", "onnxruntime")
    assert load_profile("cloud-t4").runtimes[:2] == ("tensorrt", "onnxruntime")
    assert load_profile("coral-dev-board").runtimes[:2] == ("edgetpu", "tflite")
    assert load_profile("x86-64").access.transport == "ssh"


def test_profile_to_json_round_trips() -> None:
    profile = load_profile("rpi4")
    data = profile.to_json()
    json.dumps(data)
    assert Profile.model_validate(data) == profile


# --- user profiles and extends -----------------------------------------------------------------


def test_user_profile_extends_a_catalog_entry(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "my-pi.yaml",
        "extends: rpi4\n"
        "memory:\n"
        "  model_budget_mb: 512\n"
        "access:\n"
        "  python: /opt/venv/bin/python\n",
    )
    base = load_profile("rpi4")
    profile = load_profile(path)
    assert profile.id == "my-pi"
    assert profile.memory.model_budget_mb == 512
    assert profile.access.python == "/opt/venv/bin/python"
    # Everything else comes from the base, including sibling keys of the overridden ones.
    assert profile.memory.ram_mb == base.memory.ram_mb
    assert profile.access.user == base.access.user
    assert profile.access.host == base.access.host
    assert profile.access.work_dir == base.access.work_dir
    assert profile.compute == base.compute
    assert profile.runtimes == base.runtimes
    assert profile.link == base.link
    assert profile.name == base.name
    assert validate_file(path) == profile


def test_user_profile_extends_a_sibling_file(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "extends: rpi4\nmemory:\n  model_budget_mb: 700\n")
    path = _write(tmp_path / "child.yaml", "extends: base.yaml\naccess:\n  user: alice\n")
    profile = load_profile(str(path))
    assert profile.id == "child"
    assert profile.memory.model_budget_mb == 700
    assert profile.access.user == "alice"
    assert profile.compute == load_profile("rpi4").compute


# Each bad file names itself (its path) and the key or value at fault.
BAD_FILES = [
    ("extends: rpi4\ncompute:\n  cores: four\n", ["compute.cores"]),
    ("extends: rpi4\ncolour: red\n", ["colour"]),
    ("extends: rpi4\ncompute:\n  turbo_ghz: 2.0\n", ["compute.turbo_ghz"]),
    ("extends: rpi4\nruntimes: [tflite, pytorch]\n", ["runtimes"]),
    ("extends: rpi4\naccelerators:\n"
     "  - {kind: npu, name: X, precisions: [int8], runtime: hailort}\n",
     ["accelerators.0.runtime"]),
    ("extends: rpi4\nruntimes: [tflite, tflite]\n", ["runtimes"]),
    ("extends: [rpi4]\n", ["extends"]),
    ("extends: no-such-board\n", ["no-such-board"]),
    ("extends: rpi4\ncompute: [unclosed\n", []),
    ("- rpi4\n- rpi5\n", []),
]


@pytest.mark.parametrize("text, expected", BAD_FILES)
def test_a_bad_profile_file_is_named_with_its_fault(tmp_path: Path, text: str,
                                                     expected: list[str]) -> None:
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(UsageError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message or "no-such-board" in message
    for fragment in expected:
        assert fragment in message


def test_extends_cycle_is_reported(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.yaml", "extends: b.yaml\nname: A\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\nname: B\n")
    with pytest.raises(UsageError) as info:
        load_profile(a)
    message = str(info.value)
    assert "cycle" in message
    assert "a.yaml" in message


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(UsageError) as info:
        load_profile(missing)
    assert str(missing) in str(info.value)
    with pytest.raises(UsageError):
        validate_file(missing)


def test_unknown_profile_id_lists_valid_ids() -> None:
    with pytest.raises(UsageError) as info:
        load_profile("no-such-device")
    message = str(info.value)
    assert "no-such-device" in message
    for profile_id in catalog_ids():
        assert profile_id in message


# --- schema ------------------------------------------------------------------------------------


def test_profile_schema_is_a_json_schema() -> None:
    schema = profile_schema()
    json.dumps(schema)
    assert schema["type"] == "object"
    assert "compute" in schema["properties"]
    assert "extends" in schema["properties"]
    assert {"id", "compute", "memory", "runtimes"} <= set(schema["required"])


def test_a_runtime_a_plug_in_registers_is_a_name_profiles_accept(tmp_path: Path) -> None:
    """Issue 26: a new runtime is one folder (and its entry point), no edit in the core: a
    distribution that registers `edge.targets: npu-x` makes `npu-x` a profile runtime."""
    info = tmp_path / "edge_npu_x-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edge-npu-x\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[edge.targets]\nnpu-x = edge_npu_x:RUNTIME\n")
    (tmp_path / "edge_npu_x.py").write_text(
        "from targets.base import Runtime\n"
        "RUNTIME = Runtime(name='npu-x', targets=(('npu-x', 'edge_npu_x:T'),), suffixes=('.npux',),"
        " agent=None, profiler=None, provision=None, label='NPU X', colour='#000000')\n")
    mine = tmp_path / "npu.yaml"
    mine.write_text("extends: rpi4\nid: npu-board\nruntimes: [npu-x, tflite]\n")
    code = ("import sys; from edge.core.profile import known_runtimes, load_profile; "
            f"print('npu-x' in known_runtimes(), load_profile({str(mine)!r}).runtimes)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=True)
    assert done.stdout.split(" ", 1) == ["True", "('npu-x', 'tflite')\n"]
    assert "npu-x" not in known_runtimes()  # not registered in this process


def test_a_plug_in_that_does_not_load_is_one_error_line(tmp_path: Path) -> None:
    info = tmp_path / "edge_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edge-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[edge.targets]\nbroken = no_such_module_x:RUNTIME\n")
    argv = ["optimize", "sample:digits", "--profile", "rpi4", "--dry-run"]
    code = f"from edge.cli import main; raise SystemExit(main({argv!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: the edge plug-in edge.targets:broken (no_such_module_x:RUNTIME) does not load: "
        "No module named 'no_such_module_x'"]
