"""A failed release leaves the device as it was (issue 27): a bundle's artifact names are
checked on the host before connecting, and an installed release is never given new files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from devices.device import prepare
from devices.release import install_artifact
from devices.transport import LocalTransport
from edge.core.bundle import read_bundle
from edge.core.errors import DeviceError, UsageError
from tests.support.cli import run_cli
from tests.support.hostile import OLD_BUNDLE


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else
                                       hashlib.sha256(p.read_bytes()).hexdigest()
                                       if p.is_file() else "dir")
            for p in sorted(root.rglob("*")) if p.name not in (".lock", ".deploy.lock")}


def _renamed(tmp_path: Path, name: str) -> Path:
    """The edge 0.1 bundle with its chosen artifact's file renamed ``name``."""
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "b.bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
    (bundle / chosen["artifact"]["file"]).rename(bundle / "artifacts" / name)
    chosen["artifact"]["file"] = f"artifacts/{name}"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


@pytest.mark.parametrize("name", ["model", "a$(touch x).onnx", "a\nb.onnx", "a`id`.onnx",
                                  "a\u202exnno.onnx", "-rf.onnx", "m.onnx ", "m.tflite",
                                  "x" * 200 + ".onnx", "m\u0430.onnx"])
def test_a_bundle_whose_artifact_name_is_not_plain_is_refused_before_connecting(
        tmp_path: Path, name: str) -> None:
    bundle = _renamed(tmp_path, name)
    with pytest.raises(UsageError, match="artifact"):
        read_bundle(bundle)
    device = Path(os.environ["EDGE_LOCAL_DEVICE"])
    before = _tree(device) if device.exists() else {}
    done = run_cli("deploy", str(bundle), "--profile", "x86-64")
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    assert (_tree(device) if device.exists() else {}) == before


def test_a_release_installed_under_other_names_is_never_changed(tmp_path: Path) -> None:
    good = read_bundle(OLD_BUNDLE)
    chosen = good.chosen_result()
    assert chosen is not None and chosen.artifact is not None
    done = run_cli("deploy", str(OLD_BUNDLE), "--profile", "x86-64",
                   "--device-python", sys.executable)
    assert done.status == 0, done.stderr
    device = prepare(LocalTransport(), sys.executable, "~/.edge")
    root = Path(os.environ["EDGE_LOCAL_DEVICE"])
    before = _tree(root)
    # the same bytes under a name without a suffix: a manifest edited past the host's checks
    staged = tmp_path / "artifacts"
    staged.mkdir()
    shutil.copy(OLD_BUNDLE / chosen.artifact.file, staged / "model")
    odd = dataclasses.replace(chosen.artifact, file="artifacts/model")
    with pytest.raises(DeviceError, match="is installed there as model.onnx, not with model;"):
        install_artifact(device, tmp_path, odd)
    assert _tree(root) == before
