"""Policies of the test suite and the repository themselves: no silent skips under CI's
EDGE_TEST_STRICT=1, random order with a printed seed, no shipped module importing tests/, no
module over 600 lines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("edge", "devices", "targets", "partition")
MAX_LINES = 600
EXEMPT: set[str] = set()  # none since the serving engine replaced the hand-written server

SKIPPING = '''
import pytest

@pytest.fixture
def lacking():
    pytest.skip("no widget in this fixture")

@pytest.mark.skip(reason="marked to skip")
def test_marked():
    pass

@pytest.mark.skipif(True, reason="skipif said so")
def test_skipif():
    pass

def test_skips_inside():
    pytest.skip("pytest.skip in the test body")

def test_fixture_skips(lacking):
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_edge_test")

def test_runs():
    assert True

@pytest.mark.xfail(reason="a known bug, not a skip")
def test_xfail():
    assert False
'''

SKIPPED_MODULE = '''
import pytest
pytest.importorskip("no_such_module_edge_test_either")

def test_never_collected():
    pass
'''


@pytest.fixture
def skipping(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_skipping=SKIPPING, test_skipped_module=SKIPPED_MODULE)
    return pytester


def test_skips_stay_skips_without_the_variable(skipping: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGE_TEST_STRICT", raising=False)
    result = skipping.runpytest("-p", "tests.support.ci", "-p", "no:randomly", "-rs")
    result.assert_outcomes(passed=1, skipped=6, xfailed=1)
    assert result.ret == 0
    assert "EDGE_TEST_STRICT: off" in result.stdout.str()
    assert "test order: file order (pytest-randomly off)" in result.stdout.str()


def test_the_random_seed_is_printed_even_with_q(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("-p", "tests.support.ci", "-q", "--randomly-seed=4242")
    result.assert_outcomes(passed=1)
    assert "test order: random, seed 4242 (replay it: pytest --randomly-seed=4242)" \
        in result.stdout.str()


def test_every_kind_of_skip_fails_under_edge_test_strict(skipping: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TEST_STRICT", "1")
    result = skipping.runpytest("-p", "tests.support.ci", "-p", "no:randomly",
                                "--continue-on-collection-errors")
    # skips in setup (marks, fixtures) and at collection (the module) become errors
    result.assert_outcomes(passed=1, failed=2, errors=4, xfailed=1)
    assert result.ret == 1
    out = result.stdout.str()
    assert "EDGE_TEST_STRICT: on" in out  # the header says so
    for reason in ("marked to skip", "skipif said so", "pytest.skip in the test body",
                   "no widget in this fixture", "no_such_module_edge_test",
                   "no_such_module_edge_test_either"):
        assert reason in out, reason
    assert "EDGE_TEST_STRICT=1 forbids skips" in out


def test_this_session_loads_the_strict_plugin(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("tests.support.ci")


def test_ci_runs_strict_and_in_random_order_and_the_extra_pins_randomly() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^export EDGE_TEST_STRICT=1\b", ci, re.M), "CI must forbid skips"
    assert ".venv/bin/python -m pytest" in ci
    assert "-p no:randomly" not in ci and "randomly-dont" not in ci
    assert "EDGE_TEST_ARM_REQUIRED" not in ci and "EDGE_TEST_BROWSER_REQUIRED" not in ci
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("pytest-randomly") for dep in extra["optional-dependencies"]["test"])


def test_pytest_randomly_shuffles_this_run(pytestconfig: pytest.Config) -> None:
    """Installed with the test extra and on unless blocked explicitly (-p no:randomly)."""
    plugins = pytestconfig.pluginmanager
    if plugins.is_blocked("randomly"):
        return  # asked for by hand, e.g. to rerun one module in file order
    assert plugins.has_plugin("randomly"), "pytest-randomly is not installed"
    assert isinstance(pytestconfig.getoption("randomly_seed"), int)  # printed in the header


def test_no_shipped_module_imports_the_test_harness() -> None:
    offenders = []
    for path in _shipped_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n == "tests" or n.startswith("tests.")]
    assert not offenders, offenders


def test_no_module_outside_tests_exceeds_600_lines() -> None:
    paths = [*_shipped_modules(), *(ROOT / "bench").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in paths
            if (n := len(p.read_text().splitlines())) >= MAX_LINES
            and str(p.relative_to(ROOT)) not in EXEMPT}
    assert not long, long


def _shipped_modules() -> list[Path]:
    return sorted(p for package in SHIPPED for p in (ROOT / package).rglob("*.py"))


def test_this_module_has_its_own_device_and_results_but_shares_conversions() -> None:
    import os

    device = Path(os.environ["EDGE_LOCAL_DEVICE"])
    cache = Path(os.environ["EDGE_CACHE_DIR"])
    assert device.parent.name == cache.parent.name == __name__  # per module, not per session
    assert not (cache / "results").is_symlink()
    from tests.support.kept import data_root, keeping_caches

    kept = (data_root() / "edge-cache").resolve()
    for shared in ("convert", "reference", "wheels"):
        assert (cache / shared).is_symlink()
        # issue 38: kept between runs with EDGE_TEST_KEEP_CACHES=1
        assert ((cache / shared).resolve().parent == kept) is keeping_caches()


def test_ci_runs_the_readmes_first_command_first_as_written() -> None:
    """Issue 26: the quick start is what a new user runs; CI runs that very line, in a fresh
    venv, before installing the test extras, so nothing they bring (torch) can hide a missing
    extra. Issue 38: it installs the base package alone (ONNX Runtime: the runtime the first
    deploy's plan uses), with pip's progress shown."""
    first = subprocess.run([sys.executable, str(ROOT / "tools" / "readme_command.py"), "1"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert first.startswith("python3 -m venv .venv && ") and "pip install -e . && " in first
    assert "test" not in first and " -q" not in first  # the base package alone, progress shown
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert first in lines, "the README's first command is not a line of .ci/run"
    run_at = lines.index(first)
    assert lines[run_at - 1] == "rm -rf .venv"  # a fresh venv, not one left by a run before
    later = "\n".join(lines[run_at + 1:])
    assert "'.[all,test]'" in later and "pytest" in later and "EDGE_BASE_VENV" in later
