"""The Ethos-U device loader through edge's agent on the emulated aarch64 board
(tests/support/arm_device.py: Debian arm64 under qemu-user, no NPU): provisioning installs its
runtime (LiteRT) from host-fetched wheels, the agent finds its module by the compound suffix
``.vela.tflite``, and loading a real Vela artifact is refused with exit 3 naming the missing
Ethos-U driver node, then, with a node but no delegate, the missing delegate library."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devices.provision import ProvisionReport
from edge.core.data import load_dataset
from edge.core.model import inspect_model
from targets.ethosu import EthosUTarget
from targets.provision import provision_runtime

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"
WORK = "~/.edge"




@pytest.fixture(scope="module")
def provisioned(transport, arm_device) -> ProvisionReport:
    from tests.support.arm_device import ARM_ROOT

    cache = Path(os.environ.get("EDGE_TEST_WHEEL_CACHE", ARM_ROOT / "wheels"))
    return provision_runtime(transport, device_python=arm_device.python, work_dir=WORK,
                             runtime="ethos-u", host_cache=cache)


@pytest.fixture(scope="module")
def vela_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits sample compiled by Vela for the i.MX 93's Ethos-U65."""
    model = inspect_model(SAMPLES / "digits.onnx")
    calib = load_dataset(SAMPLES / "digits_calib.npy", model)
    path, _ = EthosUTarget().convert(model, "int8", calib=calib,
                                     workdir=tmp_path_factory.mktemp("ethosu-device"))
    return path


def _bench(transport, python: str, agent: str, model: str, env: str = "") -> tuple[int, dict]:
    argv = [python, agent, "bench", model, "--runs", "1", "--rounds", "1"]
    if env:
        argv = ["env", env, *argv]
    done = transport.run(argv, timeout=600)
    return done.status, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_agent_refuses_a_vela_file_without_the_npu(provisioned: ProvisionReport, transport,
                                                       vela_file: Path) -> None:
    from devices.device import open_device

    assert provisioned.platform.arch == "aarch64" and provisioned.runtime_version == "2.3.0"
    device = open_device(transport, python=provisioned.python, work_dir=WORK)
    assert "ethos-u" in device.runtimes
    remote = "/home/edgeuser/.edge/model.vela.tflite"
    transport.put(vela_file, remote)
    status, reply = _bench(transport, provisioned.python, device.agent, remote)
    assert status == 3, reply
    assert "Ethos-U driver is not loaded (/dev/ethosu0 absent)" in reply["error"], reply
    # a driver node but no delegate library: the library is named
    node = "/home/edgeuser/.edge/ethosu0"
    assert transport.run(["touch", node]).status == 0
    status, reply = _bench(transport, provisioned.python, device.agent, remote,
                           env=f"EDGE_ETHOSU_DEVICE={node}")
    assert status == 3, reply
    assert "libethosu_op_delegate.so is not installed" in reply["error"], reply
