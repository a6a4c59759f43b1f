"""Issue 38: the suite runs on a worker per core (pytest-xdist) with every test that reaches a
real device on one worker, in one group (tests/support/parallel.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import hardware, parallel, tiers

#: Six "system" tests (they use a fixture named as the sshd device's) and six others, run on
#: two workers: each records the worker it ran on.
INNER = '''
import os

import pytest


@pytest.fixture
def ssh_device():
    return "a device"


def _record(name):
    with open(os.path.join(os.environ["RECORD"], name), "w") as handle:
        handle.write(os.environ.get("PYTEST_XDIST_WORKER", "main"))


@pytest.mark.parametrize("n", range(6))
def test_on_the_device(ssh_device, n):
    _record(f"device-{n}")


@pytest.mark.parametrize("n", range(6))
def test_elsewhere(n):
    _record(f"other-{n}")
'''

#: A module of tests that use no device: its tests run on one worker too.
OTHER = INNER.split("@pytest.mark.parametrize")[0] + '''
@pytest.mark.parametrize("n", range(6))
def test_third(n):
    _record(f"third-{n}")
'''
ROOT = Path(__file__).resolve().parents[1]


def test_every_system_test_and_no_other_is_in_the_devices_group(
        request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        groups = [m.args[0] if m.args else m.kwargs.get("name")
                  for m in item.iter_markers("xdist_group")]
        expected = [parallel.DEVICES_GROUP] if tiers.tier_of(item) == "system" else []
        assert groups == expected, (item.nodeid, groups)


def test_every_test_id_is_short(request: pytest.FixtureRequest) -> None:
    """pytest puts the running test's id in PYTEST_CURRENT_TEST, which every child process
    inherits: an id holding a 200 KB request body made each child fail to start (E2BIG) in
    whichever test of its module started the module's server."""
    long = [item.nodeid[:80] for item in request.session.items if len(item.nodeid) > 1024]
    assert long == []


@pytest.mark.parametrize(("cpus", "workers"), [(1, 1), (2, 2), (3, 3), (64, 4)])
def test_a_worker_per_core_at_most_four(cpus: int, workers: int) -> None:
    assert parallel.workers(cpus) == workers


def test_a_listed_tests_skip_is_excused_in_its_group_too() -> None:
    listed = hardware.UNAVAILABLE_HARDWARE[0].test
    assert hardware.excused(listed) and hardware.excused(f"{listed}@{parallel.DEVICES_GROUP}")
    assert not hardware.excused(f"{listed}x@{parallel.DEVICES_GROUP}")
    assert parallel.base_nodeid("t.py::a[user@host]") == "t.py::a[user@host]"


def test_the_device_tests_run_on_one_worker_the_others_on_both(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    record = pytester.mkdir("record")
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the plugin, from this checkout
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST")]:
        monkeypatch.delenv(name)  # this run's own worker, when the suite runs on workers
    pytester.makepyfile(test_split=INNER, test_other=OTHER)
    result = pytester.runpytest_subprocess("-p", "tests.support.parallel", "-p", "no:randomly",
                                           "-n", "2", "--dist", "loadgroup", "-q")
    assert result.ret == 0, (result.outlines, result.errlines)
    ran = {p.name: p.read_text() for p in record.iterdir()}
    assert len(ran) == 18, ran
    devices = {ran[f"device-{n}"] for n in range(6)}
    assert len(devices) == 1 and devices <= {"gw0", "gw1"}, ran
    # whole modules: each module's tests on one worker
    assert len({ran[f"other-{n}"] for n in range(6)}) == 1, ran
    assert len({ran[f"third-{n}"] for n in range(6)}) == 1, ran


#: Three modules: one exclusive test that records whether another test ran while it did.
EXCLUSIVE_INNER = '''
import os
import time

import pytest


def _span(name, seconds):
    folder, name = os.environ["RECORD"], f"{__name__}-{name}"
    open(os.path.join(folder, name + ".nice"), "w").write(
        repr(os.getpriority(os.PRIO_PROCESS, 0)))
    open(os.path.join(folder, name + ".start"), "w").write(repr(time.time()))
    time.sleep(seconds)
    open(os.path.join(folder, name + ".end"), "w").write(repr(time.time()))


@pytest.mark.exclusive
def test_alone():
    _span("alone", 1.0)


@pytest.mark.parametrize("n", range(8))
def test_beside(n):
    _span(f"beside-{n}", 0.3)
'''


def test_an_exclusive_test_runs_while_no_other_does_at_normal_priority(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test beside an exclusive one runs at nice 19 (root may raise it back after), or not at
    all; and the worker is back at its own priority for the tests after."""
    record = pytester.mkdir("record")
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST")]:
        monkeypatch.delenv(name)
    pytester.makepyfile(test_a=EXCLUSIVE_INNER, test_b=EXCLUSIVE_INNER.replace("alone", "solo"))
    base = os.getpriority(os.PRIO_PROCESS, 0)  # this test's own (19 beside an exclusive one)
    result = pytester.runpytest_subprocess("-p", "tests.support.parallel", "-p", "no:randomly",
                                           "-n", "2", "--dist", "loadgroup", "-q")
    assert result.ret == 0, (result.outlines, result.errlines)
    spans = {p.stem: float(p.read_text()) for p in record.glob("*.start")}
    ends = {p.stem: float(p.read_text()) for p in record.glob("*.end")}
    nice = {p.stem: int(p.read_text()) for p in record.glob("*.nice")}
    assert len(spans) == len(ends) == len(nice) == 18
    lowered = parallel.LOWEST if parallel.may_raise_priority() else None
    beside = set()
    for name in ("test_a-alone", "test_b-solo"):
        overlapping = {other for other in spans if other != name
                       and spans[other] < ends[name] and ends[other] > spans[name]}
        assert {nice[o] for o in overlapping} <= {lowered}, (name, overlapping, nice)
        assert nice[name] == base
        beside |= overlapping
    last = max(ends["test_a-alone"], ends["test_b-solo"])
    assert all(nice[o] == base for o in spans if spans[o] > last), nice  # priority given back
    assert lowered is None or beside, "nothing ran beside the exclusive tests"
