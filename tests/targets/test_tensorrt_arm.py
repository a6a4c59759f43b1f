"""The TensorRT loader through edge's agent on the emulated aarch64 board (Debian arm64 under
qemu-user, tests/support/arm_device.py): the tensorrt-fp16 artifact of a Jetson bundle and its
companion are installed in a release there and measured; the board has numpy (provisioned with
onnxruntime from host-fetched wheels) but neither TensorRT nor a GPU, so the agent refuses in
one line naming TensorRT, as a Jetson without JetPack's TensorRT would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devices.provision import ProvisionReport
from edge.core.errors import DeviceError
from targets.provision import provision_runtime
from tests.support.cli import run_edge


@pytest.fixture(scope="module")
def provisioned(transport, arm_device) -> ProvisionReport:
    from tests.support.arm_device import ARM_ROOT

    cache = Path(os.environ.get("EDGE_TEST_WHEEL_CACHE", ARM_ROOT / "wheels"))
    return provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                             runtime="onnxruntime", host_cache=cache)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trt-arm") / "digits-jetson.bundle"
    # --exhaustive: tensorrt-fp16 is made too, though int8 ranks before it in the order
    result = run_edge("optimize", "sample:digits", "--profile", "jetson-orin-nano", "-o",
                      str(out), "--json", "--exhaustive")
    assert result.status == 0, result.stderr
    return out


@pytest.mark.slow
def test_the_agent_on_an_arm_board_without_tensorrt_refuses_naming_it(
        provisioned: ProvisionReport, bundle: Path, transport, arm_device) -> None:
    from devices.deploy import measure_on_device
    from devices.device import open_device
    from devices.measure import Rounds
    from edge.core.bundle import read_bundle
    from edge.core.profile import load_profile

    manifest = read_bundle(bundle)
    result = next(c for c in manifest.candidates if c.candidate.id == "tensorrt-fp16")
    assert result.artifact is not None and result.artifact.file.endswith(".trt.onnx")
    device = open_device(transport, python=provisioned.python, work_dir="~/.edge")
    with pytest.raises(DeviceError) as err:
        measure_on_device(device, bundle, result.artifact,
                          profile=load_profile("jetson-orin-nano"),
                          rounds=Rounds(rounds=1, calls=2, warmup=1), threads=1, activate=False)
    message = str(err.value)
    print(f"\nthe board's refusal: {message}")
    assert "tensorrt" in message.lower() and len(message.splitlines()) == 1, message
    assert "Traceback" not in message
    release = f"/home/edgeuser/.edge/releases/{result.artifact.release_id[:16]}"
    for name in ("model.trt.onnx", "model.npz"):  # the ONNX and its companion travelled
        assert arm_device.device_path(f"{release}/{name}").is_file(), name
