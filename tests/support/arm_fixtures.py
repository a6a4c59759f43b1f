"""The emulated aarch64 board as module-scoped pytest fixtures, shared by every test file that
runs an agent there (a plugin of tests/conftest.py; a file may define its own ``transport``).
The board itself is tests/support/arm_device.py."""

from __future__ import annotations

from collections.abc import Iterator
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
