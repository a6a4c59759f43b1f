"""``edge export mender``: a Mender artifact built and validated with Debian's mender-artifact,
and its update module (devices/mender/edge_release.py) driven through Mender's states on a
real sshd device by an emulated client (tests/support/mender_client.py): install + commit,
install + rollback, and an install that fails (a corrupt payload file, a release that fails
its health check) leaving the device on its previous whole release."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from devices.mender import MODULE
from tests.support.cli import run_cli, run_edge
from tests.support.mender_client import MenderDevice, StateRun, payload_tree
from tests.support.sshd import SSHDevice

pytestmark = pytest.mark.slow

DEVICE_TYPE = "emu-x86"
FIRST, SECOND = "onnxruntime-int8-dynamic", "onnxruntime-int8"  # two releases of one bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits sample optimized for an ONNX Runtime-only x86-64 device (seconds)."""
    where = tmp_path_factory.mktemp("mender")
    (where / "emu-onnx.yaml").write_text(textwrap.dedent("""
        extends: x86-64
        id: emu-onnx
        name: Emulated x86-64 device, ONNX Runtime only
        runtimes: [onnxruntime]
        """))
    out = where / "digits-emu.bundle"
    done = run_edge("optimize", "sample:digits", "--profile", str(where / "emu-onnx.yaml"),
                    "-o", str(out))
    assert done.status == 0, done.stderr
    return out


def _export(bundle: Path, out: Path, candidate: str, device: SSHDevice) -> dict:
    done = run_cli("export", "mender", str(bundle), "--device-type", DEVICE_TYPE, "-o", str(out),
                   "--candidate", candidate, "--device-python", device.python, "--json")
    assert done.status == 0, done.stderr
    return done.json()


@pytest.fixture(scope="module")
def artifacts(bundle: Path, ssh_device: SSHDevice) -> dict[str, dict]:
    """Two artifacts of two releases, keyed by candidate."""
    return {c: _export(bundle, bundle.parent / f"{c}.mender", c, ssh_device)
            for c in (FIRST, SECOND)}


@pytest.fixture(scope="module")
def client(ssh_device: SSHDevice, tmp_path_factory: pytest.TempPathFactory) -> MenderDevice:
    """The update module installed on the device (under the user's home, not /usr/share)."""
    module = tmp_path_factory.mktemp("module") / "edge-release"
    done = run_cli("export", "mender-module", "-o", str(module))
    assert done.status == 0, done.stderr
    assert module.read_bytes() == MODULE.read_bytes() and module.stat().st_mode & 0o111
    return MenderDevice(ssh_device, module)


def _ok(runs: list[StateRun]) -> None:
    assert all(r.status == 0 for r in runs), [(r.state, r.status, r.stderr) for r in runs]


def _deploy(client: MenderDevice, artifact: dict, tmp_path: Path) -> None:
    """Mender's whole good path: download, install, the queries, commit, cleanup."""
    client.receive(Path(artifact["out"]), tmp_path / artifact["release"], DEVICE_TYPE)
    installed = client.install()
    _ok(installed)
    assert [r.stdout.strip() for r in installed[2:]] == ["No", "Yes"]
    _ok(client.commit())


def _current(device: SSHDevice) -> str | None:
    current = device.home / ".edge" / "current"
    return current.resolve().name if current.is_symlink() else None


def _whole(device: SSHDevice, artifact: dict) -> bool:
    """The release's files are there with the sha256 the artifact's manifest gives."""
    folder = device.home / ".edge" / "releases" / artifact["release"]
    return (folder / "model.onnx").is_file() and hashlib.sha256(
        (folder / "model.onnx").read_bytes()).hexdigest().startswith(artifact["release"])


def _agent(client: MenderDevice) -> str:
    """The agent on the device, as the shell there runs it (from the user's home)."""
    agents = sorted((client.device.home / ".edge" / "agent").glob("edge_agent-*.pyz"))
    return f"{client.device.python} .edge/agent/{agents[-1].name}"


