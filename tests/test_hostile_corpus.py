"""The generated corpus of hostile inputs (tests/support/hostile.py, issue 14), against every
command, in this process: each case ends in one ``error:`` line with its exit status (2, or 3
for a device or transport), no traceback and no "internal error"; nothing is written in the
case's folder or the working directory; the local device's tree is unchanged. A command that
only describes its input (``inspect``) may exit 0 with a warning.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.hostile import Case, cases

CASES = list(cases())


def test_the_corpus_is_large_and_names_are_unique() -> None:
    assert len(CASES) >= 300
    assert len({c.name for c in CASES}) == len(CASES)
    kinds = {c.name.split()[0] for c in CASES}
    assert kinds == {"model", "data", "images", "profile", "manifest", "split", "inventory",
                     "cli"}


def _tree(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` with a digest of its content (or target)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = "dir"
    return found


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The case's folder; the working directory is an empty folder beside it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (tmp_path / "case").mkdir()
    yield tmp_path / "case"
    assert list(cwd.iterdir()) == [], "a refused command wrote in the working directory"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_one_clear_line(case: Case, folder: Path) -> None:
    case.make(folder)
    device = Path(os.environ["EDGE_LOCAL_DEVICE"])
    before, device_before = _tree(folder), _tree(device)
    result = run_cli(*(a.replace("{d}", str(folder)) for a in case.argv))
    assert result.status in case.status, (result.status, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.status == 0:  # a description, with a warning that edge cannot run it
        assert "warning" in result.stderr.lower(), result.stderr
    else:
        assert len(result.error_lines) == 1, result.stderr[-2000:]
    assert _tree(folder) == before, "a refused command wrote or changed files"
    assert _tree(device) == device_before, "a refused command changed the device"
