"""`edge releases` and `edge rollback` on the embedded local device, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.digits import DigitsModel, kept_digits
from tests.support.profiles import one_runtime

pytestmark = pytest.mark.slow


def _deploy(profile: str, out: Path, *model: str) -> dict:
    done = run_cli("deploy", *(model or ("sample:digits",)), "--profile", profile, "-o",
                   str(out), "--runs", "3", "--json")
    assert done.status == 0, done.stderr
    return done.json()


@pytest.fixture(scope="module")
def other_digits(tmp_path_factory: pytest.TempPathFactory) -> DigitsModel:
    """A digits CNN trained here with another seed than the shipped sample: other weights."""
    return kept_digits(tmp_path_factory.mktemp("other-digits"), seed=1)


def test_releases_and_rollback(tmp_path: Path, other_digits: DigitsModel) -> None:
    digits = other_digits
    pi = str(one_runtime(tmp_path))  # releases are the subject, not runtimes
    first = _deploy(pi, tmp_path / "a.bundle")
    second = _deploy(pi, tmp_path / "b.bundle", str(digits.onnx), "--calib",
                     str(digits.calib), "--eval", str(digits.eval))
    assert first["release"] != second["release"]
    listed = run_cli("releases", "--json")
    assert listed.status == 0, listed.stderr
    doc = listed.json()
    assert doc["active"] == second["release"]
    assert {first["release"], second["release"]} <= {r["release"] for r in doc["releases"]}
    back = run_cli("rollback", "--json")
    assert back.status == 0, back.stderr
    assert back.json()["release"] == first["release"] and back.json()["changed"] is True
    assert run_cli("releases", "--json").json()["active"] == first["release"]
    again = run_cli("rollback", "--to", second["release"][:8], "--json")
    assert again.status == 0 and again.json()["release"] == second["release"]
    redeploy = run_cli("deploy", str(tmp_path / "b.bundle"), "--runs", "3", "--json")
    assert redeploy.status == 0 and redeploy.json()["bytes_sent"] == 0


@pytest.mark.parametrize("bad", ["zz", "../../etc", "ab"])
def test_bad_rollback_targets_change_nothing(bad: str, tmp_path: Path) -> None:
    _deploy(str(one_runtime(tmp_path)), tmp_path / "a.bundle")
    before = run_cli("releases", "--json").json()
    done = run_cli("rollback", "--to", bad)
    assert done.status == 2 and done.stderr.count("\n") == 1, done.stderr
    after = run_cli("releases", "--json").json()
    assert after["active"] == before["active"] and after["history"] == before["history"]
