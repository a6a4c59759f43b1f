"""``edge deploy --inventory``: one model or bundle to a fleet of devices named in an Ansible
inventory, deployed in parallel with bounded concurrency; one host failing never stops the others.

Inventory formats (Ansible-compatible basics):

* YAML: ``all:`` (or any top-level group) with ``hosts:``, ``vars:`` and ``children:`` nested
  to any depth; a host's value is a mapping of its vars (or empty).
* INI: ``host key=value ...`` lines under ``[group]``; ``[group:vars]`` with ``key=value``
  lines; ``[group:children]`` with group names; hosts before any section are ungrouped;
  ``host:PORT`` sets ``ansible_port``. ``#`` and ``;`` start comments.
* Host names may use Ansible ranges: ``dev[0:7]``, ``dev[01:10]``, ``node[a:c]``,
  ``x[0:10:2]``.

Vars edge reads (other vars are ignored): ``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file``, ``ansible_python_interpreter``, ``edge_profile`` (or
``profile``), ``edge_work_dir``; ``ansible_connection`` must be ssh if set. Precedence, lowest
first: the profile's ``access`` keys, the command-line device flags (--identity,
--device-python), ``all`` vars, parent group vars, child group vars (same depth: by name),
host vars -- as in Ansible, inventory connection vars beat command-line defaults.

``--limit`` patterns: a group or host name, ``all`` / ``*``, globs (``web*``), ``~regex``,
comma (or colon) separated unions, ``&group`` intersections and ``!group`` exclusions.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import logging
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.connect import DeviceTarget
from edge.core import progress as bars
from edge.core.errors import EdgeError, ExitStatus, UsageError, first_line
from edge.core.values import Bundle, DeployReport
from edge.flows.deploy import DeployRequest
from edge.flows.optimize import OptimizeOptions

__all__ = ["FleetBundle", "FleetHost", "FleetReport", "FleetRequest", "HostResult",
           "Inventory", "describe_fleet", "load_inventory", "render_fleet", "run_fleet"]

log = logging.getLogger("edge")

_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9._-]{0,252})$")
_GROUP = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_RANGE = re.compile(r"\[([A-Za-z0-9]+):([A-Za-z0-9]+)(?::([0-9]+))?\]")
_YAML_SUFFIXES = (".yml", ".yaml", ".json")
_SSH_CONNECTIONS = ("ssh", "paramiko", "smart")
_AUTO_PYTHON = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_ALIASES = {"profile": "edge_profile", "ansible_ssh_host": "ansible_host",
            "ansible_ssh_port": "ansible_port", "ansible_ssh_user": "ansible_user",
            "ansible_private_key_file": "ansible_ssh_private_key_file"}


# ============================================================================ inventory


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetHost:
    """One inventory host with the vars edge uses, validated (None: not set)."""

    name: str
    address: str  # ansible_host, else the inventory name
    port: int | None = None
    user: str | None = None
    identity: Path | None = None
    python: str | None = None
    profile: str | None = None
    work_dir: str | None = None
    groups: tuple[str, ...] = ()  # every group it is in, directly or through children
    vars: dict[str, Any] = field(default_factory=dict)  # all merged vars, as written


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
        wanted = _select(self, limit)
        return tuple(h for h in self.hosts if h.name in wanted)


class _Group:
    """A group while parsing: its own hosts, vars and child groups."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.vars: dict[str, Any] = {}
        self.children: list[str] = []


class _Parsed:
    """What a parser collects before vars are merged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, _Group] = {"all": _Group(), "ungrouped": _Group()}
        self.host_vars: dict[str, dict[str, Any]] = {}

    def group(self, name: str, where: str) -> _Group:
        if not isinstance(name, str) or not _GROUP.match(name):
            raise UsageError(f"{where}: {name!r} is not a valid group name "
                             "(letters, digits, _ . -)")
        return self.groups.setdefault(name, _Group())

    def add_host(self, group: str, name: str, host_vars: dict[str, Any]) -> None:
        self.host_vars.setdefault(name, {}).update(host_vars)
        members = self.groups[group].hosts
        if name not in members:
            members.append(name)

    def add_child(self, parent: str, child: str) -> None:
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)


def load_inventory(path: Path) -> Inventory:
    """Read and validate an inventory file (YAML or INI); errors name the file and the host."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"inventory {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"inventory {path}: cannot read it: {exc}") from None
    parsed = _Parsed(path)
    if _looks_like_yaml(path, text):
        _parse_yaml(parsed, text)
    else:
        _parse_ini(parsed, text)
    return _build(parsed)


