"""The emulated aarch64 board as module-scoped pytest fixtures, shared by every test file that
runs an agent there (a plugin of tests/conftest.py; a file may define its own ``transport``).
The board itself is tests/support/arm_device.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def arm_device() -> Iterator[Any]:
    """The running board; where it cannot be prepared the test skips, which fails the run
    under EDGE_TEST_STRICT=1 (CI)."""
    from tests.support.arm_device import ArmDeviceError, prepare, running_arm_device

    try:
        prepare()  # host tools, binfmt, the cached rootfs (minutes the first time only)
    except ArmDeviceError as exc:
        pytest.skip(f"no emulated aarch64 device: {str(exc).splitlines()[0]}")
    with running_arm_device() as device:
        yield device


@pytest.fixture(scope="module")
def transport(arm_device: Any) -> Iterator[Any]:
    """An SSH transport to the board."""
    from devices.ssh import HostSpec, SSHTransport

    spec = HostSpec(user=arm_device.user, host=arm_device.host, port=arm_device.port)
    with SSHTransport(spec, identity=arm_device.identity, known_hosts=arm_device.known_hosts,
                      timeout=120) as ssh:
        yield ssh


@pytest.fixture(scope="module")
def wheel_cache() -> Path:
    """Host-side wheels kept across sessions next to the rootfs (pip download runs once)."""
    from tests.support.arm_device import ARM_ROOT

    return Path(os.environ.get("EDGE_TEST_WHEEL_CACHE", ARM_ROOT / "wheels"))


@pytest.fixture(scope="module")
def provisioned(transport: Any, arm_device: Any, wheel_cache: Path) -> Any:
    """ONNX Runtime provisioned on the board from the host's wheels (a ProvisionReport)."""
    from targets.provision import provision_runtime

    return provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                             runtime="onnxruntime", host_cache=wheel_cache)


@pytest.fixture(scope="module")
def arm_bundle(digits: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits bundle optimized by the real edge for an aarch64 profile that runs ONNX
    Runtime (rpi4-onnx.yaml beside it), as the board has."""
    from tests.support.cli import run_edge

    root = tmp_path_factory.mktemp("arm-bundle")
    profile = root / "rpi4-onnx.yaml"
    profile.write_text("extends: rpi4\nid: rpi4-onnx\nruntimes: [onnxruntime]\n")
    out = root / "digits-rpi4-onnx.bundle"
    # --exhaustive: every candidate converted (tests/devices/test_deploy_choice.py times at
    # least three faithful ones on the board, not only those the profile's order would try)
    result = run_edge("optimize", str(digits.onnx), "--profile", str(profile), "--calib",
                      str(digits.calib), "--eval", str(digits.eval), "-o", str(out), "--json",
                      "--exhaustive")
    assert result.status == 0, result.stderr
    return out
