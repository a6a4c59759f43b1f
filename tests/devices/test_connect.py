"""The one transport registry: every command's transport is built from a Reach by
devices.connect.open_transport; a kind profiles accept but nothing implements is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.connect import (
    TRANSPORTS,
    AccessOnly,
    DeviceTarget,
    Reach,
    open_transport,
    reach_for,
    transport_for,
)
from devices.ssh import SSHTransport
from devices.transport import LocalTransport
from edge.core.errors import UsageError
from edge.core.profile import load_profile


def test_the_registry_holds_local_and_ssh() -> None:
    assert sorted(TRANSPORTS) == ["local", "ssh"]
    assert isinstance(open_transport(Reach(kind="local")), LocalTransport)


def test_no_host_is_the_local_device() -> None:
    assert reach_for(DeviceTarget(), AccessOnly()) == Reach(kind="local")
    assert isinstance(transport_for(DeviceTarget(), load_profile("rpi4")), LocalTransport)


def test_host_flag_and_profile_host_are_ssh(tmp_path: Path) -> None:
    (tmp_path / "kh").write_text("")
    reach = reach_for(DeviceTarget(host="pi@10.0.0.7:2222", known_hosts=tmp_path / "kh"),
                      load_profile("rpi4"))
    assert reach.kind == "ssh" and reach.known_hosts == tmp_path / "kh"
    assert (reach.host.user, reach.host.host, reach.host.port) == ("pi", "10.0.0.7", 2222)
    transport = open_transport(reach)
    assert isinstance(transport, SSHTransport) and transport.label == "ssh://pi@10.0.0.7:2222"
    mine = load_profile("rpi4").model_copy(update={"access": load_profile("rpi4").access
                                                   .model_copy(update={"host": "kitchen-pi"})})
    assert reach_for(DeviceTarget(), mine).host.host == "kitchen-pi"


def test_adb_is_refused_in_one_line_until_it_exists() -> None:
    reach = reach_for(DeviceTarget(), load_profile("pixel-8"))
    assert reach == Reach(kind="adb")
    with pytest.raises(UsageError) as refused:
        open_transport(reach)
    message = str(refused.value)
    assert "\n" not in message and "'adb' is not implemented yet" in message
    assert "--host" in message
    assert reach_for(DeviceTarget(host="shell@phone.lan"), load_profile("pixel-8")).kind == "ssh"


def test_a_host_with_spaces_is_refused_before_connecting() -> None:
    with pytest.raises(UsageError, match="cannot contain spaces"):
        reach_for(DeviceTarget(host="pi@rasp berry"), AccessOnly())
