"""The Edge TPU's device loader: Python 3.7 code (Mendel Linux), picked for ``.edgetpu.tflite``
files by the agent, and refusing in one line naming what is missing -- libedgetpu, or the
Edge TPU itself (the apex driver's /dev/apex_0, a Coral USB Accelerator) -- here, through the
agent's command line, and on the emulated aarch64 board with a real TFLite runtime installed."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from devices.agent import runtimes
from devices.agent.errors import AgentError
from devices.agentfile import agent_bytes
from targets.edgetpu import agent

SOURCE = Path(agent.__file__)


@pytest.fixture
def model(tmp_path: Path) -> str:
    """A file named as an Edge TPU artifact (the loader refuses before reading it)."""
    path = tmp_path / "model.edgetpu.tflite"
    path.write_bytes(b"TFL3 not really compiled")
    return str(path)


@pytest.fixture
def no_tpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No /dev/apex_0 and an empty USB bus (whatever this host has)."""
    usb = tmp_path / "usb"
    usb.mkdir()
    monkeypatch.setattr(agent, "PCIE_DEVICE", str(tmp_path / "apex_0"))
    monkeypatch.setattr(agent, "SYS_USB", str(usb))
    return usb


def test_the_loader_is_python_37_code() -> None:
    ast.parse(SOURCE.read_text(), feature_version=(3, 7))


def test_the_agent_picks_the_edgetpu_loader_for_its_artifacts(model: str) -> None:
    assert runtimes.model_runtime(model) == "edgetpu"
    assert runtimes.plugins()["edgetpu"] is agent


def test_without_libedgetpu_the_refusal_names_it(model: str) -> None:
    with pytest.raises(AgentError) as caught:
        agent.load(model, 1)
    assert caught.value.status == 3
    assert str(caught.value).startswith("edgetpu: libedgetpu.so.1 (the Edge TPU runtime) is "
                                        "not installed: install it from Coral's apt repository")


def test_through_the_agents_loader_too(model: str) -> None:
    with pytest.raises(AgentError, match="libedgetpu.so.1") as caught:
        runtimes.load(model, 1)
    assert caught.value.status == 3


def test_without_an_edge_tpu_the_refusal_names_the_driver(
        model: str, no_tpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "LIBRARY", "libc.so.6")  # a library that loads: past that check
    with pytest.raises(AgentError) as caught:
        agent.load(model, 1)
    message = str(caught.value)
    assert caught.value.status == 3 and "\n" not in message
    assert message.startswith("edgetpu: no Edge TPU found: ")
    assert "apex driver is not loaded" in message and "1a6e:089a, 18d1:9302" in message


def test_a_usb_accelerator_is_found_on_the_bus(no_tpu: Path) -> None:
    device = no_tpu / "2-1"
    device.mkdir()
    (device / "idVendor").write_text("18d1\n")
    (device / "idProduct").write_text("9302\n")
    (no_tpu / "usb1").mkdir()  # a hub: no ids
    assert agent.usb_accelerators() == [str(device)]
    agent.require_device()


def test_a_library_without_the_delegate_is_one_line(
        model: str, no_tpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Edge TPU seen, but no delegate from the library (tflite_runtime's ValueError, as when
    libedgetpu finds no usable device): one line. The interpreter module is a stand-in here:
    the real one needs the real library to get this far."""
    test_a_usb_accelerator_is_found_on_the_bus(no_tpu)
    monkeypatch.setattr(agent, "LIBRARY", "libc.so.6")

    def load_delegate(library: str) -> None:
        raise ValueError(f"Failed to load delegate from {library}\n")

    monkeypatch.setattr(agent.runtimes, "import_module",
                        lambda *names: SimpleNamespace(load_delegate=load_delegate))
    with pytest.raises(AgentError) as caught:
        agent.load(model, 1)
    assert str(caught.value) == ("edgetpu: libc.so.6 found no usable Edge TPU: Failed to load "
                                 "delegate from libc.so.6")


def test_the_agent_command_line_answers_in_json(model: str, tmp_path: Path) -> None:
    zipapp = tmp_path / "edge_agent.pyz"
    zipapp.write_bytes(agent_bytes())
    done = subprocess.run([sys.executable, str(zipapp), "health", "--model", model],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert "edgetpu: libedgetpu.so.1 (the Edge TPU runtime) is not installed" in error


# ---------------------------------------------------------------- the emulated aarch64 board




@pytest.mark.slow
def test_the_board_refuses_without_libedgetpu(arm_device, transport, tmp_path: Path) -> None:
    """LiteRT (ai-edge-litert, provisioned from the host's wheels) imports on the aarch64
    board, so the loader gets as far as the Edge TPU runtime, which is not there."""
    from devices.device import open_device
    from targets.provision import provision_runtime
    from tests.support.arm_device import ARM_ROOT

    report = provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                               runtime="tflite", host_cache=ARM_ROOT / "wheels")
    device = open_device(transport, python=report.python, work_dir="~/.edge")
    assert "edgetpu" not in device.runtimes  # pycoral is not installed: not reported
    local = tmp_path / "model.edgetpu.tflite"
    local.write_bytes(b"TFL3 not really compiled")
    remote = f"{device.work}/incoming/model.edgetpu.tflite"
    transport.put(local, remote)
    done = transport.run([device.python, device.agent, "health", "--model", remote],
                         timeout=600)
    assert done.status == 3, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert "edgetpu: libedgetpu.so.1 (the Edge TPU runtime) is not installed" in error