def _looks_like_yaml(path: Path, text: str) -> bool:
    """YAML for .yml/.yaml/.json; INI for .ini/.cfg; otherwise YAML only if it parses to a map."""
    suffix = path.suffix.lower()
    if suffix in _YAML_SUFFIXES:
        return True
    if suffix in (".ini", ".cfg"):
        return False
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and all(isinstance(v, dict | None) for v in data.values())


# ---------------------------------------------------------------------------- YAML


def _parse_yaml(parsed: _Parsed, text: str) -> None:
    import yaml

    path = parsed.path
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"inventory {path}:{line} is not valid YAML") from None
    if data is None:
        raise UsageError(f"inventory {path} is empty: give groups with hosts (all: hosts: ...)")
    if not isinstance(data, dict):
        raise UsageError(f"inventory {path}: the top level must map group names to groups "
                         f"(all: hosts: ...), got {type(data).__name__}")
    for name, body in data.items():
        _yaml_group(parsed, str(name), body, parent=None if name == "all" else "all")


def _yaml_group(parsed: _Parsed, name: str, body: Any, parent: str | None,
                trail: tuple[str, ...] = ()) -> None:
    where = f"inventory {parsed.path}: group {name}"
    if name in trail:
        raise UsageError(f"{where}: is its own child ({' > '.join((*trail, name))})")
    parsed.group(name, f"inventory {parsed.path}")
    if parent is not None:
        parsed.add_child(parent, name)
    if body is None:
        return
    if not isinstance(body, dict):
        raise UsageError(f"{where}: must be a mapping with hosts, vars or children, "
                         f"got {type(body).__name__}")
    unknown = sorted(set(map(str, body)) - {"hosts", "vars", "children"})
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (a group has hosts, vars and "
                         "children; put host vars under hosts: HOST:)")
    hosts = body.get("hosts") or {}
    if not isinstance(hosts, dict):
        raise UsageError(f"{where}: hosts must map host names to their vars (or nothing), "
                         f"got {type(hosts).__name__}")
    for pattern, host_vars in hosts.items():
        host_vars = _vars_mapping(host_vars, f"inventory {parsed.path}: host {pattern}")
        for host in _expand(str(pattern), f"inventory {parsed.path}: host {pattern}"):
            parsed.add_host(name, host, host_vars)
    parsed.groups[name].vars.update(_vars_mapping(body.get("vars"), f"{where}: vars"))
    children = body.get("children") or {}
    if not isinstance(children, dict):
        raise UsageError(f"{where}: children must map group names to groups, "
                         f"got {type(children).__name__}")
    for child, child_body in children.items():
        _yaml_group(parsed, str(child), child_body, name, (*trail, name))


def _vars_mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: vars must be a mapping of names to values, "
                         f"got {type(value).__name__}")
    return {str(k): v for k, v in value.items()}


# ---------------------------------------------------------------------------- INI


def _parse_ini(parsed: _Parsed, text: str) -> None:
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"inventory {parsed.path} line {number}"
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section, kind = _ini_section(parsed, line, where)
            continue
        if kind == "vars":
            key, value = _ini_assignment(line, where)
            parsed.groups[section].vars[key] = value
        elif kind == "children":
            child = _ini_tokens(line, where)[0]
            parsed.group(child, where)
            parsed.add_child(section, child)
        else:
            _ini_host(parsed, section, line, where)


def _ini_section(parsed: _Parsed, line: str, where: str) -> tuple[str, str]:
    if not line.endswith("]"):
        raise UsageError(f"{where}: a section header is [group], [group:vars] or "
                         f"[group:children], got {line!r}")
    name, _, kind = line[1:-1].strip().partition(":")
    kind = kind or "hosts"
    if kind not in ("hosts", "vars", "children"):
        raise UsageError(f"{where}: unknown section kind ':{kind}' (use :vars or :children)")
    parsed.group(name, where)
    if name not in ("all", "ungrouped"):
        parsed.add_child("all", name)
    return name, kind


def _ini_tokens(line: str, where: str) -> list[str]:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc} in {line!r}") from None
    if not tokens:
        raise UsageError(f"{where}: nothing but a comment where a name was expected")
    return tokens


