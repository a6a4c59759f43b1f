"""Ansible inventory files parsed as ansible-core's ``yaml`` and ``ini`` inventory plugins parse
them, into groups (own hosts, vars, children) and hosts' own vars; nothing is run or templated.
Where Ansible warns and goes on (an unknown key, a range that expands to nothing, an undeclared
INI group), this stops with a one-line UsageError. ``.yml .yaml .json`` are YAML, ``.ini .cfg``
INI; another file is YAML if it reads as a mapping, else INI. Host names: devices.host_patterns.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devices.host_patterns import expand, expanded_count, is_bracketed_ipv6, split_port
from edge.core.docfile import MAX_DEPTH, check_depth
from edge.core.errors import UsageError

__all__ = ["Parsed", "parse"]

_GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SECTION = re.compile(r"\[([^\]]*)\]\s*(?:#.*)?")
_YAML = (".yml", ".yaml", ".json")
#: Most hosts an inventory may name, ranges expanded (a fleet of more is deployed in parts).
MAX_HOSTS = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class Parsed:
    """An inventory file as written: ``groups`` {name: {"hosts": {}, "vars": {}, "children":
    {}}} (hosts and children as ordered sets; a group without a parent is a child of all) and
    ``hosts`` {name: own vars}, in file order."""

    path: Path
    groups: dict[str, dict[str, dict[str, Any]]]
    hosts: dict[str, dict[str, Any]]


class _Draft:
    """Groups and hosts while a file is read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, dict[str, dict[str, Any]]] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.named = 0  # hosts named so far, ranges expanded, repeats counted
        self.read: set[tuple[Any, int]] = set()  # (group, id of its YAML body) already read
        self.group("all", "")
        self.group("ungrouped", "")

    def group(self, name: Any, where: str) -> dict[str, dict[str, Any]]:
        if not isinstance(name, str) or not _GROUP.fullmatch(name):
            raise UsageError(f"{where}: {name!r} is not a valid group name (letters, digits, "
                             "_ . -)")
        return self.groups.setdefault(name, {"hosts": {}, "vars": {}, "children": {}})

    def add_hosts(self, group: str, pattern: Any, own: dict[str, Any], where: str) -> None:
        name, port = split_port(pattern) if isinstance(pattern, str) else ("", None)
        if not name:
            raise UsageError(f"{where}: a host name must be a non-empty string")
        self.named += expanded_count(name)
        if expanded_count(name) > MAX_HOSTS or self.named > 10 * MAX_HOSTS:
            raise UsageError(f"{where}: {name} expands to {expanded_count(name):,} hosts, "
                             f"{self.named:,} named so far; an inventory names at most "
                             f"{MAX_HOSTS:,} (split the fleet into smaller inventories)")
        for host in expand(name, where):
            self.hosts.setdefault(host, {}).update(({"ansible_port": port} if port else {}) | own)
            self.groups[group]["hosts"][host] = None
        if len(self.hosts) > MAX_HOSTS:
            raise UsageError(f"{where}: the inventory names more than {MAX_HOSTS:,} hosts "
                             "(split the fleet into smaller inventories)")


def parse(path: Path, text: str) -> Parsed:
    """The groups and hosts of inventory ``path`` whose content is ``text``."""
    parsed, data = _Draft(path), None
    if path.suffix.lower() not in (".ini", ".cfg"):
        try:
            data = yaml.safe_load(text)
        except RecursionError:
            raise UsageError(f"inventory {path}: nested deeper than {MAX_DEPTH} levels") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            if path.suffix.lower() in _YAML:
                raise UsageError(f"inventory {path}:{f' line {mark.line + 1}' if mark else ''} "
                                 "is not valid YAML") from None
    if path.suffix.lower() in _YAML or isinstance(data, dict):
        if not isinstance(data, dict):
            got = "an empty file" if data is None else type(data).__name__
            raise UsageError(f"inventory {path}: the top level must map group names to groups "
                             f"(all: hosts: ...), got {got}")
        for name, body in data.items():
            _yaml_group(parsed, name, body)
        check_depth(data, f"inventory {path}")  # deep vars, aliases expanding to billions
    else:
        _read_ini(parsed, text)
        check_depth(parsed.hosts | {"": parsed.groups}, f"inventory {path}")  # var literals
    children = {c for g in parsed.groups.values() for c in g["children"]}
    for name in [g for g in parsed.groups if g not in children and g != "all"]:
        parsed.groups["all"]["children"][name] = None  # as Ansible does
    return Parsed(path=path, groups=parsed.groups, hosts=parsed.hosts)


