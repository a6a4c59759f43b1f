"""Heavy frameworks behind their own door (issue 26): every heavy framework and vendor SDK is
named by a `forbidden` import contract that `lint-imports` checks in CI, allowed only to the
modules listed as its exceptions; and the contract really fails when another module imports it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.base_env import ROOT

#: what the issue names, and the other extras' packages
HEAVY = ("torch", "torch_pruning", "tensorflow", "onnx2tf", "openvino", "nncf", "ai_edge_litert",
         "tflite_runtime", "mlserver", "matplotlib", "paramiko", "PIL", "rknn")
ROOTS = ["edge", "targets", "devices", "partition"]


def _forbidden() -> list[dict]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return [c for c in contracts["contracts"] if c["type"] == "forbidden"
            and sorted(c["source_modules"]) == sorted(ROOTS)]


def test_every_heavy_framework_has_a_door() -> None:
    guarded = {m for c in _forbidden() for m in c["forbidden_modules"]}
    assert set(HEAVY) <= guarded, set(HEAVY) - guarded
    for contract in _forbidden():
        for rule in contract.get("ignore_imports", []):
            importer, imported = (side.strip() for side in rule.split("->"))
            assert imported in contract["forbidden_modules"], rule
            assert importer.split(".")[0] in ROOTS, rule


def test_the_door_contract_fails_on_a_stray_import(tmp_path: Path) -> None:
    """A copy of the tree with one core module importing openvino breaks its contract."""
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ROOTS:
        subprocess.run(["cp", "-r", str(ROOT / name), str(copy)], check=True)
    (copy / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    stray = copy / "edge" / "core" / "stray_door.py"
    stray.write_text("def load():\n    import openvino\n    return openvino\n")
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=copy, capture_output=True, text=True,
                          env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "OpenVINO and NNCF only in the OpenVINO target BROKEN" in done.stdout
    assert "edge.core.stray_door -> openvino" in done.stdout


def test_the_split_client_a_device_runs_imports_no_solver() -> None:
    """`edge run-split` starts on the device, often on a share of a small CPU: it loads the
    client and never solves, so networkx (~0.2 s to import, 8x that on an eighth of a core)
    stays out of it."""
    code = "import sys, edge.flows.runsplit; print('networkx' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