def _ini_assignment(line: str, where: str) -> tuple[str, Any]:
    key, eq, value = line.partition("=")
    if not eq or not key.strip():
        raise UsageError(f"{where}: expected key=value in a :vars section, got {line!r}")
    value = value.strip()
    if value and value[0] not in "'\"":
        value = value.split(" #", 1)[0].split(" ;", 1)[0].strip()
    tokens = shlex.split(value, comments=False) if value else [""]
    return key.strip(), _ini_value(" ".join(tokens))


def _ini_host(parsed: _Parsed, group: str, line: str, where: str) -> None:
    pattern, *assignments = _ini_tokens(line, where)
    host_vars: dict[str, Any] = {}
    for token in assignments:
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise UsageError(f"{where}: host {pattern}: expected key=value after the host "
                             f"name, got {token!r}")
        host_vars[key] = _ini_value(value)
    name, colon, port = pattern.rpartition(":")
    if colon and port.isdigit() and name and ":" not in name:  # host:PORT (not IPv6)
        pattern = name
        host_vars.setdefault("ansible_port", int(port))
    for host in _expand(pattern, f"{where}: host {pattern}"):
        parsed.add_host(group, host, host_vars)


def _ini_value(text: str) -> Any:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else text


# ---------------------------------------------------------------------------- ranges


def _expand(pattern: str, where: str) -> list[str]:
    """Expand the first ``[a:b(:step)]`` range of a host pattern, recursively."""
    match = _RANGE.search(pattern)
    if match is None:
        if "[" in pattern or "]" in pattern:
            raise UsageError(f"{where}: a range is [START:END] or [START:END:STEP], e.g. "
                             "dev[0:7]")
        return [pattern]
    start, end, step = match.group(1), match.group(2), int(match.group(3) or 1)
    head, tail = pattern[:match.start()], pattern[match.end():]
    if start.isdigit() and end.isdigit():
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        values = [str(i).zfill(width) for i in range(int(start), int(end) + 1, max(step, 1))]
    elif len(start) == 1 and len(end) == 1 and start.isalpha() and end.isalpha():
        values = [chr(c) for c in range(ord(start), ord(end) + 1, max(step, 1))]
    else:
        raise UsageError(f"{where}: range [{start}:{end}] must be numbers or single letters")
    if not values:
        raise UsageError(f"{where}: range [{start}:{end}] is empty (START must be <= END)")
    return [host for value in values for host in _expand(f"{head}{value}{tail}", where)]


# ---------------------------------------------------------------------------- merging


def _build(parsed: _Parsed) -> Inventory:
    path = parsed.path
    for name, group in parsed.groups.items():
        for child in group.children:
            if child not in parsed.groups:  # pragma: no cover - every child is registered
                raise UsageError(f"inventory {path}: group {name}: unknown child {child}")
    depth = _depths(parsed)
    order = _host_order(parsed)
    if not order:
        raise UsageError(f"inventory {path} has no hosts")
    members = {name: _members(parsed, name) for name in parsed.groups}
    grouped = {h for name, hs in members.items() if name not in ("all", "ungrouped") for h in hs}
    parsed.groups["ungrouped"].hosts = [h for h in order if h not in grouped]
    members["ungrouped"] = tuple(parsed.groups["ungrouped"].hosts)
    members["all"] = tuple(order)
    hosts = []
    for host in order:
        groups = sorted((g for g, hs in members.items() if host in hs),
                        key=lambda g: (depth.get(g, 1), g))
        merged: dict[str, Any] = {}
        for group in groups:
            merged.update(_canonical(parsed.groups[group].vars))
        merged.update(_canonical(parsed.host_vars.get(host, {})))
        hosts.append(_host(path, host, tuple(groups), merged))
    return Inventory(path=path, hosts=tuple(hosts), groups=members)


def _canonical(values: dict[str, Any]) -> dict[str, Any]:
    """Aliases renamed to the names edge reads (the canonical name wins within one scope), so
    that a more specific scope's alias beats a broader scope's canonical var."""
    out = dict(values)
    for alias, name in _ALIASES.items():
        if alias in out:
            value = out.pop(alias)
            out.setdefault(name, value)
    return out


def _depths(parsed: _Parsed) -> dict[str, int]:
    """Each group's depth below ``all`` (the longest path); cycles are an error."""
    depth: dict[str, int] = {}

    def visit(name: str, level: int, trail: tuple[str, ...]) -> None:
        if name in trail:
            raise UsageError(f"inventory {parsed.path}: group {name} is its own child "
                             f"({' > '.join((*trail, name))})")
        if depth.get(name, -1) >= level:
            return
        depth[name] = level
        for child in parsed.groups[name].children:
            visit(child, level + 1, (*trail, name))

    visit("all", 0, ())
    for name in parsed.groups:
        if name not in depth:
            visit(name, 1, ())
    return depth


