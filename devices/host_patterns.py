"""Ansible host patterns in inventory files: ranges (``dev[01:10]``, ``n[a:c]``, ``x[0:10:2]``,
expanded as ansible-core expands them), ``host:PORT``, IPv6 addresses bare or as
``[ipv6]:PORT``."""

from __future__ import annotations

import re
import string

from edge.core.errors import UsageError

__all__ = ["expand", "expanded_count", "is_bracketed_ipv6", "split_port"]

_RANGE = re.compile(r"\[([A-Za-z0-9]*):([A-Za-z0-9]+)(?::([0-9]+))?\]")
_V6 = re.compile(r"\[([0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::([0-9]+))?")


def is_bracketed_ipv6(text: str) -> bool:
    """Whether ``text`` starts with ``[ipv6]`` (a host, not an INI section header)."""
    return _V6.match(text) is not None


def split_port(pattern: str) -> tuple[str, int | None]:
    """``host:PORT`` and ``[ipv6]:PORT`` -> (host, PORT); a bare IPv6 address has no port."""
    v6 = _V6.fullmatch(pattern)
    name, colon, port = (v6.group(1), ":", v6.group(2) or "") if v6 else pattern.rpartition(":")
    if colon and port.isdigit() and (v6 or ":" not in _RANGE.sub("", name)):
        return name, int(port)
    return (v6.group(1) if v6 else pattern), None


def expanded_count(pattern: str) -> int:
    """How many hosts ``expand`` would make of ``pattern``, counted without making them (a
    malformed range counts 1: ``expand`` refuses it)."""
    count = 1
    for match in _RANGE.finditer(pattern):
        start, end, step = match.group(1) or "0", match.group(2), int(match.group(3) or 1)
        if start.isdigit() and end.isdigit() and step:
            count *= max(len(range(int(start), int(end) + 1, step)), 1)
        elif start.isalpha() and end.isalpha() and len(start) == len(end) == 1 and step:
            letters = string.ascii_letters
            count *= max(len(letters[letters.index(start):letters.index(end) + 1:step]), 1)
    return count


def expand(pattern: str, where: str) -> list[str]:
    """Expand the first ``[a:b(:step)]`` range of a host pattern, recursively."""
    match = _RANGE.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise UsageError(f"{where}: a range is [START:END] or [START:END:STEP], e.g. dev[0:7]")
        return [pattern]
    start, end, step = match.group(1) or "0", match.group(2), int(match.group(3) or 1)
    width = len(start) if len(start) > 1 and start.startswith("0") else 0  # zero-padded
    letters, values = string.ascii_letters, []
    if start.isdigit() and end.isdigit() and step and (not width or len(end) == width):
        values = [str(i).zfill(width) for i in range(int(start), int(end) + 1, step)]
    elif start.isalpha() and end.isalpha() and len(start) == len(end) == 1 and step:
        values = list(letters[letters.index(start):letters.index(end) + 1:step])
    if not values:
        raise UsageError(f"{where}: range {match.group(0)} is empty or malformed (START <= "
                         "END, numbers or single letters, zero-padded alike, STEP >= 1)")
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [host for value in values for host in expand(f"{head}{value}{tail}", where)]
