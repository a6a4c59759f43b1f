"""``edge deploy --host``: with a device at hand, every faithful candidate is measured THERE by
default and the choice is made from those timings (issue 29); ``--no-on-device`` opts out.

Two real devices: the emulated aarch64 board (Debian arm64 under qemu-user, onnxruntime
provisioned from host-fetched wheels; tests/support/arm_fixtures.py) and a real OpenSSH sshd on
127.0.0.1 whose python has ONNX Runtime and LiteRT (tests/support/sshd.py). The opt-out is
checked on the sshd device only (on the emulated board it would be two more slow deploys).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from edge.core.bundle import read_bundle
from tests.support.cli import run_edge
from tests.support.digits import DigitsModel
from tests.support.sshd import SSHDevice

pytestmark = pytest.mark.slow


def _faithful(bundle: Path, runtimes: set[str]) -> set[str]:
    """The bundle's faithful candidates whose runtime the device has."""
    return {r.candidate.id for r in read_bundle(bundle).candidates
            if r.status in ("chosen", "passed") and r.artifact is not None
            and r.artifact.runtime in runtimes}


def _measured_there(report: dict[str, Any], target: str, expected: set[str]) -> None:
    """Every faithful candidate timed on the device, and the choice made from those timings."""
    compared = {c["candidate"]: c["bench"] for c in report["compared"]}
    assert set(compared) == expected and len(expected) >= 3, (set(compared), expected)
    for bench in compared.values():
        assert bench["where"] == f"ssh://{target}" and bench["source"] == "device"
        assert bench["p50_ms"] > 0 and len(bench["round_ms"]) >= 1
    contest = report["contest"]
    assert {s["candidate"] for s in contest["standings"]} == expected
    assert contest["rounds"] >= 1 and len(contest["round_winners"]) == (
        contest["rounds"] + contest["extra_rounds"])
    assert report["candidate"] in expected
    assert f"measured on ssh://{target}" in report["reason"]


def _opted_out(report: dict[str, Any], bundle: Path) -> None:
    assert report["compared"] == [] and "contest" not in report
    assert report["candidate"] == read_bundle(bundle).chosen
    assert "--no-on-device" in report["reason"] and "the bundle's choice" in report["reason"]


# ---------------------------------------------------------------- the emulated aarch64 board


def _board_deploy(bundle: Path, board: Any, python: str, *extra: str) -> Any:
    return run_edge("deploy", str(bundle), "--profile", str(bundle.parent / "rpi4-onnx.yaml"),
                    "--host", f"{board.user}@{board.host}:{board.port}", "--identity",
                    str(board.identity), "--known-hosts", str(board.known_hosts),
                    "--device-python", python, "--runs", "4", "--warmup", "1", *extra)


def test_deploy_to_the_arm_board_measures_every_faithful_candidate_there(
        arm_bundle: Path, arm_device, provisioned: Any) -> None:
    assert read_bundle(arm_bundle).reason.startswith("first by the profile's order")  # not here
    result = _board_deploy(arm_bundle, arm_device, provisioned.python, "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    target = f"{arm_device.user}@{arm_device.host}:{arm_device.port}"
    _measured_there(report, target, _faithful(arm_bundle, {"onnxruntime"}))
    assert report["bench"]["device"]["machine"] == "aarch64"
    assert all(c["bench"]["device"]["machine"] == "aarch64" for c in report["compared"])


# ---------------------------------------------------------------- a real sshd device


@pytest.fixture(scope="module")
def ssh_bundle(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("choice-ssh") / "digits-rpi4.bundle"
    # --exhaustive: every candidate converted, so the device has several faithful ones to time
    result = run_edge("optimize", str(digits.onnx), "--profile", "rpi4", "--calib",
                      str(digits.calib), "--eval", str(digits.eval), "-o", str(out), "--json",
                      "--exhaustive")
    assert result.status == 0, result.stderr
    return out


def _ssh_deploy(bundle: Path, device: SSHDevice, *extra: str) -> Any:
    return run_edge("deploy", str(bundle), "--host", device.target, "--identity",
                    str(device.identity), "--known-hosts", str(device.known_hosts),
                    "--device-python", device.python, "--runs", "10", *extra)


def test_deploy_to_an_sshd_device_measures_every_faithful_candidate_there(
        ssh_bundle: Path, ssh_device: SSHDevice) -> None:
    result = _ssh_deploy(ssh_bundle, ssh_device)
    assert result.status == 0, result.stderr
    text = result.stdout
    expected = _faithful(ssh_bundle, {"onnxruntime", "tflite"})
    compared = next(line for line in text.splitlines() if line.startswith("compared"))
    # each with the paired figure the choice compared, then its own p50 (issue 41)
    assert all(re.search(rf"\b{re.escape(cid)} [0-9.]+ ms paired \(p50 [0-9.]+\)", compared)
               for cid in expected), compared
    assert any(line.startswith("rounds ") for line in text.splitlines()), text
    again = _ssh_deploy(ssh_bundle, ssh_device, "--json")
    assert again.status == 0, again.stderr
    report = again.json()
    _measured_there(report, ssh_device.target, expected)
    assert (ssh_device.home / ".edge" / "current").resolve().name == report["release"]


def test_no_on_device_deploys_the_bundles_choice_to_an_sshd_device(
        ssh_bundle: Path, ssh_device: SSHDevice) -> None:
    result = _ssh_deploy(ssh_bundle, ssh_device, "--no-on-device", "--json")
    assert result.status == 0, result.stderr
    _opted_out(result.json(), ssh_bundle)


def test_dry_run_says_what_the_default_measures(ssh_bundle: Path, ssh_device: SSHDevice) -> None:
    plan = _ssh_deploy(ssh_bundle, ssh_device, "--dry-run", "--json")
    assert plan.status == 0, plan.stderr
    assert any("every faithful candidate" in s for s in plan.json()["steps"])
    opted = _ssh_deploy(ssh_bundle, ssh_device, "--dry-run", "--no-on-device", "--json")
    assert not any("every faithful candidate" in s for s in opted.json()["steps"])
