"""Every registered runtime supplies every part, from its own folder (docs/adding-a-runtime.md):
its targets (converter + host loader) with declared Capabilities, its device-side agent module,
its per-layer profiler, its provisioning spec (each, or ``None`` declared), its report label
and colour; and reading the registry stays light."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from devices.agent import runtimes as agent_runtimes
from devices.agentfile import PACKAGE, agent_bytes
from edge.core.capabilities import Capabilities
from targets import GROUP, REGISTRY, get_target, load_object, runtime_for_suffix, runtimes
from targets.base import Provision, Runtime

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = sorted(runtimes())


def _folder(name: str) -> Path:
    """The folder of ``targets`` whose ``__init__`` declares runtime ``name``."""
    declared = runtimes()[name]
    for init in sorted((ROOT / "targets").glob("*/__init__.py")):
        module = importlib.import_module(f"targets.{init.parent.name}")
        if getattr(module, "RUNTIME", None) is declared:
            return init.parent
    raise AssertionError(f"no folder declares {name}")


def test_the_registry_reads_the_folders() -> None:
    """Edge's own runtimes are found by their folders: no entry point in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert GROUP not in project.get("entry-points", {})
    assert agent_runtimes.GROUP == GROUP  # another package's runtime: the same group
    assert {"onnxruntime", "openvino", "tflite", "nnapi"} <= set(RUNTIMES)
    assert len({_folder(name) for name in RUNTIMES}) == len(RUNTIMES)


def test_a_new_folder_is_a_new_runtime_with_no_other_edit(tmp_path: Path) -> None:
    """A copy of targets/ with one more folder: its runtime is registered, a profile may name
    it, and the agent finds its loader, with no other file changed."""
    shutil.copytree(ROOT / "targets", tmp_path / "targets",
                    ignore=shutil.ignore_patterns("__pycache__"))
    folder = tmp_path / "targets" / "npu_z"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        "from targets.base import Runtime\n"
        "RUNTIME = Runtime(name='npu-z', targets=(('npu-z', 'targets.npu_z.t:T'),),"
        " suffixes=('.z.tflite',), agent='targets.npu_z.agent', profiler=None, provision=None,"
        " label='NPU Z', colour='#123456')\n")
    (folder / "agent.py").write_text("NAME = 'npu-z'\nSUFFIXES = ('.z.tflite',)\n")
    code = ("from targets import runtimes; from edge.core.profile import known_runtimes; "
            "from edge.core.plugins import full_suffix; "
            "from devices.agent import runtimes as a; "
            "print('npu-z' in runtimes(), 'npu-z' in known_runtimes(), "
            "full_suffix('m.z.tflite'), a.suffixes()['.z.tflite'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}, cwd=tmp_path)
    assert done.stdout.split() == ["True", "True", ".z.tflite", "npu-z"], done.stderr


@pytest.mark.parametrize("name", RUNTIMES)
def test_every_runtime_lives_in_its_own_folder(name: str) -> None:
    declared = runtimes()[name]
    assert isinstance(declared, Runtime) and declared.name == name
    folder = _folder(name)
    specs = [spec for _, spec in declared.targets]
    modules = [declared.agent, declared.profiler, *specs]
    assert all(m.startswith(f"targets.{folder.name}.") for m in modules if m), modules


@pytest.mark.parametrize("name", RUNTIMES)
def test_every_runtime_supplies_its_targets_with_capabilities(name: str) -> None:
    declared = runtimes()[name]
    assert declared.targets, f"{name} offers no target"
    for target_name, spec in declared.targets:
        target = get_target(target_name)
        assert REGISTRY[target_name] == spec and target.name == target_name
        assert isinstance(target.caps, Capabilities) and target.caps.runtime == name
        assert callable(target.convert) and callable(target.load) and callable(target.missing)


@pytest.mark.parametrize("name", RUNTIMES)
def test_every_runtime_declares_its_agent_profiler_provision_label_and_colour(name: str) -> None:
    declared = runtimes()[name]
    assert declared.label and re.fullmatch(r"#[0-9a-f]{6}", declared.colour)
    assert declared.provision is None or isinstance(declared.provision, Provision)
    if declared.provision is not None:
        assert all("==" in r for r in declared.provision.requirements)  # pinned
    if declared.profiler is not None:
        assert callable(load_object(declared.profiler))
    if declared.agent is None:  # its files run on another runtime's loader
        assert not declared.suffixes and declared.profiler is None
        return
    module = importlib.import_module(declared.agent)
    assert module.NAME == name and tuple(module.SUFFIXES) == declared.suffixes
    assert module.MODULES and module.DISTRIBUTIONS and callable(module.load)
    assert all(callable(command[1]) for command in module.COMMANDS)
    assert agent_runtimes.plugins()[name] is module


def test_one_runtime_owns_each_suffix() -> None:
    owners = [s for r in runtimes().values() for s in r.suffixes]
    assert len(owners) == len(set(owners)), owners
    assert agent_runtimes.suffixes() == {s: runtime_for_suffix(s).name  # type: ignore[union-attr]
                                          for s in owners}


@pytest.mark.parametrize("name", [n for n in RUNTIMES if runtimes()[n].agent])
def test_every_agent_module_rides_in_the_agent_zip(name: str) -> None:
    declared = runtimes()[name]
    source = Path(importlib.util.find_spec(declared.agent).origin)  # type: ignore[arg-type, union-attr]
    with zipfile.ZipFile(io.BytesIO(agent_bytes())) as archive:
        assert archive.read(f"{PACKAGE}/{agent_runtimes.PREFIX}{name}.py") == source.read_bytes()


@pytest.mark.parametrize("name", [n for n in RUNTIMES if runtimes()[n].agent])
def test_every_agent_module_is_standalone(name: str) -> None:
    """Python 3.8 syntax; the standard library, numpy, its runtime and the agent's own modules
    only; and an import-linter contract that says so (pyproject.toml)."""
    declared = runtimes()[name]
    agent = importlib.import_module(declared.agent)
    source = Path(agent.__file__).read_text()  # type: ignore[arg-type]
    tree = ast.parse(source, feature_version=(3, 8))
    allowed = {"numpy", "edge_agent", "devices", *(m.split(".")[0] for m in agent.MODULES)}
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - allowed <= sys.stdlib_module_names, imported - allowed
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert any(c.get("source_modules") == [declared.agent] for c in contracts["contracts"])


def test_reading_the_registry_imports_no_heavy_framework() -> None:
    code = ("import sys; from targets import REGISTRY, runtimes; runtimes(); list(REGISTRY); "
            "from devices.agent import runtimes as r; r.plugins(); "
            "heavy = {'tensorflow', 'openvino', 'torch', 'onnx2tf', 'nncf', 'ai_edge_litert', "
            "'tflite_runtime'} & set(sys.modules); print(sorted(heavy))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stdout


def test_no_table_outside_targets_is_keyed_by_runtime_names() -> None:
    """No dict literal outside targets/ maps runtime names (or maps anything to them, as the
    suffix -> runtime maps did): what a runtime is, its folder says."""
    names = set(RUNTIMES)
    tables = []
    for folder in ("edge", "devices", "partition"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Dict):
                    continue
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                values = {v.value for v in node.values if isinstance(v, ast.Constant)}
                if len(keys & names) >= 2 or len(values & names) >= 2:
                    tables.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert tables == []
