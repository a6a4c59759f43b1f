"""Deploys that fail half way, against a real sshd: the device keeps serving its previous
release, no partial file reaches a release directory, and the next deploy succeeds. Also:
incremental transfer (an unchanged bundle sends 0 bytes), rollback and keep-N pruning.

Faults are real: a test-only Transport wrapper shuts down the real SSH connection's socket
(during an upload, after it, right before the switch), and a device python wrapper SIGKILLs
the agent in its health check or benchmark. Product code has no test seams.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devices.agentfile import agent_file
from devices.deploy import DeployOutcome
from devices.measure import Rounds
from devices.release import list_releases, rollback
from devices.ssh import SSHTransport, parse_host
from edge.core.errors import DeviceError, UsageError
from edge.core.profile import load_profile
from edge.core.values import Artifact, Bundle, Candidate, CandidateResult
from edge.flows.deploy import deploy
from tests.support.sshd import SSHDevice

PROFILE = load_profile("x86-64")  # the bundles' profile

pytestmark = pytest.mark.slow

DIGITS = Path(__file__).parents[1] / "edge" / "samples" / "digits.onnx"
WORK = "~/.edge-faults"
ROUNDS = Rounds(calls=3, warmup=1, idle_s=0.0)  # a fast bench: the faults are the point


# ---------------------------------------------------------------- bundles


@dataclass(frozen=True, slots=True)
class Release:
    """A one-candidate bundle whose artifact is a distinct (loadable) copy of digits.onnx."""

    bundle_dir: Path
    bundle: Bundle
    sha256: str
    size: int

    @property
    def id(self) -> str:
        """The release directory name on the device."""
        return self.sha256[:16]


def make_release(root: Path, tag: str, *, broken: bool = False, pad_mb: int = 0) -> Release:
    """Write a bundle; ``tag`` makes the model's bytes (so its release) unique; ``broken``
    stores bytes no runtime loads (its sha256 is right: only the health check can tell);
    ``pad_mb`` makes the (loadable) model that much bigger, with a metadata entry."""
    import onnx

    from edge.core.bundle import write_bundle
    from edge.core.model import inspect_model, sha256_file

    model = onnx.load(str(DIGITS))
    if pad_mb:
        model.metadata_props.add(key="padding", value=os.urandom(pad_mb << 19).hex())
    model.doc_string = f"edge fault-injection release {tag}"
    source = root / f"{tag}-source" / "digits.onnx"  # versions of one model: one slot
    source.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(source))
    artifact_file = root / f"{tag}.onnx"
    if broken:
        artifact_file.write_bytes(b"\x08\x07broken " + tag.encode() * 4096)
    else:
        artifact_file.write_bytes(source.read_bytes())
    sha = sha256_file(artifact_file)
    candidate = Candidate(target="onnxruntime", precision="fp32")
    artifact = Artifact(candidate=candidate, file=f"artifacts/{sha[:16]}.onnx", sha256=sha,
                        size_bytes=artifact_file.stat().st_size, runtime="onnxruntime")
    result = CandidateResult(candidate=candidate, status="chosen", reason="test", artifact=artifact)
    bundle = Bundle(format=1, profile="x86-64", source=inspect_model(source), calibration="random",
                    evaluation="random", candidates=(result,), chosen=candidate.id, reason="test")
    out = write_bundle(root / f"{tag}.bundle", bundle, {artifact.file: artifact_file})
    return Release(bundle_dir=out, bundle=bundle, sha256=sha, size=artifact.size_bytes)


# ---------------------------------------------------------------- transport with faults


class FaultyTransport:
    """The real SSHTransport, whose connection is cut at one chosen point."""

    is_local = False

    def __init__(self, inner: SSHTransport, fault: str | None = None) -> None:
        self.inner = inner
        self.fault = fault
        self.label = inner.label
        self.fired = False
        self.artifact_puts: list[int] = []  # sizes of artifact files uploaded
        self.puts = 0

    def cut(self) -> None:
        """Drop the TCP connection under paramiko, as a pulled cable or a reboot would."""
        self.fired = True
        ssh = self.inner._connect().get_transport()
        assert ssh is not None
        ssh.sock.shutdown(socket.SHUT_RDWR)
        ssh.close()

    def home(self) -> str:
        return self.inner.home()

    def exists(self, remote: str) -> bool:
        return self.inner.exists(remote)

    def mkdir(self, remote: str) -> None:
        self.inner.mkdir(remote)

    def close(self) -> None:
        self.inner.close()

    def run(self, argv: list[str], *, timeout: float = 600.0):
        if self.fault == "cut-before-switch" and argv[2:3] == ["activate"]:
            self.cut()
        return self.inner.run(argv, timeout=timeout)

    def start(self, argv: list[str], *, timeout: float = 30.0):
        return self.inner.start(argv, timeout=timeout)

    def put(self, local: Path, remote: str) -> None:
        self.puts += 1
        if Path(local) == agent_file():
            self.inner.put(local, remote)
            return
        self.artifact_puts.append(Path(local).stat().st_size)
        if self.fault == "cut-during-upload":
            self._put_cut_midway(local, remote)
        else:
            self.inner.put(local, remote)
            if self.fault == "cut-after-upload":
                self.cut()

    def _put_cut_midway(self, local: Path, remote: str) -> None:
        """The real SSHTransport.put, with the connection cut after its first 32 KiB chunk."""
        put_midway(self.inner, local, remote, self.cut)


def put_midway(inner: SSHTransport, local: Path, remote: str, fault: Callable[[], None]) -> None:
    """The real SSHTransport.put, calling ``fault`` once, after the first chunk is sent."""
    sftp = inner._sftp_client()
    real_put = sftp.put
    fired: list[bool] = []

    def put(localpath, remotepath, callback=None, confirm=True):  # noqa: ANN001, ANN202
        def progress(done: int, total: int) -> None:
            if not fired and 0 < done < total:
                fired.append(True)
                fault()

        return real_put(localpath, remotepath, callback=progress, confirm=confirm)

    sftp.put = put
    try:
        inner.put(local, remote)
    finally:
        del sftp.put


def _ssh(device: SSHDevice) -> SSHTransport:
    return SSHTransport(parse_host(device.target), identity=device.identity,
                        known_hosts=device.known_hosts)


def _deploy(device: SSHDevice, release: Release, *, fault: str | None = None,
            python: str | None = None, keep: int = 3) -> tuple[DeployOutcome, FaultyTransport]:
    with _ssh(device) as inner:
        transport = FaultyTransport(inner, fault)
        outcome = deploy(release.bundle_dir, release.bundle, transport, profile=PROFILE,
                         python=python or device.python, work_dir=WORK, rounds=ROUNDS,
                         threads=1, keep=keep)
    return outcome, transport


# ---------------------------------------------------------------- device state


def _work(device: SSHDevice) -> Path:
    return device.home / ".edge-faults"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _active(device: SSHDevice) -> str:
    return os.readlink(_work(device) / "current").removeprefix("releases/")


def assert_serving(device: SSHDevice, release: Release, known: set[str]) -> None:
    """``release`` is current, intact and loads; every file in every release dir is whole."""
    work = _work(device)
    assert _active(device) == release.id
    assert _sha(work / "current" / "model.onnx") == release.sha256
    for folder in (work / "releases").iterdir():
        for file in folder.iterdir():
            assert not file.name.endswith(".partial"), file
            if file.name == "observed.json":  # the agent's record of what ran it: whole JSON
                assert json.loads(file.read_text())["observed"], file
                continue
            assert _sha(file) in known, f"{file} is not a whole artifact"
    for leftover in (work / "incoming").iterdir():  # may remain; never activated
        assert leftover.name.endswith(".partial"), leftover
    history = json.loads((work / "history.json").read_text())["activations"]
    assert history[-1]["release"] == release.id
    agent = work / "agent" / agent_file().name
    done = subprocess.run([device.python, str(agent), "health", "--model",
                           str(work / "current" / "model.onnx")],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["healthy"], done.stdout


def _wrapper_python(device: SSHDevice, kill_on: str) -> str:
    """A device python that SIGKILLs itself when the agent is asked to ``kill_on``."""
    folder = device.home / "crashing-python"
    folder.mkdir(exist_ok=True)
    script = folder / f"python-{kill_on}"
    script.write_text(f"#!/bin/sh\nfor arg in \"$@\"; do\n"
                      f"  if [ \"$arg\" = {kill_on} ]; then kill -9 $$; fi\ndone\n"
                      f"exec {device.python} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Release]:
    root = tmp_path_factory.mktemp("fault-releases")
    tags = ["A", "B", "C", "D", "E", "during-upload", "after-upload", "before-switch",
            "health-crash", "bench-crash"]
    made = {tag: make_release(root, tag) for tag in tags}
    made["broken"] = make_release(root, "broken", broken=True)
    return made


@pytest.fixture()
def serving_a(ssh_device: SSHDevice, releases: dict[str, Release]) -> Iterator[Release]:
    """Release A is current (deployed now, or already there)."""
    _deploy(ssh_device, releases["A"])
    assert _active(ssh_device) == releases["A"].id
    yield releases["A"]


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("fault", ["cut-during-upload", "cut-after-upload", "cut-before-switch",
                                   "health-crash", "bench-crash", "broken-model"])
def test_a_failed_deploy_keeps_the_previous_release_and_the_next_one_succeeds(
    fault: str, ssh_device: SSHDevice, releases: dict[str, Release], serving_a: Release,
) -> None:
    known = {r.sha256 for r in releases.values()}
    tag = {"cut-during-upload": "during-upload", "cut-after-upload": "after-upload",
           "cut-before-switch": "before-switch", "health-crash": "health-crash",
           "bench-crash": "bench-crash", "broken-model": "broken"}[fault]
    new = releases[tag]
    python = (_wrapper_python(ssh_device, fault.removesuffix("-crash"))
              if fault.endswith("-crash") else None)
    transport_fault = fault if fault.startswith("cut-") else None

    with _ssh(ssh_device) as inner, pytest.raises(DeviceError) as failure:
        transport = FaultyTransport(inner, transport_fault)
        deploy(new.bundle_dir, new.bundle, transport, profile=PROFILE,
               python=python or ssh_device.python,
               work_dir=WORK, rounds=ROUNDS, threads=1)
    assert transport.fired == (transport_fault is not None)
    message = str(failure.value)
    assert "\n" not in message
    if fault in ("health-crash", "broken-model"):
        assert f"release {new.id} failed its health check and was not activated" in message
    if fault == "health-crash":
        assert "agent health was killed" in message
    if fault == "bench-crash":
        assert "agent bench was killed" in message
    if fault == "broken-model":
        assert "cannot load" in message

    assert_serving(ssh_device, serving_a, known)
    installed = _work(ssh_device) / "releases" / new.id / "model.onnx"
    if fault == "cut-during-upload":  # the upload really was cut short: a partial, left aside
        partials = list((_work(ssh_device) / "incoming").glob(f"{new.id}.*.partial"))
        assert len(partials) == 1 and partials[0].stat().st_size < new.size
    if fault in ("cut-during-upload", "cut-after-upload"):
        assert not installed.parent.exists()  # never installed: nothing half-written there
    else:  # installed whole (sha256-checked), just never switched to
        assert _sha(installed) == new.sha256

    if fault == "broken-model":  # a model that cannot load is refused every time
        with pytest.raises(DeviceError, match="failed its health check"):
            _deploy(ssh_device, new)
        assert_serving(ssh_device, serving_a, known)
        return
    outcome, transport = _deploy(ssh_device, new)
    assert outcome.report.active and outcome.report.release == new.id
    assert outcome.previous == serving_a.id
    already_there = not fault.startswith("cut-") or fault == "cut-before-switch"
    assert outcome.bytes_sent == (0 if already_there else new.size)
    assert transport.artifact_puts == ([] if already_there else [new.size])
    assert_serving(ssh_device, new, known)


def test_redeploying_an_unchanged_bundle_sends_nothing(ssh_device: SSHDevice,
                                                       releases: dict[str, Release]) -> None:
    from edge.cli.render import render_deploy_outcome

    first, _ = _deploy(ssh_device, releases["B"])
    again, transport = _deploy(ssh_device, releases["B"])
    assert first.report.release == again.report.release == releases["B"].id
    assert again.bytes_sent == 0 and again.transfer.files_sent == 0
    assert again.transfer.files_reused == 1 and again.transfer.bytes_reused == releases["B"].size
    assert transport.puts == 0  # not the artifact, not the agent: nothing at all
    assert again.to_json()["bytes_sent"] == 0
    assert "nothing (0 B)" in render_deploy_outcome(again)
    assert again.health.load_ms > 0 and again.health.run_ms > 0


def test_a_corrupted_installed_file_is_sent_again(ssh_device: SSHDevice,
                                                  releases: dict[str, Release]) -> None:
    release = releases["C"]
    _deploy(ssh_device, releases["A"])
    _deploy(ssh_device, release)
    _deploy(ssh_device, releases["A"])
    model = _work(ssh_device) / "releases" / release.id / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])  # bit rot, or a tampered file
    outcome, _ = _deploy(ssh_device, release)
    assert outcome.bytes_sent == release.size
    assert _sha(model) == release.sha256 and _active(ssh_device) == release.id


def test_rollback_and_keep_n(ssh_device: SSHDevice, releases: dict[str, Release],
                             tmp_path: Path) -> None:
    from devices.connect import DeviceTarget
    from edge.flows.deploy import (
        ReleasesRequest,
        RollbackRequest,
        run_releases,
        run_rollback,
    )

    a, b, d, e = (releases[t] for t in "ABDE")
    _deploy(ssh_device, a)
    _deploy(ssh_device, b)
    profile = tmp_path / "faults-device.yaml"
    profile.write_text(
        "extends: x86-64\nid: faults-device\naccess:\n"
        f"  host: {ssh_device.host}\n  port: {ssh_device.port}\n  user: {ssh_device.user}\n"
        f"  python: {ssh_device.python}\n  work_dir: {WORK}\n")
    target = DeviceTarget(identity=ssh_device.identity, known_hosts=ssh_device.known_hosts)

    report = run_rollback(RollbackRequest(profile=str(profile), device=target))
    assert report.changed and report.release == a.id and report.previous == b.id
    assert report.artifact == "onnxruntime-fp32" and report.health is not None
    assert _active(ssh_device) == a.id
    report = run_rollback(RollbackRequest(profile=str(profile), device=target, to=b.id[:8]))
    assert report.release == b.id and _active(ssh_device) == b.id
    report = run_rollback(RollbackRequest(profile=str(profile), device=target, to=b.id))
    assert report.changed is False and _active(ssh_device) == b.id

    history = (_work(ssh_device) / "history.json").read_bytes()
    for bad, kind, text in [("../../etc", UsageError, "hex"), ("zzzz", UsageError, "hex"),
                            ("ab", UsageError, "hex"), ("0123456789abcdef", UsageError,
                                                        "not installed")]:
        with pytest.raises(kind, match=text) as refused:
            run_rollback(RollbackRequest(profile=str(profile), device=target, to=bad))
        assert "\n" not in str(refused.value)
    assert _active(ssh_device) == b.id
    assert (_work(ssh_device) / "history.json").read_bytes() == history

    _deploy(ssh_device, d)
    outcome, _ = _deploy(ssh_device, e, keep=1)  # keeps E (active) and D (rollback target)
    assert outcome.previous == d.id and set(outcome.pruned) >= {b.id}
    listing = run_releases(ReleasesRequest(profile=str(profile), device=target))
    assert listing.active == e.id and listing.previous == d.id
    assert [r.release for r in listing.releases] == [e.id, d.id]
    assert listing.releases[1].previous and listing.history[-1]["release"] == e.id
    report = run_rollback(RollbackRequest(profile=str(profile), device=target))
    assert report.release == d.id and _active(ssh_device) == d.id
    with pytest.raises(UsageError, match="not installed"):
        run_rollback(RollbackRequest(profile=str(profile), device=target, to=a.id))


def test_rollback_on_the_local_device(tmp_path: Path, releases: dict[str, Release],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from devices.transport import LocalTransport
    from edge.cli.render import render_releases, render_rollback
    from edge.flows.deploy import ReleasesRequest, RollbackRequest, run_releases, run_rollback

    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(tmp_path / "device"))
    for tag in "AB":
        with LocalTransport() as transport:
            deploy(releases[tag].bundle_dir, releases[tag].bundle, transport, profile=PROFILE,
                   python=sys.executable, work_dir="~/.edge", rounds=ROUNDS, threads=1)
    with pytest.raises(UsageError, match="no previous release"):
        with LocalTransport(tmp_path / "empty") as transport:
            rollback(transport, python=sys.executable, work_dir="~/.edge")
    report = run_rollback(RollbackRequest())
    assert report.release == releases["A"].id and report.transport == "local"
    assert "rolled back" in render_rollback(report)
    listing = run_releases(ReleasesRequest(prune_keep=1))
    assert listing.active == releases["A"].id and listing.previous == releases["B"].id
    assert listing.pruned == ()
    text = render_releases(listing)
    assert releases["A"].id in text and "active" in text and "previous" in text
    with LocalTransport() as transport:
        again = list_releases(transport, python=sys.executable, work_dir="~/.edge")
    assert again.to_json()["active"] == releases["A"].id