def _host_order(parsed: _Parsed) -> list[str]:
    seen: dict[str, None] = {}
    for group in parsed.groups.values():
        for host in group.hosts:
            seen.setdefault(host, None)
    # file order: host_vars is filled in the order hosts are met
    return [h for h in parsed.host_vars if h in seen]


def _members(parsed: _Parsed, name: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    stack, visited = [name], set()
    while stack:
        group = stack.pop()
        if group in visited:
            continue
        visited.add(group)
        found.update(dict.fromkeys(parsed.groups[group].hosts))
        stack.extend(parsed.groups[group].children)
    order = list(parsed.host_vars)
    return tuple(sorted(found, key=order.index))


def _host(path: Path, name: str, groups: tuple[str, ...], v: dict[str, Any]) -> FleetHost:
    where = f"inventory {path}: host {name}"
    connection = v.get("ansible_connection")
    if connection is not None and connection not in _SSH_CONNECTIONS:
        raise UsageError(f"{where}: ansible_connection {connection!r} is not supported "
                         "(edge deploys over ssh)")
    address = _text(v.get("ansible_host", name), where, "ansible_host")
    if not (_ADDRESS.match(address) or _is_ipv6(address)):
        raise UsageError(f"{where}: {address!r} is not a valid host name or address "
                         "(set ansible_host)")
    port = v.get("ansible_port")
    if port is not None:
        port = int(port) if isinstance(port, str) and port.isdigit() else port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise UsageError(f"{where}: ansible_port {port!r} is not a port number (1-65535)")
    user = v.get("ansible_user")
    if user is not None:
        user = _text(user, where, "ansible_user")
        if not _USER.match(user):
            raise UsageError(f"{where}: ansible_user {user!r} is not a plain user name")
    key = v.get("ansible_ssh_private_key_file")
    identity = (Path(_text(key, where, "ansible_ssh_private_key_file")).expanduser()
                if key is not None else None)
    python = v.get("ansible_python_interpreter")
    python = _text(python, where, "ansible_python_interpreter") if python is not None else None
    profile = v.get("edge_profile")
    profile = _text(profile, where, "edge_profile") if profile is not None else None
    work_dir = v.get("edge_work_dir")
    work_dir = _text(work_dir, where, "edge_work_dir") if work_dir is not None else None
    return FleetHost(name=name, address=address, port=port, user=user, identity=identity,
                     python=None if python in _AUTO_PYTHON else python, profile=profile,
                     work_dir=work_dir, groups=groups, vars=v)


def _text(value: Any, where: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or str(value) == "":
        raise UsageError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return str(value)


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


# ---------------------------------------------------------------------------- --limit


def _select(inventory: Inventory, limit: str) -> set[str]:
    """Ansible's pattern basics: unions first, then ``&`` intersections, then ``!`` exclusions."""
    terms = [t.strip() for t in _split_limit(limit) if t.strip()]
    if not terms:
        raise UsageError(f"--limit {limit!r}: give a group or host name")
    unions = [t for t in terms if t[0] not in "!&"]
    selected = set() if unions else {h.name for h in inventory.hosts}
    for term in unions:
        selected |= _match(inventory, term, limit)
    for term in (t[1:] for t in terms if t[0] == "&"):
        selected &= _match(inventory, term, limit)
    for term in (t[1:] for t in terms if t[0] == "!"):
        selected -= _match(inventory, term, limit)
    if not selected:
        raise UsageError(f"--limit {limit!r} selects no host of {inventory.path}")
    return selected


def _split_limit(limit: str) -> list[str]:
    if "," in limit:
        return limit.split(",")
    if ":" in limit and not _is_ipv6(limit.strip().lstrip("!&")):
        return limit.split(":")
    return [limit]


def _match(inventory: Inventory, term: str, limit: str) -> set[str]:
    groups, hosts = inventory.groups, [h.name for h in inventory.hosts]
    if term in ("all", "*"):
        return set(hosts)
    if term in groups:
        return set(groups[term])
    if term in hosts:
        return {term}
    if term.startswith("~"):
        try:
            regex = re.compile(term[1:])
        except re.error as exc:
            raise UsageError(f"--limit {limit!r}: bad regex {term[1:]!r}: {exc}") from None
        found = {h for g, hs in groups.items() if regex.search(g) for h in hs}
        found |= {h for h in hosts if regex.search(h)}
    elif any(c in term for c in "*?["):
        found = {h for g, hs in groups.items() if fnmatch.fnmatchcase(g, term) for h in hs}
        found |= set(fnmatch.filter(hosts, term))
    else:
        found = set()
    if not found:
        raise UsageError(f"--limit {limit!r}: '{term}' matches no group or host of "
                         f"{inventory.path}")
    return found


# ============================================================================ fleet deploy


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetRequest:
    """What ``edge deploy --inventory`` was asked.

    ``device`` holds the defaults every host starts from (identity, known_hosts,
    trust_new_host, python, runs, warmup, threads); its ``host`` must be None. ``profile`` is the
    profile of hosts whose inventory vars name none (for a bundle: the bundle's). Bundles built
    from a MODEL go to ``out_dir/<model stem>-<profile>.bundle`` (default: the current dir).
    Progress lines go to the ``edge`` logger (the CLI shows them on a TTY, never under --json).
    """

    source: Path
    inventory: Path
    limit: str | None = None
    forks: int = 5
    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    options: OptimizeOptions = OptimizeOptions()
    out_dir: Path | None = None
    measure_on_device: bool = False
    keep: int = 3  # releases kept on each host (devices.deploy.DEFAULT_KEEP)


@dataclass(frozen=True, kw_only=True, slots=True)
class HostResult:
    """One host's outcome."""

    host: str
    target: str  # ssh://user@address:port
    profile: str
    status: str  # ok | failed
    candidate: str | None = None
    release: str | None = None
    p50_ms: float | None = None
    error: str | None = None  # one line, when failed
    seconds: float = 0.0
    report: DeployReport | None = None

    @property
    def ok(self) -> bool:
        """Whether the host runs the release now."""
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"host": self.host, "target": self.target, "profile": self.profile,
                "status": self.status, "candidate": self.candidate, "release": self.release,
                "p50_ms": self.p50_ms, "error": self.error, "seconds": round(self.seconds, 3),
                "report": self.report.to_json() if self.report else None}


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetBundle:
    """The bundle deployed to one profile's hosts (or why there is none)."""

    profile: str
    hosts: int
    bundle: str | None = None
    chosen: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"profile": self.profile, "hosts": self.hosts, "bundle": self.bundle,
                "chosen": self.chosen, "error": self.error}


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetReport:
    """What a fleet deploy did, host by host (in inventory order)."""

    inventory: str
    limit: str | None
    forks: int
    bundles: tuple[FleetBundle, ...]
    hosts: tuple[HostResult, ...]
    seconds: float  # the whole run, bundles included
    deploy_seconds: float = 0.0  # wall time of the parallel deploy phase alone

    @property
    def ok(self) -> tuple[HostResult, ...]:
        """Hosts that run the release now."""
        return tuple(h for h in self.hosts if h.ok)

    @property
    def failed(self) -> tuple[HostResult, ...]:
        """Hosts that failed."""
        return tuple(h for h in self.hosts if not h.ok)

    @property
    def exit_status(self) -> int:
        """0 when every host is ok, 3 (ExitStatus.DEVICE) when any failed."""
        return int(ExitStatus.DEVICE) if self.failed else int(ExitStatus.OK)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"inventory": self.inventory, "limit": self.limit, "forks": self.forks,
                "ok": len(self.ok), "failed": len(self.failed),
                "seconds": round(self.seconds, 3),
                "deploy_seconds": round(self.deploy_seconds, 3),
                "bundles": [b.to_json() for b in self.bundles],
                "hosts": [h.to_json() for h in self.hosts]}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Job:
    """One host, resolved: where and how to deploy."""

    host: FleetHost
    profile: Any  # edge.core.profile.Profile
    user: str
    port: int
    identity: Path | None
    python: str
    work_dir: str
    threads: int

    @property
    def target(self) -> str:
        address = f"[{self.host.address}]" if ":" in self.host.address else self.host.address
        return f"ssh://{self.user}@{address}:{self.port}"