def _healthy(client: MenderDevice) -> dict:
    """The agent's health check of the current release, on the device."""
    done = client.ssh(f"{_agent(client)} health --model .edge/current/model.onnx")
    assert done.status == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_artifact_validates_and_names_its_payload(artifacts: dict[str, dict]) -> None:
    report = artifacts[FIRST]
    assert report["validated"] and report["payload_type"] == "edge-release"
    assert report["files"] == ["edge-release.json", next(f for f in report["files"]
                                                         if f.startswith("edge_agent-")),
                               "model.onnx"]
    checked = subprocess.run(["mender-artifact", "validate", report["out"]],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    read = subprocess.run(["mender-artifact", "read", report["out"]], capture_output=True,
                          text=True, check=True).stdout
    assert "Version: 3" in read and "Type:   edge-release" in read and DEVICE_TYPE in read
    assert '"edge_work_dir": "~/.edge"' in read and '"edge_keep": 3' in read


@pytest.mark.parametrize(("args", "needle"), [
    (["/nonexistent.bundle"], "not an edge bundle"),
    (["BUNDLE", "--device-type", "bad type"], "--device-type 'bad type'"),
    (["BUNDLE", "-o", "/nonexistent/dir/r.mender"], "folder /nonexistent/dir does not exist"),
    (["BUNDLE", "--candidate", "nosuch"], "has no artifact of 'nosuch'"),
    (["BUNDLE", "--work-dir", "a b"], "--work-dir 'a b'"),
])
def test_bad_input_is_one_line_and_no_output(bundle: Path, tmp_path: Path, args: list[str],
                                             needle: str) -> None:
    args = [str(bundle) if a == "BUNDLE" else a for a in args]
    base = {"--device-type": DEVICE_TYPE, "-o": str(tmp_path / "r.mender")}
    for option, value in base.items():
        if option not in args:
            args += [option, value]
    done = run_cli("export", "mender", *args)
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    assert needle in done.error_lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_missing_tool_names_the_debian_package(bundle: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    done = run_cli("export", "mender", str(bundle), "--device-type", DEVICE_TYPE, "-o",
                   str(tmp_path / "r.mender"))
    assert done.status == 2 and len(done.error_lines) == 1
    assert "Debian's package mender-artifact" in done.error_lines[0]
    assert not (tmp_path / "r.mender").exists()


def test_install_commit_then_install_rollback(client: MenderDevice, artifacts: dict[str, dict],
                                              tmp_path: Path) -> None:
    first, second = artifacts[FIRST], artifacts[SECOND]
    _deploy(client, first, tmp_path)
    assert _current(client.device) == first["release"] and _whole(client.device, first)
    assert _healthy(client)["healthy"]
    history = json.loads((client.device.home / ".edge" / "history.json").read_text())
    assert history["activations"][-1]["artifact"] == FIRST
    # the second release installed, then rolled back (as the client does when its commit fails)
    client.receive(Path(second["out"]), tmp_path / "second", DEVICE_TYPE)
    _ok(client.install())
    assert _current(client.device) == second["release"] and _whole(client.device, second)
    _ok(client.fail())
    assert _current(client.device) == first["release"] and _whole(client.device, first)
    assert _healthy(client)["healthy"]
    assert (client.device.home / ".edge" / "current").owner() == client.device.user


def _corrupt_model(tree: Path) -> None:
    model = tree / "files" / "model.onnx"
    model.write_bytes(model.read_bytes()[:-1] + b"\0")


def _garbage_model(tree: Path) -> None:
    """A model that is no model, its sha256 and release id written into the manifest: it
    passes the checks and fails the health check."""
    model, manifest = tree / "files" / "model.onnx", tree / "files" / "edge-release.json"
    model.write_bytes(b"not an onnx model")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    data = json.loads(manifest.read_text())
    data["files"]["model.onnx"], data["release"] = sha, sha[:16]
    manifest.write_text(json.dumps(data))


def _other_release(tree: Path) -> None:
    """A manifest whose release id is not its files' (it would change an installed release)."""
    manifest = tree / "files" / "edge-release.json"
    data = json.loads(manifest.read_text())
    data["release"] = "0123456789abcdef"
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize(("edit", "needle"), [
    (_corrupt_model, "payload file model.onnx does not match its sha256"),
    (_garbage_model, "agent health"),
    (_other_release, "names release 0123456789abcdef for files of release"),
])
def test_a_failed_install_leaves_the_previous_release(client: MenderDevice,
                                                      artifacts: dict[str, dict], tmp_path: Path,
                                                      edit, needle: str) -> None:
    first, second = artifacts[FIRST], artifacts[SECOND]
    _deploy(client, first, tmp_path)
    client.receive(Path(second["out"]), tmp_path / "second", DEVICE_TYPE, edit=edit)
    installed = client.install()
    assert installed[-1].state == "ArtifactInstall" and installed[-1].status == 1
    assert needle in installed[-1].stderr and len(installed[-1].stderr.splitlines()) == 1
    _ok(client.fail())
    assert _current(client.device) == first["release"] and _whole(client.device, first)
    assert _healthy(client)["healthy"]
    assert not list((client.device.home / ".edge" / "incoming").glob("*.partial"))


def test_as_root_the_release_stays_the_work_dir_owners(bundle: Path, client: MenderDevice,
                                                       tmp_path: Path) -> None:
    """The Mender client runs as root: the module, run as root on the device's machine against
    the device user's work dir, leaves every file there that user's (edge deploy as them goes
    on working); the agent runs as them."""
    device = client.device
    work = device.home / "as-root" / ".edge"  # new: made by the module, in the user's home
    artifact = run_cli("export", "mender", str(bundle), "--device-type", DEVICE_TYPE, "-o",
                       str(tmp_path / "root.mender"), "--candidate", FIRST, "--work-dir",
                       str(work), "--device-python", device.python, "--json")
    assert artifact.status == 0, artifact.stderr
    tree = tmp_path / "tree"
    payload_tree(tmp_path / "root.mender", tree, device_type=DEVICE_TYPE)
    for state in ("Download", "ArtifactInstall", "ArtifactCommit", "Cleanup"):
        done = subprocess.run(["/usr/bin/python3", str(MODULE), state, str(tree)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, (state, done.stderr)
    assert (work / "current").resolve().name == artifact.json()["release"]
    assert (work / "current" / "model.onnx").is_file() and (work / "history.json").is_file()
    owners = {p.owner() for p in [work.parent, work, *work.rglob("*")]}
    assert owners == {device.user}, owners


def test_the_module_is_standard_library_python_38_and_ignores_other_states(
        tmp_path: Path) -> None:
    """It runs under any device's python3 (>= 3.8) with nothing installed; a state it has no
    work in (a newer client's) is exit 0 and no output; a bad call is exit 2."""
    tree = ast.parse(MODULE.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            assert all(n.split(".")[0] in sys.stdlib_module_names for n in names), ast.dump(node)
        if isinstance(node, ast.Attribute):
            assert node.attr not in {"removeprefix", "removesuffix", "cache"}, node.lineno
        assert not isinstance(node, ast.Match)
    for state in ("Download", "ArtifactVerifyReboot", "ProvidePayloadFileSizes", "Cleanup"):
        done = subprocess.run(["/usr/bin/python3", str(MODULE), state, str(tmp_path)],
                              capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), state
    done = subprocess.run(["/usr/bin/python3", str(MODULE)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "usage: edge-release STATE FILES_DIR" in done.stderr
    written = run_cli("export", "mender-module", "-o", str(tmp_path), "--json")
    assert written.status == 0 and written.json()["out"] == str(tmp_path / "edge-release")
    assert (tmp_path / "edge-release").stat().st_mode & 0o777 == 0o755


def test_an_install_while_edge_deploy_holds_the_device_changes_nothing(
        client: MenderDevice, artifacts: dict[str, dict], tmp_path: Path) -> None:
    """The module takes edge deploy's device lock: while a deploy holds it (here: the agent's
    ``hold``, as edge deploy runs it over SSH), ArtifactInstall fails at once, naming the
    holder, and the client's rollback finds nothing to undo."""
    first, second = artifacts[FIRST], artifacts[SECOND]
    _deploy(client, first, tmp_path)
    holder = subprocess.Popen(client.ssh_argv(f"{_agent(client)} hold .edge --by 'pi@laptop "
                                              "pid 42' --what deploy"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert "held" in json.loads(holder.stdout.readline())  # type: ignore[union-attr]
        client.receive(Path(second["out"]), tmp_path / "second", DEVICE_TYPE)
        installed = client.install()
    finally:
        holder.communicate(timeout=60)
    assert installed[-1].state == "ArtifactInstall" and installed[-1].status == 1
    assert "device busy" in installed[-1].stderr and "pi@laptop pid 42" in installed[-1].stderr
    _ok(client.fail())
    assert _current(client.device) == first["release"] and _whole(client.device, first)


def _as_root(tree: Path, *states: str) -> list[subprocess.CompletedProcess[str]]:
    """The module run by root on this machine (as the Mender client runs it)."""
    return [subprocess.run(["/usr/bin/python3", str(MODULE), state, str(tree)],
                           capture_output=True, text=True, check=False, timeout=300)
            for state in states]


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    return lines[0]


def test_as_root_a_link_of_the_user_never_makes_root_write_there(
        bundle: Path, client: MenderDevice, tmp_path: Path) -> None:
    """Issue 39: the user's ``agent`` folder is a link to a root-owned folder; the module, as
    root, copies the agent in as the user (who may not write there): one line, exit 1, the
    root-owned folder untouched, no release made current."""
    device = client.device
    work = device.home / "linked" / ".edge"
    work.mkdir(parents=True)
    for path in (work.parent, work):
        shutil.chown(path, device.user, device.user)
    owned = device.home.parent / f"root-owned-{tmp_path.name}"  # the user may look, not write
    owned.mkdir(mode=0o755)
    (work / "agent").symlink_to(owned, target_is_directory=True)
    os.lchown(work / "agent", *_ids(device.user))
    artifact = run_cli("export", "mender", str(bundle), "--device-type", DEVICE_TYPE, "-o",
                       str(tmp_path / "l.mender"), "--candidate", FIRST, "--work-dir",
                       str(work), "--device-python", device.python, "--json")
    assert artifact.status == 0, artifact.stderr
    payload_tree(tmp_path / "l.mender", tmp_path / "tree", device_type=DEVICE_TYPE)
    install, failure = _as_root(tmp_path / "tree", "ArtifactInstall", "ArtifactFailure")
    assert "permission denied" in _one_line(install).lower()
    assert failure.returncode == 0, failure.stderr
    assert list(owned.iterdir()) == []
    assert not (work / "current").exists()


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _meta(value: object) -> Callable[[Path], None]:
    return lambda tree: (tree / "header" / "meta-data").write_text(json.dumps(value))


def _manifest(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(tree: Path) -> None:
        path = tree / "files" / "edge-release.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return edit


def _python(tmp_path: Path, kind: str) -> str:
    if kind == "missing":
        return str(tmp_path / "no-such-python")
    (tmp_path / "python-noexec").write_text("#!/bin/sh\n")
    return str(tmp_path / "python-noexec")


MALFORMED: dict[str, Callable[[Path], None]] = {
    "meta-data is a list": _meta([]),
    "meta-data is a string": _meta("~/.edge"),
    "work dir is a number": _meta({"edge_work_dir": 5}),
    "python is empty": _meta({"edge_python": ""}),
    "keep is text": _meta({"edge_keep": "3"}),
    "no files": _manifest(lambda d: d.pop("files")),
    "files not digests": _manifest(lambda d: d.update(files={k: "x" for k in d["files"]})),
    "a file name with a path": _manifest(lambda d: d.update(
        files={f"../{k}": v for k, v in d["files"].items()})),
    "no agent": _manifest(lambda d: d.pop("agent")),
    "release is a path": _manifest(lambda d: d.update(release="../../etc")),
    "model not a file": _manifest(lambda d: d.update(model="other.onnx")),
    "companions not a list": _manifest(lambda d: d.update(companions="model.onnx")),
    "model is a list": _manifest(lambda d: d.update(model=[])),
    "companions hold a list": _manifest(lambda d: d.update(companions=[[]])),
    "manifest is a list": lambda tree: (tree / "files" / "edge-release.json").write_text("[]"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_to_the_module_is_one_line_and_the_release_stays(
        client: MenderDevice, artifacts: dict[str, dict], tmp_path: Path, case: str) -> None:
    """Issue 39: every malformed input of ArtifactInstall, run as root as the client runs it,
    is one line and exit 1 (never a traceback, never the client's own home), and the previous
    release stays current and whole."""
    first, second = artifacts[FIRST], artifacts[SECOND]
    _deploy(client, first, tmp_path)
    tree = tmp_path / "tree"
    payload_tree(Path(second["out"]), tree, device_type=DEVICE_TYPE)
    meta = json.loads((tree / "header" / "meta-data").read_text() or "{}")
    meta["edge_work_dir"] = str(client.device.home / ".edge")
    (tree / "header" / "meta-data").write_text(json.dumps(meta))
    MALFORMED[case](tree)
    install, failure = _as_root(tree, "ArtifactInstall", "ArtifactFailure")
    line = _one_line(install)
    assert "nothing was changed" in line or "not an artifact" in line, line
    assert failure.returncode == 0, failure.stderr
    assert _current(client.device) == first["release"] and _whole(client.device, first)
    assert not Path("/root/.edge/releases").exists() or first["release"] not in os.listdir(
        "/root/.edge/releases")


@pytest.mark.parametrize("python", ["missing", "not executable"])
def test_a_python_that_cannot_run_the_agent_is_one_line(
        client: MenderDevice, artifacts: dict[str, dict], tmp_path: Path, python: str) -> None:
    first, second = artifacts[FIRST], artifacts[SECOND]
    _deploy(client, first, tmp_path)
    tree = tmp_path / "tree"
    payload_tree(Path(second["out"]), tree, device_type=DEVICE_TYPE)
    meta = json.loads((tree / "header" / "meta-data").read_text() or "{}")
    meta |= {"edge_work_dir": str(client.device.home / ".edge"),
             "edge_python": _python(tmp_path, python)}
    (tree / "header" / "meta-data").write_text(json.dumps(meta))
    install, failure = _as_root(tree, "ArtifactInstall", "ArtifactFailure")
    assert "cannot run the agent with" in _one_line(install)
    assert failure.returncode == 0, failure.stderr
    assert _current(client.device) == first["release"] and _whole(client.device, first)
