"""Per-node costs measured ON a device (a real sshd on 127.0.0.1) through edge's agent.

Timing claims beyond a ranking with a structural gap (the heavy node's share, its ratio to the
tiny one, host vs device agreement) are measured by ``bench/layers.py``, not asserted here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import targets.onnxruntime.profiling
from devices.connect import DeviceTarget, device_python, transport_for
from devices.device import Device, open_device
from edge.core.errors import DeviceError, EdgeError, UsageError
from edge.core.profile import load_profile
from partition.cost import measure_costs, measure_costs_on_device
from partition.graph import load_named
from targets.onnxruntime.profiling import NodeProfile, node_profile
from tests.support.heavy import NODES
from tests.support.heavy import heavy_matmul_model as heavy_model
from tests.support.sshd import SSHDevice

pytestmark = pytest.mark.slow

RUNS = 20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return heavy_model(tmp_path_factory.mktemp("cost-device") / "heavy.onnx")


@pytest.fixture(scope="module")
def device(ssh_device: SSHDevice) -> Iterator[Device]:
    """The device opened as ``edge deploy --host ... --identity ... --known-hosts ...`` does."""
    target = DeviceTarget(host=ssh_device.target, identity=ssh_device.identity,
                          known_hosts=ssh_device.known_hosts, python=ssh_device.python)
    profile = load_profile("rpi4")
    with transport_for(target, profile) as transport:
        assert transport.label == f"ssh://{ssh_device.target}"
        yield open_device(transport, python=device_python(target, profile, transport),
                          work_dir=profile.access.work_dir)


@pytest.fixture
def replies(monkeypatch: pytest.MonkeyPatch) -> list[NodeProfile]:
    """Every profile node_profile gives measure_costs_on_device."""
    seen: list[NodeProfile] = []

    def spy(*args, **kwargs) -> NodeProfile:
        reply = node_profile(*args, **kwargs)
        seen.append(reply)
        return reply

    monkeypatch.setattr(targets.onnxruntime.profiling, "node_profile", spy)
    return seen


def test_costs_are_measured_on_the_device_and_calibrated(
    model: Path, device: Device, ssh_device: SSHDevice, replies: list[NodeProfile]
) -> None:
    costs = measure_costs_on_device(model, device, threads=1, runs=RUNS)
    assert list(costs) == [n.name for n in load_named(model).graph.node] == list(NODES)
    assert all(ms >= 0 for ms in costs.values())
    (reply,) = replies
    assert reply.where == f"ssh://{ssh_device.target}"
    assert reply.device["python"] != "" and reply.runtime_version == "1.31.1"
    # Calibrated exactly as measure_costs: scaled to sum to the optimized whole-model median.
    assert sum(costs.values()) == pytest.approx(reply.whole_ms, rel=1e-9)
    scale = reply.whole_ms / sum(reply.nodes.values())
    assert costs == pytest.approx({n: ms * scale for n, ms in reply.nodes.items()})
    # The model lives on the device by content, in the device user's home.
    remote = Path(reply.model)
    assert remote.parent == ssh_device.home / ".edge" / "models" and remote.is_file()
    assert remote.owner() == ssh_device.user
    assert not list((ssh_device.home / ".edge" / "incoming").iterdir())

    # The same method here, over the same nodes (which is slowest is bench/layers.py's).
    host = measure_costs(model, threads=1, runs=RUNS)
    assert list(host) == list(costs) == list(NODES)
    assert replies[1].where.startswith("host ") and replies[1].model != reply.model


def test_a_second_call_reuses_the_uploaded_model(
    model: Path, device: Device, replies: list[NodeProfile]
) -> None:
    measure_costs_on_device(model, device, threads=1, runs=3)
    remote = Path(replies[0].model)
    before = remote.stat()
    again = measure_costs_on_device(model, device, threads=1, runs=3)
    assert set(again) == set(NODES)
    assert [r.uploaded for r in replies][1:] == [False]
    assert replies[1].model == replies[0].model
    after = remote.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_transport_is_opened_with_the_given_python(
    model: Path, ssh_device: SSHDevice, replies: list[NodeProfile]
) -> None:
    target = DeviceTarget(host=ssh_device.target, identity=ssh_device.identity,
                          known_hosts=ssh_device.known_hosts)
    with transport_for(target, load_profile("rpi4")) as transport:
        costs = measure_costs_on_device(model, transport, python=ssh_device.python,
                                        threads=1, runs=3)
    assert set(costs) == set(NODES)
    assert sum(costs.values()) == pytest.approx(replies[0].whole_ms, rel=1e-9)


def test_a_missing_model_is_a_one_line_usage_error(device: Device, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as missing:
        measure_costs_on_device(tmp_path / "missing.onnx", device)
    assert "no such model file" in str(missing.value)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(UsageError) as corrupt:
        measure_costs_on_device(garbage, device)
    for exc in (missing.value, corrupt.value):
        assert isinstance(exc, EdgeError) and "\n" not in str(exc)


def test_an_agent_failure_is_a_one_line_device_error(
    device: Device, ssh_device: SSHDevice, tmp_path: Path
) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["X"], ["Y"], name="mystery", domain="com.example")],
        "unknown-op", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = 10
    path = tmp_path / "unknown-op.onnx"
    onnx.save(model, str(path))
    with pytest.raises(DeviceError) as failed:
        measure_costs_on_device(path, device, threads=1, runs=2)
    message = str(failed.value)
    assert message.startswith(f"ssh://{ssh_device.target}: onnxruntime cannot load ")
    assert "\n" not in message


def test_the_embedded_local_device_profiles_too(model: Path, tmp_path: Path) -> None:
    from devices.transport import LocalTransport

    with LocalTransport(tmp_path / "device") as transport:
        costs = measure_costs_on_device(model, transport, threads=1, runs=RUNS)
    assert list(costs) == list(NODES) and all(ms >= 0 for ms in costs.values())
    assert len(list((tmp_path / "device" / ".edge" / "models").glob("*.onnx"))) == 1
