"""Host names, user names, work dirs and device python paths cannot inject commands.

Each hostile value carries commands that would create marker files in /tmp if any shell ever
ran them; afterwards no marker exists. A value is either refused with one error line (exit 2)
before anything is contacted, or passed safely: the deploy works and the odd path is used
literally (checked against a real sshd, whose login shell runs every remote command)."""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from edge.core.errors import UsageError
from tests.support.cli import run_cli
from tests.support.sshd import SSHDevice
from tests.test_deploy_faults import Release, make_release

pytestmark = pytest.mark.slow


@pytest.fixture()
def marker() -> Iterator[str]:
    """A fresh marker prefix in /tmp; the test fails if anything created a file with it."""
    prefix = f"/tmp/edge-pwned-{secrets.token_hex(6)}"
    yield prefix
    assert glob.glob(prefix + "*") == [], "a command was injected"


def _payload(prefix: str) -> str:
    """Every way a shell could be tricked into running touch (quotes balanced, so that broken
    quoting would run the commands rather than fail on a syntax error)."""
    return (f";touch {prefix}-semi;$(touch {prefix}-subst)`touch {prefix}-tick`"
            f"|touch {prefix}-pipe&&touch {prefix}-and #'x' \"y\"")


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return make_release(tmp_path_factory.mktemp("inject"), "inject")


def _profile(path: Path, device: SSHDevice, **access: str) -> Path:
    spec = {"extends": "x86-64", "id": "inject-device",
            "access": {"transport": "ssh", "host": device.host, "port": device.port,
                       "user": device.user, "python": device.python, "work_dir": "~/.edge",
                       **access}}
    path.write_text(yaml.safe_dump(spec))
    return path


def _ssh_flags(device: SSHDevice) -> list[str]:
    return ["--identity", str(device.identity), "--known-hosts", str(device.known_hosts)]


def _refused(result) -> str:
    assert result.status == 2, (result.status, result.stderr)
    assert len(result.error_lines) == 1 and len(result.stderr.strip().splitlines()) == 1
    return result.error_lines[0]


@pytest.mark.parametrize("template", [
    "pi{p}@127.0.0.1", "{p}@127.0.0.1", "pi@127.0.0.1{p}", "pi@{p}", "pi@127.0.0.1:22{p}",
    "pi$(touch {m}-x)@127.0.0.1", "pi@`touch {m}-x`", "pi @127.0.0.1", "pi\n@127.0.0.1",
    "pi@127.0.0.1\n", "pi@127.0.0.1\ntouch {m}-x", "-oProxyCommand=touch {m}-x@127.0.0.1",
    "pi@-oProxyCommand=touch {m}-x",
])
def test_hostile_hosts_and_users_are_refused(template: str, marker: str,
                                             release: Release) -> None:
    host = template.format(p=_payload(marker), m=marker)
    result = run_cli("deploy", str(release.bundle_dir), "--host", host, "--runs", "1")
    line = _refused(result)
    assert "--host" in line


@pytest.mark.parametrize("field", ["user", "host"])
def test_hostile_profile_access_is_refused(field: str, marker: str, release: Release,
                                           ssh_device: SSHDevice, tmp_path: Path) -> None:
    profile = _profile(tmp_path / "p.yaml", ssh_device, **{field: "x" + _payload(marker)})
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile),
                     *_ssh_flags(ssh_device), "--runs", "1")
    _refused(result)
    from devices.connect import DeviceTarget
    from edge.flows.deploy import RollbackRequest, run_rollback

    with pytest.raises(UsageError):
        run_rollback(RollbackRequest(profile=str(profile), device=DeviceTarget(
            identity=ssh_device.identity, known_hosts=ssh_device.known_hosts)))


def test_work_dir_and_python_with_metacharacters_are_used_literally(
    marker: str, release: Release, ssh_device: SSHDevice, tmp_path: Path,
) -> None:
    work_dir = f"~/edge work{_payload(marker)}"
    odd = ssh_device.home / f"py dir{_payload(marker)}"
    odd.mkdir(parents=True)
    python = odd / "python"
    python.write_text(f"#!/bin/sh\nexec {ssh_device.python} \"$@\"\n")
    python.chmod(0o755)
    profile = _profile(tmp_path / "p.yaml", ssh_device, work_dir=work_dir, python=str(python))
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile),
                     *_ssh_flags(ssh_device), "--runs", "2", "--threads", "1", "--json")
    assert result.status == 0, result.stderr
    assert result.json()["release"] == release.id
    work = ssh_device.home / work_dir.removeprefix("~/")
    assert os.readlink(work / "current") == f"releases/{release.id}"
    assert (work / "releases" / release.id / "model.onnx").stat().st_size == release.size
    assert (work / "history.json").is_file()

    from devices.connect import DeviceTarget
    from edge.flows.deploy import ReleasesRequest, run_releases

    listing = run_releases(ReleasesRequest(profile=str(profile), device=DeviceTarget(
        identity=ssh_device.identity, known_hosts=ssh_device.known_hosts)))
    assert listing.active == release.id and listing.work_dir == str(work)

    # The same python given on the command line, with a relative odd work dir (under home).
    relative = f"rel{_payload(marker)}"
    profile = _profile(tmp_path / "q.yaml", ssh_device, work_dir=relative)
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile),
                     *_ssh_flags(ssh_device), "--device-python", str(python), "--runs", "2",
                     "--threads", "1", "--json")
    assert result.status == 0, result.stderr
    assert (ssh_device.home / relative / "current").is_symlink()


@pytest.mark.parametrize("field, value", [
    ("work_dir", "~/edge\ntouch {m}-nl"), ("work_dir", "~/edge\rx"), ("work_dir", "~/a\tb"),
    ("work_dir", "~root/.edge"), ("python", "python3\ntouch {m}-nl"),
])
def test_control_characters_in_paths_are_refused(field: str, value: str, marker: str,
                                                 release: Release, ssh_device: SSHDevice,
                                                 tmp_path: Path) -> None:
    profile = _profile(tmp_path / "p.yaml", ssh_device, **{field: value.format(m=marker)})
    before = sorted(p.name for p in ssh_device.home.iterdir())
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile),
                     *_ssh_flags(ssh_device), "--runs", "1")
    line = _refused(result)
    assert ("work_dir" if field == "work_dir" else "device python") in line
    assert sorted(p.name for p in ssh_device.home.iterdir()) == before


def test_device_python_flag_with_a_newline_is_refused(marker: str, release: Release,
                                                      ssh_device: SSHDevice,
                                                      tmp_path: Path) -> None:
    profile = _profile(tmp_path / "p.yaml", ssh_device, work_dir="~/.edge-inject")
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile),
                     *_ssh_flags(ssh_device), "--device-python",
                     f"{ssh_device.python}\ntouch {marker}-nl", "--runs", "1")
    assert "device python" in _refused(result)


def test_the_local_device_takes_odd_work_dirs_literally(marker: str, release: Release,
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(tmp_path / "device"))
    profile = tmp_path / "local.yaml"
    work_dir = f"~/w{_payload(marker)}"
    profile.write_text(yaml.safe_dump({"extends": "x86-64", "id": "inject-local",
                                       "access": {"transport": "local", "work_dir": work_dir}}))
    result = run_cli("deploy", str(release.bundle_dir), "--profile", str(profile), "--runs", "2",
                     "--threads", "1", "--json")
    assert result.status == 0, result.stderr
    work = tmp_path / "device" / work_dir.removeprefix("~/")
    assert os.readlink(work / "current") == f"releases/{release.id}"
