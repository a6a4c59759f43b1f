"""Issue 38, end to end: optimize converts what can win. For a device not at hand the profile's
order chooses, so once a candidate keeps fidelity the ones ranking after it are skipped, each
with the reason; the choice is the one --exhaustive makes; --time-budget stops trying and keeps
the best found; a deploy whose device measures the candidates plans for that measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli

SKIPPED = "cannot be chosen: "


def _optimize(out: Path, *flags: str) -> dict[str, Any]:
    done = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o", str(out), "--json",
                   *flags)
    assert done.status == 0, done.stderr
    return done.json()


def _by_id(bundle: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["candidate"]["target"] if c["candidate"]["target"] == "original"
            else f"{c['candidate']['target']}-{c['candidate']['precision']}"
            + (f"-{c['candidate']['variant']}" if c["candidate"].get("variant") else ""): c
            for c in bundle["candidates"]}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp("wins")
    return _optimize(root / "default.bundle"), _optimize(root / "all.bundle", "--exhaustive")


def test_the_choice_is_the_one_exhaustive_makes(both: tuple[dict[str, Any], ...]) -> None:
    default, exhaustive = both
    assert default["chosen"] == exhaustive["chosen"] == "tflite-int8"


def test_what_ranks_after_the_first_faithful_candidate_is_skipped_saying_why(
        both: tuple[dict[str, Any], ...]) -> None:
    default, exhaustive = both
    mine, all_ = _by_id(default), _by_id(exhaustive)
    skipped = {k for k, c in mine.items() if c["reason"].startswith(SKIPPED)}
    assert skipped >= {"tflite-int8-dynamic", "tflite-fp32", "onnxruntime-int8",
                       "onnxruntime-fp32", "ncnn-fp32", "executorch-int8", "executorch-fp32"}
    for name in skipped:
        assert mine[name]["status"] == "skipped" and mine[name].get("artifact") is None
        assert "tflite-int8 keeps fidelity and ranks before it in rpi4's order" in \
            mine[name]["reason"]
        assert "--exhaustive converts it" in mine[name]["reason"]
        assert all_[name]["status"] in ("passed", "rejected", "failed")  # tried there
    converted = [c for c in mine.values() if c.get("artifact")]
    assert {"original", "tflite-int8"} <= {k for k, c in mine.items() if c.get("artifact")}
    assert len(converted) < len([c for c in all_.values() if c.get("artifact")])


def test_a_spent_time_budget_keeps_the_best_found_and_says_what_was_left_out(
        tmp_path: Path) -> None:
    bundle = _optimize(tmp_path / "b", "--time-budget", "0.001")
    found = _by_id(bundle)
    assert bundle["chosen"] == "original"  # tried first: nothing to convert
    left = [k for k, c in found.items() if c["reason"].startswith("not tried: the "
                                                                  "--time-budget of 0.001 s")]
    assert "tflite-int8" in left and "faithful so far: original" in found["tflite-int8"]["reason"]


def test_the_dry_run_says_the_work_order_and_how_it_is_cut() -> None:
    done = run_cli("optimize", "sample:digits", "--profile", "rpi4", "--dry-run")
    assert done.status == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("tried in this order: original, tflite-int8, tflite-int8-dynamic")
    assert "those ranking after it in rpi4's order are skipped" in last
    as_json = run_cli("optimize", "sample:digits", "--profile", "x86-64", "--dry-run", "--json")
    plan = as_json.json()
    assert "estimated best case" in plan["work"]
    first = next(p for p in plan["plan"] if p["candidate"] == "onnxruntime-int8")
    assert first["order"] >= 2 and first["estimate"]["ms"] > 0


def test_a_deploy_whose_device_measures_plans_for_that_measurement(tmp_path: Path) -> None:
    done = run_cli("deploy", "sample:digits", "--profile", "rpi4", "--on-device", "--runs", "3",
                   "-o", str(tmp_path / "b"), "--json")
    assert done.status == 0, done.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    reasons = [c["reason"] for c in manifest["candidates"]]
    assert not [r for r in reasons if r.startswith(SKIPPED)], \
        "the device's timings choose: nothing is cut by the profile's order"
    assert sum(c["status"] in ("passed", "chosen") for c in manifest["candidates"]) > 2
