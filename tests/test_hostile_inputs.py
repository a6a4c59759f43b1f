"""Hostile inputs (issue 14): each gets one clear line and exit 2 -- never a traceback, an
"internal error", a native crash, a file read outside its document's folder, or a device change.

Models are built here with onnx's helper; bundles are copies of a real edge 0.1 bundle
(tests/fixtures) with their manifest edited the way an attacker would.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
from pathlib import Path

import pytest
from onnx import TensorProto

from edge.core.model import sha256_file
from tests.support.cli import Result, run_cli, run_edge
from tests.support.hostile import OLD_BUNDLE, png_header, tiny_model


def _one_line(result: Result, words: str, status: int = 2) -> None:
    assert result.status == status, result.stderr
    assert len(result.error_lines) == 1, result.stderr
    assert words in result.error_lines[0], result.error_lines[0]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize(("dtype", "dims", "opset", "words"), [
    (TensorProto.FLOAT, [100000, 100000, 100000], 17,
     "input 'x' declares [100000, 100000, 100000] float32: 3.55 PB per sample"),
    (TensorProto.STRING, [1], 17, "tensor 'x' is a string: edge feeds and verifies numeric"),
    (TensorProto.FLOAT, [1, 4], 99, "opset 99 is newer than any this edge's ONNX knows"),
])
@pytest.mark.parametrize("command", ["optimize", "partition"])
def test_models_edge_cannot_run_are_one_line(tmp_path: Path, dtype: int, dims: list[int],
                                             opset: int, words: str, command: str) -> None:
    # a child process: a string tensor fed to ONNX Runtime used to abort the interpreter
    model = tiny_model(tmp_path / "m.onnx", dtype, tuple(dims), opset, op="Identity")
    extra = ["--cloud", "cloud-c7i"] if command == "partition" else []
    result = run_edge(command, str(model), "--profile", "x86-64", *extra,
                      "-o", str(tmp_path / "out"), timeout=300)
    _one_line(result, words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("content", "words"), [
    (b"\x89PNG\r\n\x1a\nnot really", "not a readable image (OSError"),
    (None, "not a readable image (DecompressionBombError: Image size (400000000 pixels)"),
])
def test_bad_images_are_one_line(tmp_path: Path, content: bytes | None, words: str) -> None:
    model = tiny_model(tmp_path / "m.onnx", dims=(1, 3, 8, 8))
    (tmp_path / "images").mkdir()
    if content is None:
        png_header(tmp_path / "images" / "a.png", 20000, 20000)
    else:
        (tmp_path / "images" / "a.png").write_bytes(content)
    result = run_cli("optimize", str(model), "--profile", "x86-64", "--calib",
                     str(tmp_path / "images"), "-o", str(tmp_path / "out"))
    _one_line(result, words)
    assert not (tmp_path / "out").exists()


def test_an_empty_host_is_refused(tmp_path: Path) -> None:
    # --host "" used to deploy to the local device with exit 0
    model = tiny_model(tmp_path / "m.onnx")
    result = run_cli("deploy", str(model), "--profile", "x86-64", "--host", "",
                     "-o", str(tmp_path / "out"))
    _one_line(result, "--host: is empty")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("field", "value"), [
    ("work_dir", '"/tmp/x\\ny"'), ("host", '"pi\\u0000.local"'), ("user", '"a\\tb"'),
])
def test_access_fields_are_one_line_each(tmp_path: Path, field: str, value: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"extends: x86-64\nid: p\naccess: {{{field}: {value}}}\n")
    _one_line(run_cli("profiles", "validate", str(path)),
              f"key 'access.{field}': Value error, {field} must be one non-empty line")


@pytest.mark.parametrize("ref", ["SECRET", "../secret.yaml", "link.yaml"])
def test_extends_stays_in_the_profiles_folder(tmp_path: Path, ref: str) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("root:$6$hash-that-must-never-be-printed:19000:0:99999:7:::\n")
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "link.yaml").symlink_to(secret)
    child = folder / "child.yaml"
    child.write_text(f"extends: {str(secret) if ref == 'SECRET' else ref}\nid: child\n")
    result = run_cli("profiles", "validate", str(child))
    _one_line(result, "is outside")
    assert "hash-that-must-never-be-printed" not in result.stderr + result.stdout


def _hostile_bundle(tmp_path: Path, name: str) -> Path:
    """tiny.bundle whose chosen artifact is ``name`` (with the sha256 of what it points at)."""
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "evil.bundle"))
    secret = tmp_path / "secret.onnx"
    shutil.copy(next((bundle / "artifacts").iterdir()), secret)
    (bundle / "artifacts" / "link.onnx").symlink_to(secret)
    manifest = json.loads((bundle / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
    chosen["artifact"]["file"] = str(secret) if name == "ABSOLUTE" else name
    chosen["artifact"]["sha256"] = sha256_file(secret)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


@pytest.mark.parametrize("name", ["../secret.onnx", "ABSOLUTE", "artifacts/link.onnx"])
def test_a_bundle_naming_a_file_outside_it_is_refused_before_connecting(
        tmp_path: Path, name: str) -> None:
    bundle = _hostile_bundle(tmp_path, name)
    # 192.0.2.1 is TEST-NET: were the manifest read after connecting, this would be exit 3
    result = run_cli("deploy", str(bundle), "--profile", "x86-64", "--host", "nobody@192.0.2.1")
    _one_line(result, "is outside")
    assert "files a document names must stay in its folder" in result.error_lines[0]


def test_a_bundle_profile_that_is_a_path_is_never_read(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "evil.bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["profile"], manifest["profile_spec"] = "/etc/passwd", {}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("deploy", str(bundle), "--dry-run")
    _one_line(result, "its profile '/etc/passwd' is not a built-in one")
    assert "root:" not in result.stderr


def test_a_bundle_never_says_where_to_deploy(tmp_path: Path) -> None:
    # a manifest's profile_spec.access used to send a deploy without --host over SSH
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "evil.bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    spec = manifest["profile_spec"]
    manifest["profile"] = spec["id"] = "their-board"
    spec["access"] = {"transport": "ssh", "user": "attacker", "host": "192.0.2.1"}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("deploy", str(bundle), "--dry-run")
    assert result.status == 0, result.stderr
    assert "connect to the embedded local device" in result.stdout
    assert "192.0.2.1" not in result.stdout + result.stderr


def _edited_bundle(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "edited.bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest, next(c for c in manifest["candidates"] if c["status"] == "chosen"))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


@pytest.mark.parametrize(("edit", "words"), [
    (lambda m, c: m.update(chosen="nope"), "chosen 'nope' is not a candidate with an artifact"),
    (lambda m, c: c["artifact"].update(runtime="rm -rf"), "runtime 'rm -rf' of "),
    (lambda m, c: m.update(candidates="x"), "not a valid manifest: candidates"),
    (lambda m, c: c["artifact"].update(file=123), "artifact.file: Input should be a valid str"),
])
def test_malformed_manifests_are_one_line(tmp_path: Path, edit, words: str) -> None:  # type: ignore[no-untyped-def]
    bundle = _edited_bundle(tmp_path, edit)
    for argv in (["deploy", str(bundle), "--dry-run"], ["report", str(bundle), "-o",
                                                        str(tmp_path / "r.html")]):
        _one_line(run_cli(*argv), words)
    assert not (tmp_path / "r.html").exists()


def test_a_binary_known_hosts_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_bytes(bytes(range(256)) * 2)
    result = run_cli("deploy", str(OLD_BUNDLE), "--profile", "x86-64", "--host",
                     "pi@127.0.0.1:1", "--known-hosts", str(tmp_path / "known_hosts"))
    _one_line(result, "not a readable known_hosts file")


def test_a_port_that_is_not_ssh_is_one_line_exit_3(tmp_path: Path) -> None:
    # paramiko's transport thread used to print a 20-line traceback before edge's error
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                peer, _ = server.accept()
                peer.sendall(b"HTTP/1.1 200 OK\r\n\r\nnot ssh\r\n")
                peer.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        result = run_edge("deploy", str(OLD_BUNDLE), "--profile", "x86-64", "--host",
                          f"pi@127.0.0.1:{server.getsockname()[1]}", "--trust-new-host",
                          "--known-hosts", str(tmp_path / "kh"), timeout=120)
    finally:
        server.close()
    _one_line(result, "Error reading SSH protocol banner", status=3)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
