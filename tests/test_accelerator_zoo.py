"""Issue 29, item 6: the zoo reaches every accelerator runtime of issue 28.

bench/zoo_accel.py runs real zoo models through ``edge optimize`` for one profile per runtime
and writes bench/results/zoo_accel.json. This checks the committed results: their provenance;
that every runtime was tried on at least one zoo model; that every runtime whose toolchain runs
on this host converted at least one and had it judged per output by the zoo's own judge; that
edge's fidelity gate and the zoo's judge agree on every accelerator artifact; that each runtime
with an fp16 unit keeps a zoo model on it; that no accelerator figure claims a timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "zoo_accel.json"
#: profile -> the runtime it stands for (issue 28's new runtimes)
PROFILES = {"rock5b": "rknn", "imx93": "ethos-u", "jetson-orin-nano": "tensorrt",
            "intel-nuc": "openvino-npu/-gpu", "imx8mp": "tflite-delegate",
            "coral-dev-board": "edgetpu"}
#: runtimes whose compiler is not installable here (tests/support/hardware.py's list)
NOT_HERE = {"coral-dev-board"}
#: units that compute fp16 (the int8-only NPUs lost these models' metrics in full int8)
FP16_UNITS = ("intel-nuc", "jetson-orin-nano", "rock5b")


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    return json.loads(RESULTS.read_text())


def _rows(summary: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    return [r for r in summary["results"] if r["profile"] == profile]


def test_results_carry_provenance(summary: dict[str, Any]) -> None:
    prov = summary["provenance"]
    assert prov["script"] == "bench/zoo_accel.py"
    assert (ROOT / prov["script"]).is_file()
    assert len(prov["git_sha"]) == 40 and prov["machine"]["cpu"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_runtime_met_a_zoo_model(summary: dict[str, Any], profile: str) -> None:
    rows = _rows(summary, profile)
    assert rows, f"no zoo model was run for {profile} ({PROFILES[profile]})"
    assert any(r.get("accelerator") for r in rows), \
        f"no zoo model planned an accelerator candidate for {profile}"


def _judged(summary: dict[str, Any], profile: str) -> list[tuple[dict[str, Any], bool]]:
    """(accelerator row, the zoo judge's verdict) for every judged accelerator artifact."""
    found = []
    for result in _rows(summary, profile):
        for row in result.get("accelerator", []):
            verdict = result["own"]["fidelity"].get(row["id"]) or {}
            if verdict.get("passed") is not None and not verdict.get("error"):
                found.append((row, verdict["passed"]))
    return found


@pytest.mark.parametrize("profile", sorted(set(PROFILES) - NOT_HERE))
def test_every_runtime_judged_a_zoo_model(summary: dict[str, Any], profile: str) -> None:
    assert _judged(summary, profile), \
        f"no accelerator artifact for {profile} was converted and judged by the zoo's judge"


@pytest.mark.parametrize("profile", sorted(set(PROFILES) - NOT_HERE))
def test_edge_gate_agrees_with_the_zoo_judge(summary: dict[str, Any], profile: str) -> None:
    for row, passed in _judged(summary, profile):
        assert (row["status"] in ("chosen", "passed")) == passed, (profile, row["id"])


@pytest.mark.parametrize("profile", FP16_UNITS)
def test_fp16_units_keep_a_zoo_model(summary: dict[str, Any], profile: str) -> None:
    assert any(passed for _, passed in _judged(summary, profile)), \
        f"no accelerator artifact for {profile} kept the zoo judge's task metrics"


def test_edgetpu_says_what_is_missing(summary: dict[str, Any]) -> None:
    rows = [a for r in _rows(summary, "coral-dev-board") for a in r.get("accelerator", [])]
    assert rows and all(a["status"] == "skipped" and "edgetpu_compiler" in a["reason"]
                        for a in rows)


def test_no_accelerator_figure_is_a_timing_here(summary: dict[str, Any]) -> None:
    for result in summary["results"]:
        for row in result.get("accelerator", []):
            source = (row["figure"] or {}).get("source")
            assert source in (None, "estimate", "simulated"), (result["model"], row["id"])
