"""Profiles for tests whose subject is not the runtimes a catalog profile lists, and what a
test of a measured choice compares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge.core.values import Candidate

__all__ = ["one_runtime", "same_file"]


def one_runtime(folder: Path, base: str = "rpi4", runtime: str = "onnxruntime") -> Path:
    """A profile file in ``folder``: ``base`` with only ``runtime`` and no accelerator, so a
    test of releases, budgets or transports converts that runtime's few candidates rather than
    every runtime's (a full rpi4 plan converts and verifies about fifteen)."""
    name = f"{base}-{runtime}"
    path = folder / f"{name}.yaml"
    path.write_text(f"extends: {base}\nid: {name}\naccelerators: []\nruntimes: [{runtime}]\n")
    return path


def same_file(candidates: list[dict[str, Any]], chosen: str) -> set[str]:
    """The ids of the candidates (a manifest's or --json's) whose artifact is ``chosen``'s file
    byte for byte: edge chooses the original in place of such a copy (its timing is the
    original's, noise apart), so a test compares the best of them."""
    digest = {Candidate(**c["candidate"]).id: c["artifact"]["sha256"] for c in candidates
              if c.get("artifact")}
    return {k for k, v in digest.items() if v == digest.get(chosen)} | {chosen}
