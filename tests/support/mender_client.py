"""An emulated Mender client for tests: it reads a ``.mender`` file as the client does (the
outer tar's manifest checksums, header.tar.gz's header-info, type-info and meta-data,
data/0000.tar.gz's files), lays out the update module's v3 file tree, copies it and the update
module to a device over SSH, and calls the module's states there in the client's order.

The tree (the client's /var/lib/mender/modules/v3/payloads/0000/tree)::

    version  current_artifact_name  current_artifact_group  current_device_type
    header/{artifact_name, artifact_group, payload_type, header-info, type-info, meta-data}
    files/   the payload's files (the module implements no Download: the client stores them)
    tmp/     the module's own scratch, kept across the states of one deployment
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.sshd import SSHDevice

TREE = "mender/payloads/0000/tree"  # under the device user's home
MODULES = "mender/modules/v3"


@dataclass(frozen=True)
class StateRun:
    """One state's call: what the module printed and its exit status."""

    state: str
    status: int
    stdout: str
    stderr: str


def _members(artifact: Path) -> dict[str, bytes]:
    with tarfile.open(artifact) as outer:
        return {m.name: outer.extractfile(m).read() for m in outer if m.isfile()}  # type: ignore[union-attr]


def _checked(members: dict[str, bytes], files: dict[str, bytes]) -> None:
    """Every file the artifact's manifest lists has its sha256 (the client refuses otherwise):
    the outer tar's own files, and the payload's as ``data/0000/NAME``."""
    listed = {**members, **{f"data/0000/{n}": d for n, d in files.items()}}
    for line in members["manifest"].decode().splitlines():
        sha, name = line.split()
        if hashlib.sha256(listed[name]).hexdigest() != sha:
            raise ValueError(f"{name}: checksum mismatch")


def _untar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as inner:
        return {m.name: inner.extractfile(m).read() for m in inner if m.isfile()}  # type: ignore[union-attr]


def payload_tree(artifact: Path, tree: Path, *, device_type: str,
                 current_name: str = "none") -> str:
    """Lay out the module's file tree for ``artifact`` in ``tree``; the payload type."""
    members = _members(artifact)
    payload = _untar(members["data/0000.tar.gz"])
    _checked(members, payload)
    header = _untar(members["header.tar.gz"])
    info = json.loads(header["header-info"])
    if device_type not in info["artifact_depends"]["device_type"]:
        raise ValueError(f"artifact is not for device type {device_type}")
    type_info = json.loads(header["headers/0000/type-info"])
    name = info["artifact_provides"]["artifact_name"]
    files = {f"files/{n}": d for n, d in payload.items()}
    texts = {"version": "3", "current_artifact_name": current_name,
             "current_artifact_group": "", "current_device_type": device_type,
             "header/artifact_name": name, "header/artifact_group": "",
             "header/payload_type": type_info["type"]}
    layout = {**{k: v.encode() for k, v in texts.items()}, **files,
              "header/header-info": header["header-info"],
              "header/type-info": header["headers/0000/type-info"],
              "header/meta-data": header.get("headers/0000/meta-data", b"")}
    for relative, data in layout.items():
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_bytes(data)
    (tree / "tmp").mkdir(exist_ok=True)
    return str(type_info["type"])


class MenderDevice:
    """The device side of the emulated client: the module and a payload tree over SSH."""

    def __init__(self, device: SSHDevice, module: Path) -> None:
        self.device = device
        self.ssh(f"mkdir -p {MODULES} && cat > {MODULES}/edge-release && "
                 f"chmod 755 {MODULES}/edge-release", stdin=module.read_bytes())

    def ssh_argv(self, command: str) -> list[str]:
        """The ssh command line that runs ``command`` on the device as its user."""
        d = self.device
        return ["ssh", "-i", str(d.identity), "-p", str(d.port), "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={d.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                f"{d.user}@{d.host}", command]

    def ssh(self, command: str, stdin: bytes = b"", timeout: float = 300) -> StateRun:
        """Run a shell command on the device as its user (from its home)."""
        done = subprocess.run(self.ssh_argv(command), input=stdin, capture_output=True,
                              timeout=timeout, check=False)
        return StateRun(command, done.returncode, done.stdout.decode(), done.stderr.decode())

    def receive(self, artifact: Path, local_tree: Path, device_type: str,
                edit: Callable[[Path], None] | None = None) -> None:
        """Download: the artifact's tree laid out here (``edit``: then changed, as a bad disk
        or a bad actor would), then copied to the device's tree."""
        payload_tree(artifact, local_tree, device_type=device_type)
        if edit is not None:
            edit(local_tree)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(local_tree, arcname=".")
        done = self.ssh(f"rm -rf {TREE} && mkdir -p {TREE} && tar -x -C {TREE}",
                        stdin=buffer.getvalue())
        assert done.status == 0, done.stderr

    def state(self, name: str) -> StateRun:
        """Call the module: ``edge-release STATE FILES_DIR``."""
        done = self.ssh(f"{MODULES}/edge-release {name} \"$HOME/{TREE}\"")
        return StateRun(name, done.status, done.stdout, done.stderr)

    def install(self) -> list[StateRun]:
        """The client's states up to the install: Download, ArtifactInstall, the queries."""
        runs = [self.state("Download"), self.state("ArtifactInstall")]
        if runs[-1].status == 0:
            runs += [self.state("NeedsArtifactReboot"), self.state("SupportsRollback")]
        return runs

    def commit(self) -> list[StateRun]:
        """After a good install: ArtifactCommit, Cleanup."""
        return [self.state("ArtifactCommit"), self.state("Cleanup")]

    def fail(self) -> list[StateRun]:
        """After a failed install (or commit): the rollback path, then Cleanup."""
        return [self.state("SupportsRollback"), self.state("ArtifactRollback"),
                self.state("ArtifactFailure"), self.state("Cleanup")]
