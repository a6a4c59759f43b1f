"""edge's device transport (devices.transport.Transport) over an action plugin's connection:
edge's own provisioning (devices.provision) then runs through Ansible's SSH, its settings and
its host keys, as it runs through edge's in ``edge deploy --provision``. Every command is a
fixed argv, each argument shell-quoted; nothing is left running on the device."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError

from devices.transport import Completed
from edge.core.errors import DeviceError

__all__ = ["ConnectionTransport", "label_of"]


def label_of(user: str, host: str, port: int) -> str:
    """``ssh://user@host:port`` (an IPv6 address in brackets), as edge names a device."""
    address = f"[{host}]" if ":" in host else host
    return f"ssh://{user}@{address}:{port}"


class ConnectionTransport:
    """run / put / home / exists / mkdir through ``action``'s connection (an ActionBase)."""

    is_local = False

    def __init__(self, action: Any, label: str) -> None:
        self.action, self.label = action, label

    def home(self) -> str:
        """The remote user's home directory."""
        home = str(self.action._remote_expand_user("~", sudoable=False))
        if not home.startswith("/"):
            raise DeviceError(f"{self.label}: cannot read the home directory (got {home!r})")
        return home

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        """Run argv on the device (the task's own timeout bounds it, not ``timeout``)."""
        try:
            done = self.action._low_level_execute_command(shlex.join(argv), sudoable=False)
        except AnsibleError as exc:
            raise DeviceError(f"{self.label}: {_line(exc)}") from None
        return Completed(status=int(done.get("rc", 1)), stdout=str(done.get("stdout", "")),
                         stderr=str(done.get("stderr", "")))

    def start(self, argv: list[str], *, timeout: float = 30.0) -> Any:
        """Refused: an action plugin's connection runs one command at a time to its end."""
        raise DeviceError(f"{self.label}: a long-running command cannot be started over "
                          "ansible's connection")

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to a remote path (the caller makes it atomic)."""
        try:
            self.action._connection.put_file(str(local), remote)
        except AnsibleError as exc:
            raise DeviceError(f"{self.label}: cannot send {local.name}: {_line(exc)}") from None

    def exists(self, remote: str) -> bool:
        """Whether a remote path exists."""
        return self.run(["test", "-e", remote]).status == 0

    def mkdir(self, remote: str) -> None:
        """Create a remote directory and its parents."""
        done = self.run(["mkdir", "-p", "--", remote])
        if done.status != 0:
            raise DeviceError(f"{self.label}: cannot create {remote}: "
                              f"{(done.stderr.strip().splitlines() or ['mkdir failed'])[-1]}")

    def close(self) -> None:
        """Nothing to release: the connection is Ansible's."""

    def __enter__(self) -> ConnectionTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
