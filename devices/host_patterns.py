"""Ansible host patterns in inventory files: ranges (``dev[01:10]``, ``n[a:c]``, ``x[0:10:2]``,
expanded as ansible-core expands them), ``host:PORT``, IPv6 addresses bare or as
``[ipv6]:PORT``."""

from __future__ import annotations

import math
import re
import string

from edge.core.errors import UsageError

__all__ = ["expand", "expanded_count", "is_bracketed_ipv6", "split_port"]

_RANGE = re.compile(r"\[([A-Za-z0-9]{0,32}):([A-Za-z0-9]{1,32})(?::([0-9]{1,32}))?\]")
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
    malformed pattern counts 1: ``expand`` refuses it)."""
    parts = _parts(pattern)
    return math.prod(max(_length(_values(m)), 1) for m in parts[1]) if parts else 1


def expand(pattern: str, where: str) -> list[str]:
    """Every host of ``pattern``: its ``[a:b(:step)]`` ranges, all read from ``pattern`` itself
    (a host made by expanding is never expanded again), first range outermost."""
    parts = _parts(pattern)
    if parts is None:
        raise UsageError(f"{where}: a range is [START:END] or [START:END:STEP] of letters or "
                         "digits, e.g. dev[0:7]; no other [ or ] (not a range in a range)")
    literals, ranges = parts
    hosts = [literals[0]]
    for match, text in zip(ranges, literals[1:], strict=True):
        values = _values(match)
        if not _length(values):
            raise UsageError(f"{where}: range {match.group(0)} is empty or malformed (START "
                             "<= END, numbers or single letters, zero-padded alike, STEP >= 1)")
        hosts = [f"{host}{value}{text}" for host in hosts for value in _texts(values)]
    return hosts


def _parts(pattern: str) -> tuple[list[str], list[re.Match[str]]] | None:
    """The text around the ranges of ``pattern`` and the ranges; None when a [ or ] is left
    outside them (a range inside a range, a stray bracket): Ansible's bounds are alphanumeric."""
    ranges = list(_RANGE.finditer(pattern))
    cuts = [0, *(i for match in ranges for i in match.span()), len(pattern)]
    literals = [pattern[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]
    if any("[" in text or "]" in text for text in literals):
        return None
    return literals, ranges


def _values(match: re.Match[str]) -> tuple[range, int] | str:
    """A range's numbers (and their zero-padded width) or letters; empty when malformed."""
    start, end, step = match.group(1) or "0", match.group(2), int(match.group(3) or 1)
    width = len(start) if len(start) > 1 and start.startswith("0") else 0  # zero-padded
    if start.isdigit() and end.isdigit() and step and (not width or len(end) == width):
        return range(int(start), int(end) + 1, step), width
    letters = string.ascii_letters
    if start.isalpha() and end.isalpha() and len(start) == len(end) == 1 and step:
        return letters[letters.index(start):letters.index(end) + 1:step]
    return ""


def _length(values: tuple[range, int] | str) -> int:
    """How many values (computed, never by ``len(range)``: that overflows past 2**63)."""
    if isinstance(values, str):
        return len(values)
    numbers = values[0]
    return max(-(-(numbers.stop - numbers.start) // numbers.step), 0)


def _texts(values: tuple[range, int] | str) -> list[str]:
    if isinstance(values, str):
        return list(values)
    numbers, width = values
    return [str(i).zfill(width) for i in numbers]
