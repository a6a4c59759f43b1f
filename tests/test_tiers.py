"""Issue 38: every test has exactly one tier, set in one place (tests/support/tiers.py) from the
fixtures it uses and the support modules its file imports."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.support import tiers


class _Item:
    """What tiers.tier_of reads of a collected test."""

    def __init__(self, fixtures: tuple[str, ...], module: Any, slow: bool = False) -> None:
        self.fixturenames = fixtures
        self.module = module
        self._slow = slow

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self._slow else None


def _module(**names: Any) -> types.ModuleType:
    module = types.ModuleType("tests.fake")
    vars(module).update(names)
    return module


def _from(support: str) -> Any:
    def helper() -> None: ...

    helper.__module__ = support
    return helper


@pytest.mark.parametrize(("fixtures", "module", "slow", "tier"), [
    (("ssh_device", "tmp_path"), _module(), False, "system"),
    (("tmp_path",), _module(fleet_or_skip=_from("tests.support.fleet_devices")), False, "system"),
    (("arm_device",), _module(), False, "system"),
    (("tmp_path",), _module(model=_from("tests.support.zoo")), False, "corpus"),
    (("digits",), _module(), False, "integration"),
    (("tmp_path",), _module(run_cli=_from("tests.support.cli")), False, "integration"),
    (("tmp_path",), _module(), True, "integration"),
    (("tmp_path",), _module(), False, "unit"),
    (("ssh_device", "digits"), _module(model=_from("tests.support.zoo")), True, "system"),
])
def test_a_test_gets_its_tier_from_what_it_uses(fixtures: tuple[str, ...], module: Any,
                                                slow: bool, tier: str) -> None:
    assert tiers.tier_of(_Item(fixtures, module, slow)) == tier  # type: ignore[arg-type]


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        found = [m.name for m in item.iter_markers() if m.name in tiers.TIERS]
        assert len(found) == 1, (item.nodeid, found)
