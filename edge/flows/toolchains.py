"""``edge toolchains``: the environments of converters whose pins clash with edge's — which are
declared, which are built, and building or removing one (edge/core/toolchain.py does it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from edge.core import progress
from edge.core.errors import UsageError
from edge.core.toolchain import Toolchain, build, built, disk_bytes, location, remove
from targets import declared_toolchains

__all__ = ["ToolchainState", "install_toolchains", "list_toolchains", "remove_toolchains"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolchainState:
    """One declared toolchain: where its environment is, whether it is built, and with what."""

    name: str
    path: str
    built: bool
    requirements: tuple[str, ...]
    versions: dict[str, str]  # what cache keys and manifests record
    size_bytes: int | None = None  # on disk, when built
    built_at: str = ""
    build_seconds: float | None = None
    action: str = ""  # install: built | already built | would build; remove: removed | absent
    installed: dict[str, str] = field(default_factory=dict)  # every distribution, when built

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "path": self.path, "built": self.built,
                "requirements": list(self.requirements), "versions": self.versions,
                "size_bytes": self.size_bytes, "built_at": self.built_at,
                "build_seconds": self.build_seconds, "action": self.action,
                "installed": self.installed}


def list_toolchains() -> tuple[ToolchainState, ...]:
    """Every declared toolchain and its environment's state."""
    return tuple(_state(t) for t in declared_toolchains().values())


def install_toolchains(names: tuple[str, ...], *,
                       dry_run: bool = False) -> tuple[ToolchainState, ...]:
    """Build the named toolchains' environments (those not built yet); with ``dry_run`` only
    say which would be built and what they would install."""
    chosen = _chosen(names)
    if dry_run:
        return tuple(_state(t, "already built" if built(t) else "would build") for t in chosen)
    return tuple(_installed(t) for t in chosen)


def remove_toolchains(names: tuple[str, ...]) -> tuple[ToolchainState, ...]:
    """Delete the named toolchains' environments."""
    return tuple(_state(t, "removed" if remove(t) else "absent") for t in _chosen(names))


def _installed(toolchain: Toolchain) -> ToolchainState:
    if built(toolchain) is not None:
        return _state(toolchain, "already built")
    log.info("building toolchain %s in %s (%d distributions)", toolchain.name,
             location(toolchain), len(toolchain.requirements))
    with progress.step(f"toolchain {toolchain.name}: building its environment"):
        build(toolchain)
    return _state(toolchain, "built")


def _chosen(names: tuple[str, ...]) -> list[Toolchain]:
    """The named toolchains, in the order given; UsageError naming the valid ones."""
    known = declared_toolchains()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown toolchain {unknown[0]!r}: choose one of "
                         f"{', '.join(known) or '(none declared)'}")
    return [known[n] for n in dict.fromkeys(names)]


def _state(toolchain: Toolchain, action: str = "") -> ToolchainState:
    env = built(toolchain)
    return ToolchainState(
        name=toolchain.name, path=str(location(toolchain)), built=env is not None,
        requirements=toolchain.requirements, versions=toolchain.versions(), action=action,
        size_bytes=None if env is None else disk_bytes(env.path),
        built_at="" if env is None else env.built_at,
        build_seconds=None if env is None else env.seconds,
        installed={} if env is None else env.installed)
