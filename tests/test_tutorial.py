"""docs/tutorial.md followed end to end (issue 42): every command of the page, §8's second
release, rollback and roll forward included, run as bench/examples.py runs it for the page
(the same steps, in a fresh work dir and cache), exits as recorded and does what the page says.

The page's console blocks are that record (bench/examples.py --check); this runs it again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("tutorial") / "examples.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "examples.py"), "--only",
                           "tutorial", "--out", str(out)], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(out.read_text())["sessions"]["tutorial"]["steps"])


def _recorded() -> list[dict[str, Any]]:
    doc = json.loads((ROOT / "bench" / "results" / "examples.json").read_text())
    return list(doc["sessions"]["tutorial"]["steps"])


def _output(steps: list[dict[str, Any]], command: str) -> str:
    return next(s["output"] for s in steps if s["command"] == command)


def test_every_command_exits_as_the_page_shows(steps: list[dict[str, Any]]) -> None:
    recorded = _recorded()
    assert [s["command"] for s in steps] == [s["command"] for s in recorded]
    assert [(s["command"], s["status"]) for s in steps] == \
        [(s["command"], s["status"]) for s in recorded]
    assert all("Traceback" not in s["output"] and "internal error" not in s["output"]
               for s in steps)


def test_the_first_deploy_and_optimize_end_with_their_verdicts(
        steps: list[dict[str, Any]]) -> None:
    first = _output(steps, "edge deploy sample:digits --profile rpi4")
    assert re.search(r"^verdict: tflite-int8 is live on local:\S+ as release [0-9a-f]{16}",
                     first, re.M), first[-500:]
    strict = next(s["output"] for s in steps if "-o strict.bundle" in s["command"])
    assert re.search(r"^verdict: deploy tflite-int8 ", strict, re.M)


def test_section_8_makes_a_second_release_rolls_back_and_forward(
        steps: list[dict[str, Any]]) -> None:
    second = _output(steps, "edge deploy digits-rpi4.bundle --candidate original --runs 20")
    assert "release" in second and "undo: edge rollback --name digits" in second
    releases = _output(steps, "edge releases")
    active = re.search(r"^([0-9a-f]{16})\s+active\b.*\boriginal\b", releases, re.M)
    previous = re.search(r"^([0-9a-f]{16})\s+previous\b.*\btflite-int8\b", releases, re.M)
    assert active and previous, releases
    back = _output(steps, "edge rollback")
    assert back.startswith("rolled back") and f"active  {previous.group(1)}" in back
    forward = next(s["output"] for s in steps if s["command"].startswith("edge rollback --to "))
    assert forward.startswith("rolled back") and f"active  {active.group(1)}" in forward
