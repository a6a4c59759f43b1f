"""`pip install -e .` alone: the light commands work, and every command that needs an optional
extra says which, in one `error:` line with exit 2 (issue 26). Run in a real venv that has none
of the extras (tests/support/base_env.py)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.base_env import ROOT, base_venv
from tests.support.cli import STEP

DIGITS = ROOT / "edge" / "samples" / "digits.onnx"
#: extras that only group others or serve the project's own checks
GROUPS = {"all", "dev", "test"}


@pytest.fixture(scope="module")
def venv() -> Path:
    return base_venv()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files whose headers are their formats' (the readers sniff them before converting)."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "m.keras").write_bytes(b"PK\x03\x04" + bytes(16))
    (folder / "m.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(16))
    (folder / "m.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(16))
    (folder / "m.pt").write_bytes(b"PK\x03\x04" + bytes(16))
    (folder / "saved").mkdir()
    (folder / "saved" / "saved_model.pb").write_bytes(b"\x08\x01")
    (folder / "images").mkdir()
    (folder / "images" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16))
    (folder / "ov.yaml").write_text("extends: x86-64\nid: ov-only\nruntimes: [openvino]\n")
    (folder / "ncnn.yaml").write_text("extends: rpi5\nid: ncnn-only\nruntimes: [ncnn]\n")
    (folder / "nnapi.yaml").write_text("extends: pixel-8\nid: nnapi-only\nruntimes: [nnapi]\n")
    (folder / "et.yaml").write_text("extends: rpi4\nid: et-only\nruntimes: [executorch]\n")
    (folder / "hosts.yaml").write_text("all:\n  hosts:\n    pi1:\n      ansible_host: 127.0.0.1\n"
                                       "      ansible_port: 9\n      ansible_user: pi\n"
                                       "      edge_profile: x86-64\n")
    return folder


def edge(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGE_CACHE_DIR": str(cwd / "cache"), "HOME": str(cwd)}
    return subprocess.run([str(venv / "bin" / "edge"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


#: (extra, the command that needs it); "{m}" is the folder of `models`, "{b}" a bundle.
CASES = [
    ("prune", "optimize sample:digits --profile rpi4 --prune --dry-run"),
    ("prune", "deploy sample:digits --profile rpi4 --prune"),
    ("pytorch", "optimize {m}/m.pt --profile rpi4 --shape input=1,1,8,8 --dry-run"),
    ("pytorch", "inspect {m}/m.pt --shape input=1,1,8,8"),
    ("tflite", "optimize {m}/m.keras --profile rpi4 --dry-run"),
    ("tflite", "inspect {m}/m.h5"),
    ("tflite", "inspect {m}/saved"),
    ("tflite", "optimize {m}/m.tflite --profile rpi4 --dry-run"),
    ("tflite", "optimize sample:digits --profile coral-dev-board --dry-run"),
    ("tflite", "deploy sample:digits --profile coral-dev-board"),
    ("tflite", "optimize sample:digits --profile {m}/nnapi.yaml --dry-run"),
    ("openvino", "optimize sample:digits --profile {m}/ov.yaml"),
    ("ncnn", "optimize sample:digits --profile {m}/ncnn.yaml"),
    ("executorch", "optimize sample:digits --profile {m}/et.yaml"),
    ("report", "optimize sample:digits --profile rpi4 --report {m}/r.html -o {m}/rb"),
    ("report", "report {b} -o {m}/r.html"),
    ("ssh", "deploy {b} --host pi@127.0.0.1:9"),
    ("ssh", "bench {b} --host pi@127.0.0.1:9"),
    ("ssh", "releases --host pi@127.0.0.1:9"),
    ("ssh", "rollback --host pi@127.0.0.1:9"),
    ("ssh", "devices probe pi@127.0.0.1:9"),
    ("ssh", "deploy {b} --inventory {m}/hosts.yaml"),
    ("fleet", "deploy {b} --inventory {m}/hosts.yaml --engine ansible"),
    ("cloud", "serve-cloud {s}"),
    ("cloud", "run-split {s} --url http://127.0.0.1:9 --protocol grpc"),
    ("images", "optimize sample:digits --profile rpi4 --calib {m}/images -o {m}/ib"),
]


def test_the_light_commands_work_without_extras(venv: Path, tmp_path: Path) -> None:
    for args in (["--help"], ["profiles", "list"], ["inspect", str(DIGITS)]):
        done = edge(venv, tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stdout.strip(), args
    assert "Conv" in done.stdout


@pytest.fixture(scope="module")
def bundle(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle made by the base install alone: ONNX Runtime candidates for x86-64."""
    work = tmp_path_factory.mktemp("bundle")
    done = edge(venv, work, "optimize", "sample:digits", "--profile", "x86-64", "-o", "b",
                "--json")
    assert done.returncode == 0, done.stderr
    return work / "b"


@pytest.fixture(scope="module")
def split(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A split made by the base install alone."""
    work = tmp_path_factory.mktemp("split")
    done = edge(venv, work, "partition", "sample:digits", "--profile", "rpi4", "--cloud",
                "cloud-t4", "-o", "s")
    assert done.returncode == 0, done.stderr
    return work / "s"


def test_a_base_install_optimizes_with_onnx_runtime(bundle: Path) -> None:
    candidates = json.loads((bundle / "manifest.json").read_text())["candidates"]
    status = {(c["candidate"]["target"], c["candidate"]["precision"]): c for c in candidates
              if "variant" not in c["candidate"]}
    assert status["onnxruntime", "int8"]["status"] == "passed"
    assert "pip install 'edge[openvino]'" in status["openvino", "fp32"]["reason"]


@pytest.mark.parametrize(("extra", "command"), CASES, ids=[c for _, c in CASES])
def test_a_missing_extra_is_one_line_naming_it(venv: Path, models: Path, bundle: Path,
                                               split: Path, tmp_path: Path, extra: str,
                                               command: str) -> None:
    args = command.format(m=models, b=bundle, s=split).split()
    done = edge(venv, tmp_path, *args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.strip().splitlines() if not STEP.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr  # steps aside
    assert f"pip install 'edge[{extra}]'" in lines[0], lines[0]


def test_every_extra_has_a_command_tested_without_it() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(extras["optional-dependencies"]) - GROUPS
    assert declared == {extra for extra, _ in CASES}


def test_the_quick_start_plan_names_each_missing_extra_once(venv: Path, tmp_path: Path) -> None:
    """Issue 38: the README's first deploy runs on the base install; the runtimes whose extra
    is missing are skipped (not a failure) and the table names each extra once, with one pip
    line for them all."""
    done = edge(venv, tmp_path, "optimize", "sample:digits", "--profile", "rpi4", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert sum("pip install" in line for line in lines) == 1
    assert ("not installed here, so not tried (not a failure; the other runtimes compete): "
            "pip install 'edge[tflite,ncnn,executorch]' adds them") in lines
    rows = {line.split()[0]: line for line in lines[2:] if line.split()}
    assert "edge[tflite] not installed here (see below)" in rows["tflite-int8"]
    assert rows["onnxruntime-int8"].split()[1] == "try"
