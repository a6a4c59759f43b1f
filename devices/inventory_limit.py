"""``--limit``: Ansible's host pattern basics over an inventory's group and host names.

A group or host name, ``all`` / ``*``, globs (``web*``, over groups and hosts), ``~regex``
(matched from the start, as Ansible does), comma (or colon) separated unions, ``&group``
intersections and ``!group`` exclusions, applied in that order. Unlike Ansible, a term that
matches nothing is an error, not a warning: a typo must not make a silently smaller deploy.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence

from devices.inventory_vars import is_ipv6
from edge.core.errors import UsageError

__all__ = ["select"]

# A ':'-separated term: anything but whitespace and ':[]', or a whole [...] expression.
_COLON_TERM = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")


def select(hosts: Sequence[str], groups: Mapping[str, Sequence[str]], limit: str,
           where: str) -> set[str]:
    """The names of ``hosts`` that ``limit`` selects; ``groups`` maps each group to its hosts
    (children included). UsageError naming ``where`` (the inventory) when nothing matches."""
    terms = [t.strip() for t in _split(limit) if t.strip()]
    if not terms:
        raise UsageError(f"--limit {limit!r}: give a group or host name")
    unions = [t for t in terms if t[0] not in "!&"]
    selected = set() if unions else set(hosts)
    for term in unions:
        selected |= _match(hosts, groups, term, limit, where)
    for term in (t[1:] for t in terms if t[0] == "&"):
        selected &= _match(hosts, groups, term, limit, where)
    for term in (t[1:] for t in terms if t[0] == "!"):
        selected -= _match(hosts, groups, term, limit, where)
    if not selected:
        raise UsageError(f"--limit {limit!r} selects no host of {where}")
    return selected


def _split(limit: str) -> list[str]:
    if "," in limit:
        return limit.split(",")
    if ":" in limit and not is_ipv6(limit.strip().lstrip("!&")):
        return _COLON_TERM.findall(limit)
    return [limit]


def _match(hosts: Sequence[str], groups: Mapping[str, Sequence[str]], term: str, limit: str,
           where: str) -> set[str]:
    if term in ("all", "*"):
        return set(hosts)
    if term in groups:
        return set(groups[term])
    if term in hosts:
        return {term}
    found: set[str] = set()
    if term.startswith("~") or any(c in term for c in "*?["):
        matches = _pattern(term, limit)
        found = {h for g, hs in groups.items() if matches(g) for h in hs}
        found |= {h for h in hosts if matches(h)}
    if not found:
        raise UsageError(f"--limit {limit!r}: '{term}' matches no group or host of {where}")
    return found


def _pattern(term: str, limit: str) -> Callable[[str], re.Match[str] | None]:
    try:
        regex = re.compile(term[1:] if term.startswith("~") else fnmatch.translate(term))
    except re.error as exc:
        raise UsageError(f"--limit {limit!r}: bad regex {term[1:]!r}: {exc}") from None
    return regex.match
