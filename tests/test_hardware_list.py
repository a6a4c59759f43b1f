"""The declared exception to "no skips": every test that skips for hardware is listed in
tests/support/hardware.py (and marked through it), and every listed test exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import hardware
from tests.support.hardware import UNAVAILABLE_HARDWARE, entry, excused, needs_hardware, summary

ROOT = Path(__file__).resolve().parents[1]
#: Words of a skip reason that say it skips for hardware.
HARDWARE_WORDS = re.compile(r"\b(gpu|npu|tpu|cuda|tensorrt|nvidia|jetson|accelerator)\b", re.I)
_SKIPS = ("skip", "skipif", "importorskip")


def _test_files() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / "tests").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _marked() -> dict[str, str]:
    """needs_hardware's argument -> the node id of the function it decorates."""
    found = {}
    for rel, tree in _test_files():
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and _name(deco) == "needs_hardware":
                    found[ast.literal_eval(deco.args[0])] = f"{rel}::{node.name}"
    return found


def _strings(node: ast.AST) -> str:
    return " ".join(n.value for n in ast.walk(node)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str))


def test_every_listed_test_exists_and_is_marked_through_the_list() -> None:
    marked = _marked()
    for item in UNAVAILABLE_HARDWARE:
        assert item.test in marked, f"{item.test} is listed but no test is marked with it"
        assert marked[item.test] == item.test, (item.test, marked[item.test])
        assert item.hardware and item.why


def test_every_mark_names_a_listed_test() -> None:
    listed = {item.test for item in UNAVAILABLE_HARDWARE}
    for argument, where in _marked().items():
        assert argument in listed, f"{where} is marked needs_hardware({argument!r}), not listed"
        assert argument == where, f"{where} is marked with another test's id {argument!r}"


def test_no_test_skips_for_hardware_outside_the_list() -> None:
    offenders = []
    for rel, tree in _test_files():
        if rel == "tests/support/hardware.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node) in _SKIPS \
                    and HARDWARE_WORDS.search(_strings(node)):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, ("these skip for hardware without tests/support/hardware.py's "
                           f"needs_hardware: {offenders}")


def test_an_unlisted_test_cannot_be_marked() -> None:
    with pytest.raises(KeyError, match="UNAVAILABLE_HARDWARE"):
        needs_hardware("tests/test_x.py::test_not_listed")
    listed = UNAVAILABLE_HARDWARE[0].test
    assert entry(listed) is UNAVAILABLE_HARDWARE[0]
    assert excused(listed) and excused(listed + "[fp16]") and not excused(listed + "_other")


def test_the_summary_names_each_test_what_it_needs_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert hardware.main() == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == summary()
    for item in UNAVAILABLE_HARDWARE:
        assert f"  {item.test}" in printed and f"    needs {item.hardware}" in printed