def run_fleet(request: FleetRequest) -> FleetReport:
    """Build one bundle per distinct profile (in turn), then deploy to at most ``forks`` hosts
    at once, each over its own SSH connection. A host's failure is recorded, never raised;
    bad input (inventory, --limit, profiles, the source) raises UsageError before any work."""
    started = time.monotonic()
    inventory, jobs = _plan(request)
    bundles: dict[str, tuple[Bundle, Path] | str] = {}
    built = []
    for profile_id, profile_jobs in _by_profile(jobs).items():
        outcome = _build_bundle(request, profile_jobs[0].profile, len(profile_jobs))
        bundles[profile_id] = outcome
        built.append(FleetBundle(profile=profile_id, hosts=len(profile_jobs),
                                 **(_bundle_fields(outcome))))
    deploying = time.monotonic()
    results = _deploy_all(request, jobs, bundles)
    done = time.monotonic()
    return FleetReport(inventory=str(inventory.path), limit=request.limit, forks=request.forks,
                       bundles=tuple(built), hosts=results, seconds=done - started,
                       deploy_seconds=done - deploying)


def describe_fleet(request: FleetRequest) -> dict[str, Any]:
    """What run_fleet would do (hosts, targets, profiles), touching nothing."""
    inventory, jobs = _plan(request)
    hosts = [{"host": j.host.name, "target": j.target, "profile": j.profile.id,
              "python": j.python, "work_dir": j.work_dir} for j in jobs]
    steps = []
    for profile_id, profile_jobs in _by_profile(jobs).items():
        if _is_bundle(request.source):
            steps.append(f"use bundle {request.source} for {len(profile_jobs)} {profile_id} "
                         "host(s)")
        else:
            steps.append(f"optimize {request.source} for {profile_id} into "
                         f"{_bundle_out(request, profile_id)}")
    if request.device.provision:
        steps.append("install each bundle's runtime into WORK/venv on every host from wheels "
                     "fetched on this host (pip --no-index on the device)")
    what = ("benchmark every faithful candidate on the device, switch to the fastest"
            if request.measure_on_device else "benchmark on the device, switch its current "
            "release")
    steps += [f"deploy to {len(jobs)} host(s), at most {request.forks} at once: push, {what}; "
              f"keep {request.keep} releases per host", "print a per-host table"]
    return {"inventory": str(inventory.path), "limit": request.limit, "forks": request.forks,
            "hosts": hosts, "steps": steps}