def _yaml_group(parsed: _Draft, name: Any, body: Any, trail: tuple[str, ...] = ()) -> None:
    where = f"inventory {parsed.path}: group {name}"
    if name in trail:  # YAML anchors can nest a group in itself
        raise UsageError(f"{where}: is its own child ({' > '.join((*trail, name))})")
    group = parsed.group(name, f"inventory {parsed.path}")
    if not isinstance(body, dict | None):
        raise UsageError(f"{where}: must be a mapping with hosts, vars or children")
    if (name, id(body)) in parsed.read:  # an alias read again: once is enough (no 2**N walk)
        return
    parsed.read.add((name, id(body)))
    for key, value in (body or {}).items():
        if key not in group:
            raise UsageError(f"{where}: unknown key '{key}' (a group has hosts, vars and "
                             "children; put host vars under hosts: HOST:)")
        value = {value: None} if isinstance(value, str) else value or {}  # as Ansible does
        if not isinstance(value, dict):
            raise UsageError(f"{where}: {key} must be a mapping, got {type(value).__name__}")
        for item, inner in value.items():
            if key == "vars":
                group["vars"][str(item)] = inner
            elif key == "children":
                _yaml_group(parsed, item, inner, (*trail, name))
                group["children"][item] = None
            elif not isinstance(inner, dict | None):
                raise UsageError(f"inventory {parsed.path}: host {item}: vars must be a mapping")
            else:
                parsed.add_hosts(name, item, {str(k): v for k, v in (inner or {}).items()},
                                 f"inventory {parsed.path}: host {item}")


def _read_ini(parsed: _Draft, text: str) -> None:
    group, kind, declared = "ungrouped", "hosts", {"all", "ungrouped"}
    used: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line, where = raw.strip(), f"inventory {parsed.path} line {number}"
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and not is_bracketed_ipv6(line.split()[0]):
            group, kind = _section(parsed, line, where)
            if kind == "vars":
                used.setdefault(group, where)
            else:
                declared.add(group)
        elif kind == "vars":
            key, eq, value = line.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"{where}: expected key=value in a :vars section, got {line!r}")
            parsed.groups[group]["vars"][key.strip()] = _value(value.strip())
        elif kind == "children":
            child = _tokens(line, where)[0]
            parsed.group(child, where)
            parsed.groups[group]["children"][child] = None
            used.setdefault(child, where)
        else:
            pattern, *pairs = _tokens(line, where)
            host = f"{where}: host {pattern}"
            parsed.add_hosts(group, pattern, dict(_pair(token, host) for token in pairs), host)
    for name in used.keys() - declared:
        raise UsageError(f"{used[name]}: group {name} is never declared ([{name}] section)")


def _section(parsed: _Draft, line: str, where: str) -> tuple[str, str]:
    match = _SECTION.fullmatch(line)
    if match is None:
        raise UsageError(f"{where}: a section header is [group], [group:vars] or "
                         f"[group:children], got {line!r}")
    name, _, kind = match.group(1).strip().partition(":")
    if kind not in ("", "vars", "children"):
        raise UsageError(f"{where}: unknown section kind ':{kind}' (use :vars or :children)")
    parsed.group(name, where)
    return name, kind or "hosts"


def _tokens(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, comments=True) or [""]
    except ValueError as exc:
        raise UsageError(f"{where}: {exc} in {line!r}") from None


def _pair(token: str, where: str) -> tuple[str, Any]:
    key, eq, value = token.partition("=")
    if not eq or not key:
        raise UsageError(f"{where}: expected key=value after the host name, got {token!r}")
    return key, _value(value)


def _value(text: str) -> Any:
    """An INI value as Ansible reads it: a Python literal if it is one, else the text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    return list(value) if isinstance(value, tuple | set) else value
