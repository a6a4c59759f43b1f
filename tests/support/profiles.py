"""Profiles for tests whose subject is not the runtimes a catalog profile lists."""

from __future__ import annotations

from pathlib import Path

__all__ = ["one_runtime"]


def one_runtime(folder: Path, base: str = "rpi4", runtime: str = "onnxruntime") -> Path:
    """A profile file in ``folder``: ``base`` with only ``runtime`` and no accelerator, so a
    test of releases, budgets or transports converts that runtime's few candidates rather than
    every runtime's (a full rpi4 plan converts and verifies about fifteen)."""
    name = f"{base}-{runtime}"
    path = folder / f"{name}.yaml"
    path.write_text(f"extends: {base}\nid: {name}\naccelerators: []\nruntimes: [{runtime}]\n")
    return path
