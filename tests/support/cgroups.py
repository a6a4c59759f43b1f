"""CPU and memory caps for the test harnesses (emulated links, emulated fleets): cgroup v1 or v2.

A :class:`Hierarchy` says which cgroup version this machine runs and where this process's own
groups are; :func:`create` makes a group below them with a CPU quota (and optionally a memory
limit and CPU accounting); a :class:`Group` reads its limits back, counts the CPU its members
used, prefixes a command so it runs inside the group, and :func:`remove` kills the members and
removes the group.

cgroup v1 (also the "hybrid" layout: v1 controllers under ``/sys/fs/cgroup/<controller>``, an
empty v2 tree at ``/sys/fs/cgroup/unified``): one directory per controller, CFS quota in
``cpu.cfs_period_us``/``cpu.cfs_quota_us``, ``memory.limit_in_bytes``, ``cpuacct.usage``.

cgroup v2 (``/sys/fs/cgroup/cgroup.controllers`` exists): one directory per group for every
controller, ``cpu.max`` ("QUOTA PERIOD"), ``memory.max``, ``cpu.stat``'s ``usage_usec``. A group
only gets the cpu and memory controllers when its parent lists them in
``cgroup.subtree_control``; and a non-root cgroup cannot enable them while it has processes of
its own (the "no internal processes" rule). So before the first group, this process's cgroup
hands its own processes to a leaf child (:data:`LEAF`) and enables ``+cpu +memory`` for its
children — what container init scripts do to nest cgroups. The real root cgroup (no
``cgroup.type`` file) is exempt and is used as is.

Every path is below ``Hierarchy.root``, so the v2 logic can be tested against a temp
directory standing in for ``/sys/fs/cgroup`` (tests/test_cgroups.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CGROUP_ROOT", "Group", "Hierarchy", "create", "hierarchy", "remove", "unavailable"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
LEAF = "edge-harness-procs"  # v2: this cgroup's own processes move here so it may delegate
MIN_CFS_US = 1000  # the kernel rejects CFS periods and quotas below 1 ms

# v1 file that must be writable for a controller to be usable.
_V1_KNOB = {"cpu": "cpu.cfs_quota_us", "memory": "memory.limit_in_bytes",
            "cpuacct": "cpuacct.usage"}
# Joins the cgroups whose cgroup.procs files are $2.. ($1 of them), then execs the rest. A
# constant script: paths and the command travel only as positional arguments. Callers put it
# before `ip netns exec`, which remounts /sys (hiding the cgroupfs).
JOIN_SH = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; '
           'n=$((n - 1)); done; exec "$@"')


@dataclass(frozen=True, kw_only=True, slots=True)
class Hierarchy:
    """This machine's cgroup version and, per controller, the directory new groups go under."""

    version: int  # 1 or 2
    root: Path  # the cgroupfs mount (/sys/fs/cgroup), or a temp dir standing in for it
    parents: dict[str, Path]  # controller -> this process's own group directory


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    """One harness cgroup (v1: a directory per controller; v2: one directory)."""

    version: int
    cpu: Path
    memory: Path | None = None
    accounting: Path | None = None  # v1 cpuacct (maybe == cpu when co-mounted); v2 == cpu

    @property
    def dirs(self) -> tuple[Path, ...]:
        """Distinct directories of this group, cpu first."""
        found: list[Path] = []
        for path in (self.cpu, self.memory, self.accounting):
            if path is not None and path not in found:
                found.append(path)
        return tuple(found)

    def cpu_limit(self) -> tuple[int, int]:
        """(quota_us, period_us) of the CPU cap."""
        if self.version == 2:
            quota, period = _read(self.cpu / "cpu.max").split()
            return int(quota), int(period)
        return (int(_read(self.cpu / "cpu.cfs_quota_us")),
                int(_read(self.cpu / "cpu.cfs_period_us")))

    def memory_limit(self) -> int | None:
        """The memory cap in bytes (None without a memory group)."""
        if self.memory is None:
            return None
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return int(_read(self.memory / name))

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by the members (None without accounting)."""
        if self.accounting is None:
            return None
        if self.version == 1:
            return int(_read(self.accounting / "cpuacct.usage")) / 1e9
        for line in _read(self.accounting / "cpu.stat").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None

    def members(self) -> set[int]:
        """Pids in the group (its cpu directory)."""
        return _pids(self.cpu)

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside every directory of this group."""
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        return ["sh", "-c", JOIN_SH, "sh", str(len(procs)), *procs, *argv]


# ---------------------------------------------------------------- where the groups go


