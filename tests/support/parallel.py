"""Two workers (pytest-xdist), the real devices on one of them (a pytest plugin).

The suite waits more than it computes (subprocesses, sshd round trips, device start-ups): one
process kept about 0.9 of this 2-core machine's cores busy. ``-n auto --dist loadgroup``
(pyproject's addopts) runs it on up to ``MAX_WORKERS`` workers, one per core.

A worker gets whole modules (``ModuleScheduling``): a module's tests run one after another on
one worker, so its module-scoped fixtures (a deployed bundle, a device's home) are set up once.
The ``system`` tier (tests/support/tiers.py: the sshd device, the emulated aarch64 board, the
fleet, the emulated links) shares machine-wide things -- the device user and its home, the
board's lock, /etc/passwd's bind mounts, cgroups -- held for a whole session, so all of it is one
unit of work (the xdist group ``devices``): one worker runs it as one process would. ``-n 0``
runs everything in one process, as before.

A test marked ``exclusive`` (it times how fast edge reacts, e.g. to a Ctrl-C) runs while no other
test runs at normal CPU priority: the other workers finish the test they are in, then run theirs
at the lowest priority (nice 19: the scheduler gives them only what the exclusive test leaves
idle) where they may raise it back after (root), else they wait (``alone``/``beside``, flock).
Waiting left a core idle for the emulated links' ~4 minutes every run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling

from tests.support.tiers import tier_of

#: More workers than this only crowd the system group's worker on a bigger machine.
MAX_WORKERS = 4
#: The xdist group of every test that reaches a real device.
DEVICES_GROUP = "devices"
#: The marker of a test that must run while no other runs at normal priority.
EXCLUSIVE = "exclusive"
#: The niceness of a test that runs beside an exclusive one.
LOWEST = 19


def workers(cpus: int | None = None) -> int:
    """Workers for ``-n auto``: one per core this process may run on, at most MAX_WORKERS."""
    count = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, min(count, MAX_WORKERS))


class ModuleScheduling(LoadGroupScheduling):
    """Whole modules to a worker, and the ``devices`` group (tests of several modules) to one."""

    def _split_scope(self, nodeid: str) -> str:
        if base_nodeid(nodeid) != nodeid:
            return DEVICES_GROUP
        return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return workers()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> ModuleScheduling:
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{EXCLUSIVE}: runs while no other test runs "
                            "(tests/support/parallel.py)")


@pytest.fixture(autouse=True)
def _exclusive_or_beside(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """On a worker: an ``exclusive`` test alone, any other beside the others."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:  # one process: nothing runs beside it
        yield
        return
    folder = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
    if request.node.get_closest_marker(EXCLUSIVE) is not None:
        with alone(folder, worker):
            yield
    else:
        with beside(folder):
            yield


@contextlib.contextmanager
def alone(folder: Path, name: str) -> Iterator[None]:
    """Hold the run's lock exclusively; ``pending-NAME`` stops new tests from starting first."""
    pending = folder / f"pending-{name}"
    pending.touch()
    try:
        with _locked(folder, fcntl.LOCK_EX):
            yield
    finally:
        pending.unlink(missing_ok=True)


@contextlib.contextmanager
def beside(folder: Path) -> Iterator[None]:
    """Hold the run's lock shared, once no exclusive test waits for it; while one waits or
    runs, run at the lowest priority instead when this process may raise it back after."""
    if _exclusive_pending(folder) and may_raise_priority():
        with lowest_priority():
            yield
        return
    while _exclusive_pending(folder):
        time.sleep(0.2)
    with _locked(folder, fcntl.LOCK_SH):
        yield


def _exclusive_pending(folder: Path) -> bool:
    return any(folder.glob("pending-*"))


def may_raise_priority() -> bool:
    """Whether this process may lower its niceness again (CAP_SYS_NICE: root)."""
    return os.geteuid() == 0


@contextlib.contextmanager
def lowest_priority() -> Iterator[None]:
    """This thread (the test's; threads and processes it starts inherit it) at nice LOWEST."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, LOWEST)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


@contextlib.contextmanager
def _locked(folder: Path, how: int) -> Iterator[None]:
    with open(folder / "exclusive.lock", "a") as handle:
        fcntl.flock(handle, how)
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of the system tier in one xdist group (before xdist names the group in the id)."""
    for item in items:
        if tier_of(item) == "system":
            item.add_marker(pytest.mark.xdist_group(DEVICES_GROUP))


def base_nodeid(nodeid: str) -> str:
    """A test's id without the ``@devices`` suffix ``--dist loadgroup`` gives a grouped test."""
    return nodeid.removesuffix("@" + DEVICES_GROUP)
