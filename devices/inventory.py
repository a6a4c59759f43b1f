"""An Ansible inventory for ``edge deploy --inventory``: its hosts with the vars edge reads,
its groups, and ``--limit``. The file is parsed by devices.inventory_files (a small parser
tested against ``ansible-inventory --list``; why not ansible-core itself: docs/fleet.md). Vars
merge as in Ansible: ``all``, then groups by depth (same depth: by name), then the host's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devices.inventory_files import Parsed, parse
from devices.inventory_limit import select
from devices.inventory_vars import FleetHost, canonical, fleet_host
from edge.core.errors import UsageError

__all__ = ["FleetHost", "Inventory", "load_inventory"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Inventory:
    """A parsed inventory: hosts in file order and each group's hosts (children included)."""

    path: Path
    hosts: tuple[FleetHost, ...]
    groups: dict[str, tuple[str, ...]]

    def host(self, name: str) -> FleetHost:
        """The host called ``name``."""
        return next(h for h in self.hosts if h.name == name)

    def select(self, limit: str | None) -> tuple[FleetHost, ...]:
        """The hosts an Ansible-style ``--limit`` pattern selects, in inventory order."""
        if limit is None or not limit.strip():
            return self.hosts
        wanted = select([h.name for h in self.hosts], self.groups, limit, str(self.path))
        return tuple(h for h in self.hosts if h.name in wanted)


def load_inventory(path: Path) -> Inventory:
    """Read and validate an inventory file (YAML or INI); errors name the file and the host."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"inventory {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"inventory {path}: cannot read it: {exc}") from None
    return _inventory(parse(path, text))


def _inventory(parsed: Parsed) -> Inventory:
    depth: dict[str, int] = {}
    members = {"all": _visit(parsed, "all", 0, (), depth)}
    for name in [g for g in parsed.groups if g != "all"]:  # one all does not reach: a cycle
        members[name] = _visit(parsed, name, 1, (), depth)
    if not parsed.hosts:
        raise UsageError(f"inventory {parsed.path} has no hosts")
    grouped = {h for g, hs in members.items() if g not in ("all", "ungrouped") for h in hs}
    members["ungrouped"] = {h for h in parsed.hosts if h not in grouped}
    hosts = []
    for host in parsed.hosts:
        mine = tuple(sorted((g for g, hs in members.items() if host in hs),
                            key=lambda g: (depth[g], g)))
        hosts.append(fleet_host(f"inventory {parsed.path}: host {host}", host, mine,
                                _merged(parsed, host, mine, dict),
                                _merged(parsed, host, mine, canonical)))
    return Inventory(path=parsed.path, hosts=tuple(hosts), groups={
        name: tuple(h for h in parsed.hosts if h in hs) for name, hs in members.items()})


def _visit(parsed: Parsed, name: str, level: int, trail: tuple[str, ...],
           depth: dict[str, int]) -> set[str]:
    """The group's hosts with its children's; records each group's depth below ``all`` (the
    longest path). A group that is its own child is an error."""
    if name in trail:
        raise UsageError(f"inventory {parsed.path}: group {name} is its own child "
                         f"({' > '.join((*trail, name))})")
    depth[name] = max(depth.get(name, level), level)
    found = set(parsed.groups[name]["hosts"])
    for child in parsed.groups[name]["children"]:
        found |= _visit(parsed, child, depth[name] + 1, (*trail, name), depth)
    return found


def _merged(parsed: Parsed, host: str, groups: tuple[str, ...], scope: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for group in groups:
        merged.update(scope(parsed.groups[group]["vars"]))
    return merged | scope(parsed.hosts[host])
