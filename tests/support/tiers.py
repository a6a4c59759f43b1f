"""Test tiers, set in one place from what a test uses (a pytest plugin of tests/conftest.py).

Every test gets exactly one of four markers:

* ``system``: real devices: an sshd, the emulated aarch64 board, a fleet, an emulated link (a
  fixture of those, or its module starts them itself through their support module);
* ``corpus``: the zoo of real models and the hostile corpora;
* ``integration``: edge end to end on a trained model or through its CLI, or a slow conversion;
* ``unit``: everything else: the fast tier for the edit loop (``pytest -m unit``).

``pytest -m "unit or integration"`` leaves the devices out; the README's test command runs all
four. No test is left out of a tier: the markers select, they never skip.
"""

from __future__ import annotations

from typing import Any

import pytest

TIERS = ("unit", "integration", "system", "corpus")

#: Fixtures that start or reach a real device.
SYSTEM_FIXTURES = frozenset({"ssh_server", "ssh_device", "ssh_probe", "ssh_bundle",
                             "arm_device", "transport", "provisioned", "arm_bundle",
                             "emulated", "fleet_dir"})
#: Support modules that start real devices, fleets or emulated links.
SYSTEM_SUPPORT = frozenset({"tests.support.sshd", "tests.support.fleet_devices",
                            "tests.support.netem", "tests.support.netem_forward",
                            "tests.support.arm_device", "tests.support.split_link",
                            "tests.support.mender_client", "tests.support.cgroups"})
#: Support modules of the zoo and the hostile corpora.
CORPUS_SUPPORT = frozenset({"tests.support.zoo", "tests.support.zoo_run",
                            "tests.support.zoo_check", "tests.support.hostile",
                            "tests.support.hostile_client", "tests.support.hostile_code",
                            "tests.support.hostile_disk", "tests.support.hostile_home",
                            "tests.support.hostile_sizes", "tests.support.hostile_borders"})
#: Fixtures of trained models (edge runs end to end on them).
MODEL_FIXTURES = frozenset({"digits", "digits_model", "other_digits", "splitnet"})
#: Support modules that run edge end to end (its CLI, a subprocess, a trained model).
INTEGRATION_SUPPORT = frozenset({"tests.support.cli", "tests.support.digits",
                                 "tests.support.splitnet", "tests.support.mediapipe",
                                 "tests.support.heavy", "tests.support.base_env"})


def _uses(module: Any) -> set[str]:
    """The tests.support modules whose objects ``module`` imported."""
    return {getattr(value, "__module__", "") or "" for value in vars(module).values()} | {
        getattr(value, "__name__", "") for value in vars(module).values()
        if type(value).__name__ == "module"}


def tier_of(item: pytest.Item) -> str:
    """The tier of one collected test."""
    names = set(getattr(item, "fixturenames", ()))
    module = getattr(item, "module", None)
    used = _uses(module) if module is not None else set()
    if names & SYSTEM_FIXTURES or used & SYSTEM_SUPPORT:
        return "system"
    if used & CORPUS_SUPPORT:
        return "corpus"
    if names & MODEL_FIXTURES or used & INTEGRATION_SUPPORT or item.get_closest_marker("slow"):
        return "integration"
    return "unit"


def pytest_configure(config: pytest.Config) -> None:
    for name in TIERS:
        config.addinivalue_line("markers", f"{name}: a test tier (tests/support/tiers.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item)))


def pytest_report_header(config: pytest.Config) -> str:
    return "tiers: unit, integration, system, corpus (tests/support/tiers.py; -m unit: fast)"
