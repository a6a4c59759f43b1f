"""A pytest plugin for CI's policies: no silent skips, and a reproducible random order.

With ``EDGE_TEST_STRICT=1`` (CI sets it) a skipped test fails instead, except the tests
tests/support/hardware.py lists (hardware no project machine has), which the summary prints.

A test may skip where the machine lacks something (root, /dev/net/tun, a browser, an aarch64
emulator, an optional package) — on a developer's laptop. In CI everything is installed, so a
skip there means a test silently did not run: every skip — a ``skip``/``skipif`` mark,
``pytest.skip()`` in a test or fixture, ``pytest.importorskip`` — becomes a failure that prints
the skip's reason. A module skipped at collection (a module-level ``importorskip``) becomes a
collection error. ``xfail`` is not a skip and is left alone.

pytest-randomly shuffles the order and prints its seed in the header, which ``pytest -q``
hides; the terminal summary repeats it (with the command line to replay that order), so a
failure that depends on the order can be reproduced.

Registered by tests/conftest.py (``pytest_plugins``); tests/test_ci_policy.py runs it with
``pytester``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from tests.support import hardware

VARIABLE = "EDGE_TEST_STRICT"


def strict() -> bool:
    """Whether skips fail this run."""
    return os.environ.get(VARIABLE, "") not in ("", "0")


def _reason(longrepr: Any) -> str:
    """The skip reason of a report's ``longrepr`` ((path, line, "Skipped: why") for skips)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    where = ""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        where = f" ({report.longrepr[0]}:{report.longrepr[1]})"
    report.outcome = "failed"
    report.longrepr = (f"skipped, and {VARIABLE}=1 forbids skips (CI must run every test): "
                       f"{_reason(report.longrepr)}{where}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (report.skipped and not hasattr(report, "wasxfail") and strict()
            and not hardware.excused(item.nodeid)):
        _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector
                               ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped and strict():
        _fail(report)
    return report


def pytest_report_header(config: pytest.Config) -> str:
    state = "on: a skipped test fails" if strict() else "off (set it to 1 to fail on skips)"
    return f"{VARIABLE}: {state}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    seed = _seed(config)
    line = ("test order: file order (pytest-randomly off)" if seed is None else
            f"test order: random, seed {seed} (replay it: pytest --randomly-seed={seed})")
    terminalreporter.write_line(line)
    for text in hardware.summary():
        terminalreporter.write_line(text)


def _seed(config: pytest.Config) -> int | None:
    """pytest-randomly's seed for this run, None when it is not active."""
    if not config.pluginmanager.has_plugin("randomly"):
        return None
    seed = config.getoption("randomly_seed", None)
    return seed if isinstance(seed, int) else None
