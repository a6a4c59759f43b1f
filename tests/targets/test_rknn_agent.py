"""The RKNN device loader (targets/rknn/agent.py, the agent's runtime_rknn): on a device without
the RKNPU kernel driver a .rknn model is refused in one line naming the driver (exit 3) — here,
and on the emulated aarch64 board (tests/support/arm_device.py) after provisioning
rknn-toolkit-lite2 2.5.0 into its venv offline from host-fetched wheels, through the agent's
own ``bench``. Where the driver shows itself (debugfs, a DRM render node bound to rknpu) is
checked on fake sysfs trees. The .rknn files are real: the digits CNN converted by
rknn-toolkit2 in its environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devices.agent.errors import AgentError
from edge.core.model import inspect_model
from edge.core.toolchain import build
from edge.core.values import Dataset
from targets.rknn import agent
from targets.rknn.convert import TOOLCHAIN
from targets.rknn.target import RKNNTarget
from tests.support.mediapipe import cache_dir

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
DRIVER = "rknn: the RKNPU driver is not loaded"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rknn_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The digits CNN as an int8 .rknn for rk3588."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_TOOLCHAIN_DIR", str(cache_dir() / "toolchains"))
        build(TOOLCHAIN)
        model = inspect_model(SAMPLES / "digits.onnx")
        calib = np.load(SAMPLES / "digits_calib.npy")[:8]
        data = Dataset(feeds=tuple({"input": calib[i:i + 1]} for i in range(len(calib))))
        yield RKNNTarget().convert(model, "int8", calib=data,
                                   workdir=tmp_path_factory.mktemp("rknn"))[0]


def test_the_loader_declares_its_runtime() -> None:
    assert (agent.NAME, agent.SUFFIXES) == ("rknn", (".rknn",))
    assert (agent.MODULES, agent.DISTRIBUTIONS) == (("rknnlite.api",), ("rknn-toolkit-lite2",))


def test_without_the_driver_a_model_is_refused_naming_it(rknn_file: Path) -> None:
    assert agent.driver_missing()  # this host has no Rockchip NPU
    with pytest.raises(AgentError, match=DRIVER) as refused:
        agent.load(str(rknn_file), 1)
    assert refused.value.status == 3 and "\n" not in str(refused.value)


def test_the_driver_is_found_in_debugfs_or_behind_a_render_node(tmp_path: Path) -> None:
    debugfs, drm = tmp_path / "debug" / "rknpu", tmp_path / "drm"
    nodes = str(drm / "renderD*")
    assert "absent" in agent.driver_missing(str(debugfs), nodes)
    debugfs.mkdir(parents=True)
    assert agent.driver_missing(str(debugfs), nodes) == ""
    debugfs.rmdir()
    for name, driver in (("renderD128", "panfrost"), ("renderD129", "RKNPU")):
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (drm / name / "device").mkdir(parents=True)
        os.symlink(tmp_path / "drivers" / driver, drm / name / "device" / "driver")
    assert agent.driver_missing(str(debugfs), nodes) == ""
    os.unlink(drm / "renderD129" / "device" / "driver")
    assert agent.driver_missing(str(debugfs), nodes)  # a GPU's render node is not the NPU


def test_the_inputs_come_from_the_models_own_description(rknn_file: Path,
                                                         tmp_path: Path) -> None:
    assert agent.model_inputs(str(rknn_file)) == [[1, 1, 8, 8]]
    other = tmp_path / "not.rknn"
    other.write_bytes(b"RKNN" + bytes(64))
    with pytest.raises(AgentError, match="not a .rknn file") as refused:
        agent.model_inputs(str(other))
    assert refused.value.status == 2


# ---------------------------------------------------------------- the emulated aarch64 board


# (the board and its transport: tests/support/arm_fixtures.py)


def test_on_the_emulated_board_rknnlite_is_provisioned_and_the_agent_refuses_without_the_npu(
        arm_device: Any, transport: Any, wheel_cache: Path, rknn_file: Path) -> None:
    from devices.device import open_device
    from edge.core.errors import DeviceError
    from targets.provision import provision_runtime

    report = provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                               runtime="rknn", host_cache=wheel_cache)
    assert report.runtime_version == "2.5.0" and report.platform.arch == "aarch64"
    assert any(w.startswith("rknn_toolkit_lite2-2.5.0-") and w.endswith("aarch64.whl")
               for w in report.wheels)
    device = open_device(transport, python=report.python, work_dir="~/.edge")
    assert "rknn" in device.runtimes  # the agent found its loader and rknnlite's version
    remote = "/home/edgeuser/.edge/digits.rknn"
    transport.put(rknn_file, remote)
    with pytest.raises(DeviceError, match=DRIVER) as refused:
        device.call("bench", remote, "--runs", "1", timeout=600)
    assert "/sys/kernel/debug/rknpu" in str(refused.value)


class _Lite:
    """rknnlite's RKNNLite core-mask constants (its values, as rknn-toolkit-lite2 2.x names)."""

    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_2 = 0, 1, 2, 4


def test_a_pack_places_a_model_on_one_npu_core(rknn_file: Path) -> None:
    with pytest.raises(AgentError, match=DRIVER):
        agent.load_on(str(rknn_file), 1, "npu1")
    with pytest.raises(AgentError, match="not gpu") as wrong:
        agent.load_on(str(rknn_file), 1, "gpu")
    assert wrong.value.status == 2
    assert agent._mask(_Lite, "NPU_CORE_1") == {"core_mask": 2}
    assert agent._mask(_Lite, None) == {}
    with pytest.raises(AgentError, match="no NPU_CORE_3") as missing:
        agent._mask(_Lite, "NPU_CORE_3")
    assert missing.value.status == 2