def _plan(request: FleetRequest) -> tuple[Inventory, list[_Job]]:
    if request.device.host is not None:
        raise UsageError("--host and --inventory exclude each other: the inventory names the "
                         "hosts (use --limit to pick some)")
    if request.forks < 1:
        raise UsageError(f"--forks must be >= 1, got {request.forks}")
    known = request.device.known_hosts
    if known is not None and not known.expanduser().is_file() and not request.device.trust_new_host:
        raise UsageError(f"--known-hosts {known}: no such file (pass --trust-new-host to create "
                         "it with the devices' keys)")
    _check_source(request.source)
    inventory = load_inventory(request.inventory)
    hosts = inventory.select(request.limit)
    profiles: dict[str, Any] = {}
    jobs = [_job(request, inventory, host, profiles) for host in hosts]
    return inventory, jobs


def _check_source(source: Path) -> None:
    if not source.exists():
        raise UsageError(f"{source} does not exist: give an .onnx model or a bundle dir")
    if _is_bundle(source):
        return
    from edge.core.intake import source_kind
    from edge.core.model import load_onnx

    if source_kind(source) == "onnx":  # a corrupt model fails before any work
        load_onnx(source)


def _is_bundle(path: Path) -> bool:
    from edge.core.bundle import is_bundle

    return is_bundle(path)


def _job(request: FleetRequest, inventory: Inventory, host: FleetHost,
         profiles: dict[str, Any]) -> _Job:
    where = f"inventory {inventory.path}: host {host.name}"
    profile = _host_profile(request, inventory, host, profiles, where)
    access = profile.access
    user = host.user or access.user
    if user is None:
        raise UsageError(f"{where}: no ansible_user, and profile {profile.id} has no "
                         "access.user")
    identity = host.identity or request.device.identity
    if identity is not None and not identity.expanduser().is_file():
        raise UsageError(f"{where}: private key {identity}: no such file")
    threads = request.device.threads
    return _Job(host=host, profile=profile, user=user, port=host.port or access.port,
                identity=identity, python=host.python or request.device.python or access.python,
                work_dir=host.work_dir or access.work_dir,
                threads=profile.compute.default_threads if threads is None else threads)


