"""The cgroup layer of the test harnesses (tests/support/cgroups.py): v1 and v2.

This machine runs cgroup v1 (hybrid layout), so the cgroup v2 path cannot run here for real:
the v2 tests below check the files it writes against a temp directory standing in for
/sys/fs/cgroup (``cgroup.controllers`` at its root makes it "v2"). A real kernel also enforces
what a temp directory cannot (the no-internal-processes rule, quota ranges); the last test
creates a real group on whichever version this machine has.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import cgroups

CONTROLLERS = "cpuset cpu io memory pids\n"


def _fake_v2(tmp_path: Path, own: str = "/ci.scope", pids: tuple[int, ...] = (101, 102), *,
             root_cgroup: bool = False, enabled: str = "") -> cgroups.Hierarchy:
    """A temp dir laid out like a pure cgroup v2 mount, this process in ``own``."""
    root = tmp_path / "cgroup"
    own_dir = root / own.lstrip("/")
    own_dir.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(CONTROLLERS)
    (own_dir / "cgroup.controllers").write_text(CONTROLLERS)
    (own_dir / "cgroup.subtree_control").write_text(enabled)
    (own_dir / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
    if not root_cgroup:  # every cgroup but the root has a cgroup.type file
        (own_dir / "cgroup.type").write_text("domain\n")
    return cgroups.hierarchy(root, self_cgroup=f"0::{own}\n")


def test_v2_is_detected_and_new_groups_go_below_this_process_cgroup(tmp_path: Path) -> None:
    where = _fake_v2(tmp_path)
    assert where.version == 2
    assert where.parents["cpu"] == where.parents["memory"] == tmp_path / "cgroup" / "ci.scope"


def test_v2_group_writes_cpu_max_memory_max_and_delegates_first(tmp_path: Path) -> None:
    """The files a v2 group needs: the parent's processes move to a leaf, +cpu +memory are
    enabled for its children, then cpu.max ("QUOTA PERIOD") and memory.max are written."""
    where = _fake_v2(tmp_path)
    parent = where.parents["cpu"]
    group = cgroups.create(where, "edge-fleet-7-0", cpus=0.25, period_us=100_000,
                           memory_bytes=512 * 2**20, accounting=True)
    assert group.version == 2 and group.cpu == group.memory == group.accounting
    assert group.cpu == parent / "edge-fleet-7-0"
    assert (group.cpu / "cpu.max").read_text() == "25000 100000"
    assert (group.cpu / "memory.max").read_text() == str(512 * 2**20)
    assert (parent / "cgroup.subtree_control").read_text() == "+cpu +memory"
    assert (parent / cgroups.LEAF / "cgroup.procs").read_text() == "101\n102\n"
    assert group.cpu_limit() == (25000, 100000)
    assert group.memory_limit() == 512 * 2**20
    assert group.join_argv(["true"]) == ["sh", "-c", cgroups.JOIN_SH, "sh", "1",
                                         str(group.cpu / "cgroup.procs"), "true"]


def test_v2_cpu_only_group_enables_only_cpu(tmp_path: Path) -> None:
    where = _fake_v2(tmp_path)
    group = cgroups.create(where, "edgetest-7-0", cpus=0.125, period_us=1000)
    assert (group.cpu / "cpu.max").read_text() == "1000 8000"  # the period grows to 8 ms
    assert group.memory is None and group.memory_limit() is None
    assert (where.parents["cpu"] / "cgroup.subtree_control").read_text() == "+cpu"


def test_v2_root_cgroup_and_already_delegated_parents_move_no_process(tmp_path: Path) -> None:
    at_root = _fake_v2(tmp_path / "a", own="/", root_cgroup=True)
    cgroups.create(at_root, "g", cpus=1.0, period_us=10_000, memory_bytes=2**30)
    assert not (at_root.parents["cpu"] / cgroups.LEAF).exists()  # the root may hold processes
    delegated = _fake_v2(tmp_path / "b", enabled="cpu memory\n")
    cgroups.create(delegated, "g", cpus=1.0, period_us=10_000, memory_bytes=2**30)
    assert not (delegated.parents["cpu"] / cgroups.LEAF).exists()
    assert (delegated.parents["cpu"] / "cgroup.subtree_control").read_text() == "cpu memory\n"


def test_v2_after_moving_to_the_leaf_groups_still_go_below_the_parent(tmp_path: Path) -> None:
    first = _fake_v2(tmp_path)
    again = cgroups.hierarchy(tmp_path / "cgroup", self_cgroup=f"0::/ci.scope/{cgroups.LEAF}\n")
    assert again.parents["cpu"] == first.parents["cpu"]


def test_v2_accounting_reads_usage_usec(tmp_path: Path) -> None:
    group = cgroups.create(_fake_v2(tmp_path), "g", cpus=1.0, period_us=10_000)
    (group.cpu / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert group.cpu_seconds() == pytest.approx(2.5)


def test_v2_unavailable_names_the_missing_controller(tmp_path: Path) -> None:
    where = _fake_v2(tmp_path)
    (where.parents["cpu"] / "cgroup.controllers").write_text("cpu pids\n")
    assert cgroups.unavailable(where, ["cpu"]) is None
    reason = cgroups.unavailable(where, ["cpu", "memory"])
    assert reason is not None and "no memory controller" in reason


def test_v1_hybrid_layout_one_directory_per_controller(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    for name in ("cpu", "cpuacct", "memory", "unified"):
        (root / name).mkdir(parents=True)
    (root / "memory" / "job").mkdir()
    where = cgroups.hierarchy(root, self_cgroup="4:memory:/job\n2:cpuacct:/\n1:cpu:/\n0::/\n")
    assert where.version == 1
    assert where.parents["memory"] == root / "memory" / "job"
    group = cgroups.create(where, "g", cpus=0.5, period_us=10_000, memory_bytes=2**30,
                           accounting=True)
    assert group.dirs == (root / "cpu" / "g", root / "memory" / "job" / "g", root / "cpuacct" / "g")
    assert (group.cpu / "cpu.cfs_period_us").read_text() == "10000"
    assert (group.cpu / "cpu.cfs_quota_us").read_text() == "5000"
    assert (group.memory / "memory.limit_in_bytes").read_text() == str(2**30)
    assert group.join_argv(["true"])[4] == "3"  # joins all three directories


def test_v1_in_a_container_uses_the_mount_root_when_the_host_path_is_not_there(
        tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    where = cgroups.hierarchy(root, self_cgroup="1:cpu:/docker/0123abcd\n")
    assert where.parents["cpu"] == root / "cpu"


def test_v1_co_mounted_cpu_and_cpuacct_share_one_directory(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct").mkdir(parents=True)
    where = cgroups.hierarchy(root, self_cgroup="2:cpu,cpuacct:/\n")
    group = cgroups.create(where, "g", cpus=1.0, period_us=10_000, accounting=True)
    assert group.accounting == group.cpu == root / "cpu,cpuacct" / "g"
    (group.cpu / "cpuacct.usage").write_text("1500000000\n")
    assert group.cpu_seconds() == pytest.approx(1.5)


def test_cfs_period_grows_so_the_quota_stays_legal() -> None:
    assert cgroups.cfs(1.0, 10_000) == (10_000, 10_000)
    assert cgroups.cfs(0.125, 1000) == (8000, 1000)
    assert cgroups.cfs(0.05, 10_000) == (20_000, 1000)
    with pytest.raises(ValueError):
        cgroups.cfs(0, 1000)


_REAL = cgroups.unavailable(cgroups.hierarchy(), ["cpu"]) if os.geteuid() == 0 else "needs root"


@pytest.mark.skipif(_REAL is not None, reason=f"no writable cgroup cpu controller: {_REAL}")
def test_a_real_group_caps_and_holds_its_command() -> None:
    """On this machine's own cgroup version: the command runs inside, the cap reads back."""
    where = cgroups.hierarchy()
    group = cgroups.create(where, f"edgetest-{os.getpid()}-cgroups", cpus=0.5, period_us=10_000)
    try:
        assert group.cpu_limit() == (5000, 10_000)
        argv = group.join_argv(["sh", "-c", "cat /proc/self/cgroup"])
        inside = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert f"/edgetest-{os.getpid()}-cgroups" in inside
        sleeper = subprocess.Popen(group.join_argv(["sleep", "30"]))
        for _ in range(100):
            if sleeper.pid in group.members():
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert sleeper.pid in group.members()
    finally:
        cgroups.remove(group)
    assert sleeper.wait(timeout=5) != 0  # killed by remove()
    assert not group.cpu.exists()