def hierarchy(root: Path = CGROUP_ROOT, self_cgroup: str | None = None) -> Hierarchy:
    """This process's cgroups (``self_cgroup``: the text of /proc/self/cgroup, for tests)."""
    text = self_cgroup if self_cgroup is not None else _own_cgroup_text()
    entries = [line.split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    if (root / "cgroup.controllers").is_file():  # v2 mounted at the root: pure cgroup v2
        path = next((p for hid, ctl, p in entries if hid == "0" and not ctl), "/")
        own = root / path.lstrip("/")
        if own.name == LEAF:  # moved there by an earlier create(): delegate from its parent
            own = own.parent
        return Hierarchy(version=2, root=root, parents=dict.fromkeys(_V1_KNOB, own))
    parents: dict[str, Path] = {}
    for _, controllers, path in entries:
        for controller in filter(None, controllers.split(",")):
            mount = root / controllers if (root / controllers).is_dir() else root / controller
            own = mount / path.lstrip("/")
            # A container without a cgroup namespace sees its own group at the mount's root
            # while /proc/self/cgroup names the host's path.
            parents[controller] = own if own.is_dir() else mount
    return Hierarchy(version=1, root=root, parents=parents)


def _own_cgroup_text() -> str:
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


def unavailable(where: Hierarchy, controllers: Iterable[str]) -> str | None:
    """None when groups with these controllers can be made, else a one-line reason."""
    for controller in controllers:
        parent = where.parents.get(controller)
        if parent is None or not parent.is_dir():
            return f"no cgroup v{where.version} {controller} controller under {where.root}"
        if where.version == 1 and not os.access(parent / _V1_KNOB[controller], os.W_OK):
            return f"no writable cgroup v1 {controller} controller at {parent}"
        if where.version == 2 and controller != "cpuacct":
            offered = _read(parent / "cgroup.controllers").split()
            if controller not in offered:
                return f"cgroup v2: {parent} offers no {controller} controller ({offered})"
            if not os.access(parent / "cgroup.subtree_control", os.W_OK):
                return f"cgroup v2: {parent}/cgroup.subtree_control is not writable"
    return None


# ---------------------------------------------------------------- making and removing


def cfs(cpus: float, period_us: int) -> tuple[int, int]:
    """(period_us, quota_us) giving ``cpus`` CPUs; the period grows when the quota would be
    under the kernel's 1 ms minimum (0.25 CPU with a 1 ms period: 1 ms every 4 ms)."""
    if not cpus > 0:
        raise ValueError(f"cpus must be positive, got {cpus}")
    period = max(period_us, MIN_CFS_US, math.ceil(MIN_CFS_US / cpus))
    return period, max(MIN_CFS_US, round(cpus * period))


def create(where: Hierarchy, name: str, *, cpus: float, period_us: int,
           memory_bytes: int | None = None, accounting: bool = False) -> Group:
    """A new group ``name`` capped at ``cpus`` CPUs (and ``memory_bytes``); on error the
    directories made so far are removed again."""
    period, quota = cfs(cpus, period_us)
    made: list[Path] = []
    try:
        if where.version == 2:
            return _create_v2(where, name, period, quota, memory_bytes, made)
        return _create_v1(where, name, period, quota, memory_bytes, accounting, made)
    except BaseException:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


def _create_v1(where: Hierarchy, name: str, period: int, quota: int, memory_bytes: int | None,
               accounting: bool, made: list[Path]) -> Group:
    cpu = _mkdir(where.parents["cpu"] / name, made)
    (cpu / "cpu.cfs_period_us").write_text(str(period))
    (cpu / "cpu.cfs_quota_us").write_text(str(quota))
    memory = None
    if memory_bytes is not None:
        memory = _mkdir(where.parents["memory"] / name, made)
        (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
    counted = None
    if accounting and "cpuacct" in where.parents:
        shared = where.parents["cpuacct"] == where.parents["cpu"]  # co-mounted cpu,cpuacct
        counted = cpu if shared else _mkdir(where.parents["cpuacct"] / name, made)
    return Group(version=1, cpu=cpu, memory=memory, accounting=counted)


def _create_v2(where: Hierarchy, name: str, period: int, quota: int, memory_bytes: int | None,
               made: list[Path]) -> Group:
    parent = where.parents["cpu"]
    delegate(parent, ["cpu"] + (["memory"] if memory_bytes is not None else []))
    group = _mkdir(parent / name, made)
    (group / "cpu.max").write_text(f"{quota} {period}")
    if memory_bytes is not None:
        (group / "memory.max").write_text(str(memory_bytes))
    return Group(version=2, cpu=group, memory=group if memory_bytes is not None else None,
                 accounting=group)


def delegate(parent: Path, controllers: list[str]) -> None:
    """v2: enable ``controllers`` for ``parent``'s children, first moving ``parent``'s own
    processes to the :data:`LEAF` child unless ``parent`` is the root cgroup."""
    enabled = _read(parent / "cgroup.subtree_control").replace("+", "").split()
    missing = [c for c in controllers if c not in enabled]
    if not missing:
        return
    if (parent / "cgroup.type").exists() and _pids(parent):  # the root has no cgroup.type
        leaf = parent / LEAF
        leaf.mkdir(exist_ok=True)
        _move(_pids(parent), leaf)
    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))


def _move(pids: set[int], group: Path) -> None:
    """Write each pid to ``group``'s cgroup.procs (one pid per write, as the kernel wants)."""
    fd = os.open(group / "cgroup.procs", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for pid in sorted(pids):
            with contextlib.suppress(OSError):  # exited meanwhile, or a kernel thread
                os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)


def remove(group: Group, timeout: float = 5.0) -> None:
    """Kill every member, then remove every directory of the group (retrying briefly)."""
    for path in reversed(group.dirs):
        remove_dir(path, timeout)


def remove_dir(path: Path, timeout: float = 5.0) -> None:
    """Kill the members of one cgroup directory and remove it; gone already is fine."""
    deadline = time.monotonic() + timeout
    while True:
        kill_members(path, timeout=0.5)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def kill_members(path: Path, timeout: float = 5.0) -> set[int]:
    """SIGKILL every member of the cgroup directory ``path`` until it is empty."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = _pids(path)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.02)
    return killed


def named(where: Hierarchy, prefix: str) -> list[Path]:
    """Directories named ``prefix*`` directly below this process's groups (every controller)."""
    parents = {p for p in where.parents.values() if p.is_dir()}
    return [g for parent in sorted(parents) for g in sorted(parent.glob(f"{prefix}*"))
            if g.is_dir()]


def _mkdir(path: Path, made: list[Path]) -> Path:
    path.mkdir()
    made.append(path)
    return path


def _pids(path: Path) -> set[int]:
    try:
        return {int(p) for p in (path / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
