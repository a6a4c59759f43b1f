"""A device that lies in its agent's replies (issue 39): ``edge deploy`` to a local device whose
python is a wrapper running the real agent and then changing one value of one command's reply.
Each lie is one ``error:`` line naming the device, the command and the field, exit 3 (never 4,
never a traceback), and the release current before stays current; a lie in ``activate``'s reply
(the switch is done when the agent answers) still leaves a whole, verified release current."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.cli import Result, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
FIRST = FIXTURES / "edge-0.1" / "tiny.bundle"
SECOND = FIXTURES / "edge-0.2" / "x86.bundle"

LIAR = """#!{python}
import json, os, subprocess, sys
LIES = json.loads(os.environ.get("EDGE_TEST_LIES") or "{{}}")
args = sys.argv[1:]
if len(args) >= 2 and args[1] in LIES:
    real = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    reply = json.loads(real.stdout.strip().splitlines()[-1])
    for path, value in LIES[args[1]]:
        here = reply
        for part in path[:-1]:
            here = here[part]
        if isinstance(value, dict) and "repeat" in value:  # too long for the environment
            value = [value["repeat"]] * value["times"]
        here[path[-1]] = value
    print(json.dumps(reply))
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *args])
"""

#: (agent command, path in its reply, the lie, what the error line names)
LIES = [
    ("probe", ["device", "cores"], 10**12, "device.cores"),
    ("probe", ["runtimes"], ["onnxruntime"], "runtimes"),
    ("verify", ["free_bytes"], -5, "free_bytes"),
    ("verify", ["missing"], "model.onnx", "missing"),
    ("install", ["sha256"], "beef", "sha256"),
    ("health", ["healthy"], "yes", "healthy"),
    ("health", ["load_ms"], -1.0, "load_ms"),
    ("bench", ["results", 0, "p50_ms"], float("nan"), "results.0.p50_ms"),
    ("bench", ["results", 0, "p50_ms"], 1e308, "results.0.p50_ms"),
    ("bench", ["results", 0, "round_ms"], {"repeat": 1.0, "times": 2_000_000},
     "results.0.round_ms"),
    ("bench", ["results"], [], "results"),
    ("bench", ["peak_rss_mb"], -1, "peak_rss_mb"),
    ("activate", ["changed"], "no", "changed"),
]


@pytest.fixture
def device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local device on FIRST's release, reached through the lying python."""
    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(tmp_path / "device"))
    liar = tmp_path / "python"
    liar.write_text(LIAR.format(python=sys.executable))
    liar.chmod(0o755)
    first = _deploy(FIRST, liar)
    assert first.status == 0, first.stderr
    return liar


def _deploy(bundle: Path, python: Path) -> Result:
    return run_cli("deploy", str(bundle), "--profile", "x86-64", "--device-python", str(python),
                   "--runs", "3", "--no-on-device", "--name", "m")  # one slot, two models


def _current() -> str:
    return os.readlink(Path(os.environ["EDGE_LOCAL_DEVICE"]) / ".edge" / "current")


@pytest.mark.parametrize("command, path, value, field", LIES,
                         ids=[f"{c}-{f}-{str(v)[:10]}" for c, _, v, f in LIES])
def test_a_lie_is_one_line_exit_3_and_the_release_stays(device: Path, command: str,
                                                        path: list, value: object, field: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    before = _current()
    monkeypatch.setenv("EDGE_TEST_LIES", json.dumps({command: [[path, value]]}))
    result = _deploy(SECOND, device)
    assert result.status == 3, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert len(result.error_lines) == 1, result.stderr
    assert f"agent {command} replied {field}" in result.error_lines[0], result.error_lines
    release = Path(os.environ["EDGE_LOCAL_DEVICE"]) / ".edge" / _current()
    assert release.is_dir() and any(release.glob("model.*"))
    if command != "activate":
        assert _current() == before
    monkeypatch.delenv("EDGE_TEST_LIES")
    assert _deploy(SECOND, device).status == 0  # the next honest run succeeds
