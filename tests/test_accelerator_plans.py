"""Every catalog device that carries an accelerator plans a candidate for it, first, or says
exactly what is missing to build one (issue 28: edge drove only the CPU of eight of the
catalog's thirteen devices); the accelerators' figures never stand for a timing here."""

from __future__ import annotations

from pathlib import Path

import pytest

import edge
from edge.core.model import inspect_model
from edge.core.profile import catalog_ids, load_profile
from edge.flows.planning import plan_for
from targets import get_target
from tests.support.cli import run_edge

DIGITS = Path(edge.__file__).parent / "samples" / "digits.onnx"
WITH_UNITS = [p for p in catalog_ids() if load_profile(p).accelerators]
#: The accelerator runtime each device's plan must offer first (issue 28's "Done when").
EXPECTED = {"rock5b": "rknn", "orangepi5": "rknn", "radxa-zero3w": "rknn",
            "jetson-orin-nano": "tensorrt", "jetson-nano": "tensorrt", "cloud-t4": "tensorrt",
            "imx93": "ethos-u", "corstone-300": "ethos-u", "imx8mp": "tflite-delegate",
            "intel-nuc": "openvino-npu", "coral-dev-board": "edgetpu", "pixel-8": "nnapi"}
#: Devices whose only unit is a Vulkan GPU for NCNN (issue 30): its runtime is appended after
#: the CPU runtimes the profile listed before, so it is planned, not first.
APPENDED = {"rpi4": "ncnn-vulkan", "rpi5": "ncnn-vulkan"}


def test_the_catalog_lists_the_issues_devices_with_their_units() -> None:
    assert set(EXPECTED) | set(APPENDED) == set(WITH_UNITS)


@pytest.mark.parametrize("profile", sorted(APPENDED))
def test_a_vulkan_gpu_appended_for_ncnn_is_planned_on_its_unit(profile: str) -> None:
    plan = plan_for(load_profile(profile), inspect_model(DIGITS), "onnx")
    kept = [p for p in plan if p.candidate.target == APPENDED[profile] and p.keep]
    assert [p.candidate.precision for p in kept] == ["fp32"]  # what the VideoCore computes
    assert all("on the Vulkan GPU" in p.reason for p in kept)


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_a_device_with_an_accelerator_plans_a_candidate_for_it_first(profile: str) -> None:
    plan = [p for p in plan_for(load_profile(profile), inspect_model(DIGITS), "onnx")
            if p.candidate.target != "original"]
    first = plan[0]
    assert first.candidate.target == EXPECTED[profile], [p.candidate.id for p in plan]
    units = [p for p in plan if p.candidate.target == EXPECTED[profile]]
    kept = [p for p in units if p.keep]
    if profile == "coral-dev-board":  # its compiler is not installable here: it says how
        assert not kept and "edgetpu_compiler" in units[0].reason
        assert "apt-get install edgetpu-compiler" in units[0].reason
        return
    assert kept, [(p.candidate.id, p.reason) for p in units]
    caps = get_target(EXPECTED[profile]).caps
    if caps.accelerator:  # NNAPI stays as it was (Android is not in issue 28)
        assert all(f"on the {caps.accelerator}" in p.reason for p in kept)


def test_the_dry_run_names_the_unit_and_what_it_leaves_to_the_cpu() -> None:
    done = run_edge("optimize", str(DIGITS), "--profile", "rock5b", "--dry-run")
    assert done.status == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("rknn-int8"))
    assert "try" in line and "on the Rockchip NPU" in line and "simulator" in line


def test_a_microcontroller_edge_cannot_reach_is_refused_before_any_connection() -> None:
    done = run_edge("deploy", str(DIGITS), "--profile", "corstone-300", "--dry-run")
    assert done.status == 2, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        "error: corstone-300 cannot be reached by edge (access.transport none: a board without "
        "Linux or Python); build and verify its artifact with edge optimize, and flash it with "
        "its vendor's tools"]
