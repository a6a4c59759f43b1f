"""``edge pack plan --dry-run`` on real models of the zoo: three text detectors and a
classifier for rock5b (three NPU cores and a CPU), jetson-orin-nano (a GPU, no DLA on the
Orin Nano) and rpi5 (a CPU of four cores)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.zoo import entry, model

DETECTORS = ("det-320", "det-b", "det-480")


@pytest.fixture(scope="module")
def camera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three detectors (two cameras of PP-OCRv4's text detector at their own sizes, and
    ddddocr's) and PP-OCR's text-direction classifier."""
    folder = tmp_path_factory.mktemp("camera")
    files = {n: model(entry(n)) for n in ("rapidocr-det", "ddddocr-det", "rapidocr-cls")}
    for path in files.values():
        shutil.copy(path, folder / path.name)
    det, other, cls = (files[n].name for n in ("rapidocr-det", "ddddocr-det", "rapidocr-cls"))
    models = [{"model": det, "name": "det-320", "shape": {"x": [1, 3, 320, 320]}, "rate": 10,
               "p99_ms": 200},
              {"model": other, "name": "det-b", "rate": 10, "p99_ms": 200},
              {"model": det, "name": "det-480", "shape": {"x": [1, 3, 480, 480]}, "rate": 10,
               "p99_ms": 200},
              {"model": cls, "name": "cls", "shape": {"x": [1, 3, 48, 192]}, "rate": 20,
               "p99_ms": 50, "priority": 2}]
    (folder / "camera.yaml").write_text(json.dumps({"name": "camera", "models": models}))
    return folder / "camera.yaml"


def _plan(pack: Path, profile: str) -> dict:
    done = run_cli("pack", "plan", str(pack), "--profile", profile, "--dry-run", "--json")
    assert done.status == 0, done.stderr
    doc = done.json()
    assert doc["figures"] == "estimate" and doc["plan"]["meets"] and doc["tried"] == []
    return {m["name"]: m for m in doc["plan"]["models"]} | {"": doc}


def test_rock5b_puts_three_detectors_on_the_three_npu_cores_and_the_fourth_on_the_cpu(
        camera: Path) -> None:
    placed = _plan(camera, "rock5b")
    assert sorted(placed[d]["unit"] for d in DETECTORS) == ["npu0", "npu1", "npu2"]
    assert all(placed[d]["candidate"].startswith("rknn-") for d in DETECTORS)
    assert placed["cls"]["unit"] == "cpu" and placed["cls"]["pinned"]
    text = run_cli("pack", "plan", str(camera), "--profile", "rock5b", "--dry-run").stdout
    assert "npu2" in text and "cpu core 0" in text and "estimated from the profile" in text


def test_jetson_orin_nano_uses_its_gpu(camera: Path) -> None:
    placed = _plan(camera, "jetson-orin-nano")
    units = {m["unit"] for n, m in placed.items() if n}
    assert "gpu" in units and units <= {"gpu", "cpu"}
    assert {placed[""]["units"][i]["name"] for i in range(2)} == {"cpu", "gpu"}
    assert all(m["candidate"].startswith("tensorrt-") for n, m in placed.items()
               if n and m["unit"] == "gpu")


def test_rpi5_shares_its_four_cores_without_oversubscribing_them(camera: Path) -> None:
    placed = _plan(camera, "rpi5")
    models = [m for n, m in placed.items() if n]
    assert all(m["unit"] == "cpu" and m["pinned"] for m in models)
    assert all(set(m["cores"]) <= {0, 1, 2, 3} and len(m["cores"]) == m["threads"]
               for m in models)
