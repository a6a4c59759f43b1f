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


TINY = Path(__file__).parent / "fixtures" / "edge-0.1" / "tiny.bundle"


def _currents(names: tuple[str, ...]) -> dict[str, str]:
    listed = run_cli("releases", "--json")
    assert listed.status == 0, listed.stderr
    slots = {s["name"]: s["active"] for s in listed.json()["slots"]}
    assert listed.json()["name"] is None and set(slots) == set(names)
    return slots


def test_three_models_on_one_device_deploy_roll_back_and_bench_apart(
        tmp_path: Path, other_digits: DigitsModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded local device holds three models at once, each in its slot: a deploy, a
    rollback and a bench of one leave the others' current releases as they were."""
    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(tmp_path / "device"))  # its own device
    pi = str(one_runtime(tmp_path))
    first = _deploy(pi, tmp_path / "a.bundle")  # sample:digits: the slot "digits"
    assert first["name"] == "digits"
    other = _deploy(pi, tmp_path / "b.bundle", str(other_digits.onnx), "--calib",
                    str(other_digits.calib), "--eval", str(other_digits.eval), "--name", "kws")
    tiny = run_cli("deploy", str(TINY), "--runs", "3", "--json")
    assert tiny.status == 0 and tiny.json()["name"] == "tiny", tiny.stderr
    before = _currents(("digits", "kws", "tiny"))
    assert before == {"digits": first["release"], "kws": other["release"],
                      "tiny": tiny.json()["release"]}
    again = run_cli("deploy", str(tmp_path / "b.bundle"), "--name", "digits", "--runs", "3",
                    "--json")
    assert again.status == 0 and again.json()["bytes_sent"] == 0, again.stderr  # shared
    assert _currents(("digits", "kws", "tiny")) == before | {"digits": other["release"]}
    refused = run_cli("rollback")
    assert refused.status == 2 and "give --name" in refused.stderr
    back = run_cli("rollback", "--name", "digits", "--json")
    assert back.status == 0 and back.json()["release"] == first["release"], back.stderr
    assert _currents(("digits", "kws", "tiny")) == before
    measured = run_cli("bench", str(tmp_path / "b.bundle"), "--name", "kws", "--runs", "3",
                       "--json")
    assert measured.status == 0 and measured.json()["active"] is True, measured.stderr
    assert _currents(("digits", "kws", "tiny")) == before
    one = run_cli("releases", "--name", "kws", "--json").json()
    assert one["active"] == other["release"] and one["previous"] is None
    bad = run_cli("deploy", str(TINY), "--name", "../x")
    assert bad.status == 2 and bad.stderr.count("\n") == 1 and "--name" in bad.stderr
