"""The edge.fleet collection (devices/ansible/) builds with ansible-galaxy and is ansible-lint
clean at the production profile; it ships in edge's wheel (package data)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "devices" / "ansible"
BIN = Path(sys.executable).parent


def test_the_collection_builds(tmp_path: Path) -> None:
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION),
                           "--output-path", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = tmp_path.glob("edge-fleet-*.tar.gz")
    with tarfile.open(built) as archive:
        names = set(archive.getnames())
    assert {"plugins/modules/release.py", "plugins/action/release.py",
            "roles/rollout/tasks/main.yml", "playbooks/staged_rollout.yml",
            "meta/runtime.yml"} <= names


def test_the_collection_is_lint_clean_at_the_production_profile(tmp_path: Path) -> None:
    collections = tmp_path / "ansible_collections" / "edge"
    collections.mkdir(parents=True)
    (collections / "fleet").symlink_to(COLLECTION, target_is_directory=True)
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path), "NO_COLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "HOME": str(tmp_path)}
    done = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--profile", "production",
                           "--nocolor", "."], cwd=COLLECTION, capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


def test_the_collection_ships_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["devices"]
    shipped = {p for pattern in patterns for p in (ROOT / "devices").glob(pattern) if p.is_file()}
    wanted = {p for p in COLLECTION.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert wanted <= shipped, sorted(str(p) for p in wanted - shipped)
    extras = config["project"]["optional-dependencies"]
    assert "ansible-core==2.19.14" in extras["fleet"] and "fleet" in extras["all"][0]