def _host_profile(request: FleetRequest, inventory: Inventory, host: FleetHost,
                  profiles: dict[str, Any], where: str) -> Any:
    ref = host.profile
    if ref is not None:
        beside = inventory.path.parent / ref
        if Path(ref).suffix in (".yaml", ".yml", ".json") and beside.is_file():
            ref = str(beside)  # a profile file named relative to the inventory
    else:
        ref = request.profile
    if ref is None and not _is_bundle(request.source):
        raise UsageError(f"{where}: no edge_profile var and no --profile: deploying a model "
                         "needs a profile for every host")
    key = ref or "<bundle>"
    if key not in profiles:
        try:
            profiles[key] = _load_profile(request.source, ref)
        except UsageError as exc:
            raise UsageError(f"{where}: {first_line(exc)}") from None
    profile = profiles[key]
    same_id = [p for p in profiles.values() if p.id == profile.id]
    if any(p != profile for p in same_id):
        raise UsageError(f"{where}: two different profiles have the id {profile.id!r}; give "
                         "each profile file its own id")
    return profile


def _load_profile(source: Path, ref: str | None) -> Any:
    from edge.flows.deploy import resolve_profile as _profile

    return _profile(DeployRequest(source=source, profile=ref))


def _by_profile(jobs: Iterable[_Job]) -> dict[str, list[_Job]]:
    grouped: dict[str, list[_Job]] = {}
    for job in jobs:
        grouped.setdefault(job.profile.id, []).append(job)
    return grouped


def _bundle_out(request: FleetRequest, profile_id: str) -> Path:
    return (request.out_dir or Path(".")) / f"{request.source.stem}-{profile_id}.bundle"


def _build_bundle(request: FleetRequest, profile: Any, hosts: int) -> tuple[Bundle, Path] | str:
    """(bundle, dir) for this profile's hosts, or the one-line reason there is none."""
    from edge.flows.deploy import build_bundle as _bundle

    if not _is_bundle(request.source):
        log.info("optimizing %s for %s (%d host%s)", request.source, profile.id, hosts,
                 "" if hosts == 1 else "s")
    deploy = DeployRequest(source=request.source, profile=profile.id, options=request.options,
                           out=_bundle_out(request, profile.id))
    try:
        return _bundle(deploy, profile)
    except EdgeError as exc:
        return f"no bundle for {profile.id}: {first_line(exc)}"


def _bundle_fields(outcome: tuple[Bundle, Path] | str) -> dict[str, Any]:
    if isinstance(outcome, str):
        return {"error": outcome}
    bundle, where = outcome
    return {"bundle": str(where), "chosen": bundle.chosen}


class _Progress:
    """Per-host progress lines through the ``edge`` logger, with running counts; while bars
    are shown, a hosts bar with the counts and a live status line per host being deployed."""

    def __init__(self, total: int, bar: bars.Step | None = None) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.lock = threading.Lock()
        self.bar = bar or bars.Step()
        self.lines: dict[str, bars.Step] = {}

    @contextlib.contextmanager
    def host(self, job: _Job) -> Iterator[None]:
        """A status line for this host while it deploys."""
        with bars.step(f"{job.host.name}: starting") as line:
            with self.lock:
                self.lines[job.host.name] = line
            try:
                yield
            finally:
                with self.lock:
                    self.lines.pop(job.host.name, None)

    def say(self, job: _Job, text: str) -> None:
        log.info("%s: %s", job.host.name, text)
        with self.lock:
            line = self.lines.get(job.host.name)
        if line is not None:
            line.update(f"{job.host.name}: {text}")

    def finished(self, result: HostResult) -> None:
        with self.lock:
            self.done += 1
            self.failed += not result.ok
            counts = f"[{self.done}/{self.total} done, {self.failed} failed]"
            self.bar.update(f"hosts {self.done}/{self.total} done, {self.failed} failed",
                            completed=self.done)
        if result.ok:
            log.info("%s: ok in %.1f s: %s, p50 %.3f ms %s", result.host, result.seconds,
                     result.candidate, result.p50_ms or 0.0, counts)
        else:
            log.info("%s: FAILED in %.1f s: %s %s", result.host, result.seconds, result.error,
                     counts)


# Recording a new host key rewrites the shared known_hosts file: one connect at a time then.
_KNOWN_HOSTS_LOCK = threading.Lock()


