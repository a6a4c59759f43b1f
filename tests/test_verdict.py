"""Every optimize and deploy ends with one line (issue 42): what to deploy, its size, its
fidelity and speed against the original and where that speed comes from, the next command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


def _last(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


def test_a_measured_choice_ends_with_its_size_fidelity_speed_and_next_step(
        tmp_path: Path) -> None:
    out = tmp_path / "x.bundle"
    result = run_cli("optimize", "sample:digits", "--profile", "x86-64", "-o", str(out))
    assert result.status == 0, result.stderr
    line = _last(result.stdout)
    assert line.startswith("verdict: deploy "), line
    assert "KB, the original 91.3 KB" in line and "accuracy " in line and "(fp32 98.5%)" in line
    assert "x the original's speed (this host only)" in line or "verdict: deploy original" in line
    assert line.endswith(f"next: edge deploy {out} --host USER@HOST")


def test_an_order_choice_says_the_host_is_not_the_device(tmp_path: Path) -> None:
    result = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o",
                     str(tmp_path / "r.bundle"))
    assert result.status == 0, result.stderr
    assert "on this host, which is not a rpi4: the profile's order chose" in _last(result.stdout)


def test_nothing_faithful_ends_with_nothing_to_deploy(tmp_path: Path) -> None:
    profile = tmp_path / "pi-tflite.yaml"  # no ONNX original: no candidate is bit-exact
    profile.write_text("extends: rpi4\nid: pi-tflite\nruntimes: [tflite]\n")
    result = run_cli("optimize", "sample:digits", "--profile", str(profile), "--min-cosine",
                     "1.0", "--metric", "*=values", "-o", str(tmp_path / "none.bundle"))
    assert result.status == 1, result.stderr
    assert _last(result.stdout).startswith("verdict: nothing to deploy: no candidate kept")


def test_deploy_ends_with_what_is_live_and_how_to_undo(tmp_path: Path) -> None:
    bundle = tmp_path / "d.bundle"
    first = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(bundle), "--runs",
                    "3")
    assert first.status == 0, first.stderr
    line = _last(first.stdout)
    assert line.startswith("verdict: ") and " is live on local:" in line, line
    assert "(measured on the device)" in line
    second = run_cli("deploy", str(bundle), "--candidate", "original", "--runs", "3")
    assert second.status == 0, second.stderr
    assert _last(second.stdout).endswith("undo: edge rollback --name digits")


def test_json_keeps_the_verdict(tmp_path: Path) -> None:
    bundle = tmp_path / "j.bundle"
    optimized = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o", str(bundle),
                        "--json")
    assert optimized.status == 0, optimized.stderr
    assert optimized.json()["verdict"].startswith("deploy tflite-")
    deployed = run_cli("deploy", str(bundle), "--runs", "3", "--json")
    assert deployed.status == 0, deployed.stderr
    assert " is live on local:" in deployed.json()["verdict"]
