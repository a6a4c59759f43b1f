"""Host specs are parsed strictly: nothing that could reach a shell gets through."""

from __future__ import annotations

import pytest

from devices.ssh import HostSpec, parse_host
from edge.core.errors import UsageError


@pytest.mark.parametrize("text, spec", [
    ("pi@raspberrypi.local", HostSpec(user="pi", host="raspberrypi.local", port=22)),
    ("edgeuser@127.0.0.1:2222", HostSpec(user="edgeuser", host="127.0.0.1", port=2222)),
    ("root@[::1]:2200", HostSpec(user="root", host="::1", port=2200)),
    ("jetson", HostSpec(user="ubuntu", host="jetson", port=22)),
])
def test_valid_hosts(text: str, spec: HostSpec) -> None:
    assert parse_host(text, default_user="ubuntu") == spec


@pytest.mark.parametrize("text", ["pi@host;reboot", "$(id)@host", "pi@`id`", "pi@host:22;ls",
                                  "pi@host:0", "pi@host:70000", "pi@-oProxyCommand=x", "@host",
                                  "pi@ho st", "pi@host\nid"])
def test_hostile_or_broken_hosts_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_host(text, default_user="pi")
