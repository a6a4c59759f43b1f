"""The agent ships as ONE file: a zipapp built the same on every build and machine, which runs
alone (standard library only, edge not importable) under a Python 3.8 grammar."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devices import agentfile
from devices.agent.runtimes import PREFIX, plugins
from devices.agentfile import agent_bytes, agent_file, agent_name
from devices.device import open_device
from devices.transport import LocalTransport

AGENT = Path(agentfile.__file__).with_name("agent")
MODULES = sorted(AGENT.glob("*.py"))
#: Each runtime's agent module (targets/<runtime>/agent.py), zipped as runtime_<name>.py.
RUNTIME_MODULES = {name: Path(str(m.__file__)) for name, m in sorted(plugins().items())}


def test_two_builds_are_byte_identical_whatever_the_files_times_or_the_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = agent_bytes()
    assert agent_bytes() == first
    copy = tmp_path / "agent"
    shutil.copytree(AGENT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for index, path in enumerate(sorted(copy.iterdir())):
        os.utime(path, (1e9 + index * 7919, 1.5e9 - index * 104729))  # other mtimes
        path.chmod(0o600 if index % 2 else 0o755)  # other modes
    monkeypatch.setattr(agentfile, "SOURCE", copy)
    assert agent_bytes() == first
    child = subprocess.run(  # another process, time zone and umask
        [sys.executable, "-c", "import sys, os; os.umask(0o077); from devices.agentfile import "
         "agent_bytes; sys.stdout.buffer.write(agent_bytes())"],
        capture_output=True, check=True, env=dict(os.environ, TZ="Asia/Kathmandu"))
    assert child.stdout == first


def test_the_zipapp_holds_the_package_in_a_fixed_order_with_fixed_times() -> None:
    with zipfile.ZipFile(agent_file()) as archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == ["__main__.py", *(f"edge_agent/{p.name}" for p in MODULES),
                         *(f"edge_agent/{PREFIX}{n}.py" for n in RUNTIME_MODULES)]
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
        assert archive.read("edge_agent/timing.py") == (AGENT / "timing.py").read_bytes()
        for name, path in RUNTIME_MODULES.items():
            assert archive.read(f"edge_agent/{PREFIX}{name}.py") == path.read_bytes()
    data = agent_file().read_bytes()
    assert agent_file().name == agent_name(data) == \
        f"edge_agent-{hashlib.sha256(data).hexdigest()[:12]}.pyz"


def test_it_runs_from_an_empty_directory_without_edge(tmp_path: Path) -> None:
    isolated = [sys.executable, "-I", "-S"]  # no site-packages: edge is not importable
    assert subprocess.run([*isolated, "-c", "import edge"], cwd=tmp_path,
                          capture_output=True).returncode == 1
    alone = tmp_path / "edge_agent.pyz"
    alone.write_bytes(agent_bytes())
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run([*isolated, str(alone), "probe"], cwd=empty, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["agent"] == 1 and reply["device"]["cores"] >= 1 and reply["runtimes"] == {}
    done = subprocess.run([*isolated, str(alone), "bench", str(tmp_path / "none.onnx")],
                          cwd=empty, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2 and "not found" in json.loads(done.stdout)["error"]
    assert list(empty.iterdir()) == []  # nothing written beside it (no __pycache__)


def test_the_device_runs_the_same_file(tmp_path: Path) -> None:
    device = open_device(LocalTransport(tmp_path / "device"), python=sys.executable,
                         work_dir="~/.edge")
    on_device = Path(device.agent)
    assert on_device.name == agent_file().name and on_device.suffix == ".pyz"
    assert on_device.read_bytes() == agent_bytes()
    assert {"onnxruntime", "tflite", "openvino"} <= device.runtimes


#: What the agent may import: the standard library and numpy (inside the function that needs
#: it); runtimes are imported by name with importlib where a model needs one. A runtime's agent
#: module imports the agent as ``edge_agent`` (the zipapp) or ``devices.agent`` (edge's host).
ALLOWED = set(sys.stdlib_module_names) | {"numpy"}
RUNTIME_ALLOWED = ALLOWED | {"edge_agent", "devices"}
NEWER_THAN_38 = {"removeprefix", "removesuffix", "cache", "pairwise", "batched"}


@pytest.mark.parametrize("path", [*MODULES, *RUNTIME_MODULES.values()],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_agent_module_is_standard_library_and_python_38(path: Path) -> None:
    allowed = ALLOWED if path.parent == AGENT else RUNTIME_ALLOWED
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in allowed for a in node.names), ast.dump(node)
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 or (node.module or "").split(".")[0] in allowed, \
                ast.dump(node)  # its own modules relatively: it is edge_agent in the zipapp
            assert node.module != "__future__"
        if isinstance(node, ast.Attribute):
            assert node.attr not in NEWER_THAN_38, f"{path.name}:{node.lineno} {node.attr}"
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "zip":
            assert not node.keywords, f"{path.name}:{node.lineno}: zip(strict=)"
        if isinstance(node, (ast.FunctionDef, ast.arg)):
            assert getattr(node, "returns", None) is None and \
                getattr(node, "annotation", None) is None, f"{path.name}: annotations"
        assert not isinstance(node, ast.Match)
    lines = len(path.read_text().splitlines())
    assert lines < 400, f"{path.name}: {lines} lines"