def _deploy_all(request: FleetRequest, jobs: list[_Job],
                bundles: dict[str, tuple[Bundle, Path] | str]) -> tuple[HostResult, ...]:
    if not jobs:
        return ()
    results: dict[str, HostResult] = {}
    workers = min(request.forks, len(jobs))
    log.info("deploying to %d host%s, %d at a time", len(jobs), "" if len(jobs) == 1 else "s",
             workers)
    with bars.step(f"hosts 0/{len(jobs)} done", total=len(jobs)) as bar:
        progress = _Progress(len(jobs), bar)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edge-fleet")
        try:
            futures = {pool.submit(_deploy_one, request, job, bundles[job.profile.id],
                                   progress): job for job in jobs}
            for future in as_completed(futures):
                result = future.result()  # _deploy_one never raises an Exception
                results[result.host] = result
                progress.finished(result)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return tuple(results[job.host.name] for job in jobs)


def _deploy_one(request: FleetRequest, job: _Job, bundle: tuple[Bundle, Path] | str,
                progress: _Progress) -> HostResult:
    started = time.monotonic()

    def failed(error: str) -> HostResult:
        return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                          status="failed", error=" ".join(error.split()),
                          seconds=time.monotonic() - started)

    if isinstance(bundle, str):
        return failed(bundle)
    try:
        with progress.host(job):
            report = _deploy_to(request, job, bundle, lambda text: progress.say(job, text))
    except EdgeError as exc:
        return failed(first_line(exc))
    except Exception as exc:  # noqa: BLE001 - one host's bug must not stop the others
        return failed(f"internal error: {type(exc).__name__}: {first_line(exc)}")
    return HostResult(host=job.host.name, target=job.target, profile=job.profile.id,
                      status="ok", candidate=report.candidate, release=report.release,
                      p50_ms=report.bench.p50_ms, seconds=time.monotonic() - started,
                      report=report)


def _deploy_to(request: FleetRequest, job: _Job, bundle: tuple[Bundle, Path],
               say: Callable[[str], None]) -> DeployReport:
    from devices.deploy import BenchOptions, deploy
    from devices.ssh import HostSpec, SSHTransport

    device = request.device
    spec = HostSpec(user=job.user, host=job.host.address, port=job.port)
    say(f"connecting to {job.target}")
    with SSHTransport(spec, identity=job.identity, known_hosts=device.known_hosts,
                      trust_new_host=device.trust_new_host) as transport:
        if device.trust_new_host:
            with _KNOWN_HOSTS_LOCK:
                transport.home()
        else:
            transport.home()  # connect and authenticate before any work
        manifest, bundle_dir = bundle
        python = job.python
        if device.provision:
            say("provisioning the runtime from wheels fetched on this host")
            python = _provision(transport, job, manifest)
        say("pushing the artifact and benchmarking it on the device")
        return deploy(bundle_dir, manifest, transport, python=python, work_dir=job.work_dir,
                      bench=BenchOptions(runs=device.runs, warmup=device.warmup,
                                         threads=job.threads),
                      keep=request.keep, fastest=request.measure_on_device).report


def _provision(transport: Any, job: _Job, manifest: Bundle) -> str:
    """--provision on one host: the bundle's runtime into WORK/venv; its python from then on."""
    from devices.provision import provision_runtime, runtime_for_bundle

    return provision_runtime(transport, device_python=job.python, work_dir=job.work_dir,
                             runtime=runtime_for_bundle(manifest)).python


# ============================================================================ rendering


def render_fleet(report: FleetReport) -> str:
    """The per-host table of a fleet deploy, with the bundles used and a summary line."""
    from edge.core.tables import table

    rows = [(h.host, h.status, h.target, h.profile, h.candidate, h.release,
             f"{h.p50_ms:.3f}" if h.p50_ms is not None else "", f"{h.seconds:.1f}",
             h.error or "") for h in report.hosts]
    headers = ("host", "status", "target", "profile", "candidate", "release", "p50 ms",
               "seconds", "error")
    bundles = [f"bundle for {b.profile}: {b.bundle} (chosen {b.chosen})" if b.bundle
               else f"bundle for {b.profile}: none - {b.error}" for b in report.bundles]
    limit = f" --limit {report.limit}" if report.limit else ""
    summary = (f"{len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} from "
               f"{report.inventory}{limit}: {len(report.ok)} ok, {len(report.failed)} failed "
               f"in {report.seconds:.1f} s, {report.deploy_seconds:.1f} s deploying "
               f"(forks {report.forks})")
    return "\n".join([*bundles, "", table(headers, rows), "", summary])
