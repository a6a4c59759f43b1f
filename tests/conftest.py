"""Shared pytest fixtures: a real sshd device, a digits CNN trained here, isolated edge dirs.

Tests must not depend on each other's order (CI runs them shuffled by pytest-randomly) nor on
state outside the session. So each test module gets a device and an edge home of its own:

* ``EDGE_LOCAL_DEVICE``: a fresh embedded local device directory per module;
* ``EDGE_CACHE_DIR``: per module, with its own ``results/`` (what ``edge bench --baseline
  last`` reads) and the content-addressed caches (``convert/``, ``reference/``, ``wheels/``)
  linked in, kept between runs in the test data cache (tests.support.kept), so a conversion
  is done once, not once per run;
* ``ssh_device``: the session's sshd, with edgeuser's home emptied for each module.

Module-scoped fixtures of a test module (a deployed bundle, say) are shared by its tests in any
order; a test that checks device state changed by such a fixture must look only at what it did
itself (e.g. compare before and after).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.digits import DigitsModel, kept_digits
from tests.support.kept import data_root, keeping_caches
from tests.support.sshd import SSHDevice, empty_home, running_device

pytest_plugins = ["pytester", "tests.support.ci", "tests.support.arm_fixtures",
                  "tests.support.tiers", "tests.support.parallel"]

SHARED_CACHES = ("convert", "reference", "wheels")  # content-addressed: safe to share
ISOLATED_VARIABLES = ("EDGE_CACHE_DIR", "EDGE_LOCAL_DEVICE")


@pytest.fixture(scope="session")
def edge_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This session's temp dir for edge: the shared caches, then one folder per module.

    With ``EDGE_TEST_KEEP_CACHES=1`` the shared caches are kept between runs in the test data
    cache (their keys cover the content, the recipe, the converters' versions and the code
    that converts); by default they start empty in this session's temp dir."""
    root = tmp_path_factory.mktemp("edge-home")
    kept = keeping_caches()
    for name in SHARED_CACHES:
        where = data_root() / "edge-cache" / name if kept else root / "cold" / name
        where.mkdir(parents=True, exist_ok=True)
        (root / "shared").mkdir(exist_ok=True)
        (root / "shared" / name).symlink_to(where, target_is_directory=True)
    return root


@pytest.fixture(scope="module", autouse=True)
def isolated_edge_dirs(edge_home: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """This module's EDGE_CACHE_DIR (own results, shared conversions) and EDGE_LOCAL_DEVICE."""
    here = _fresh(edge_home / request.module.__name__)
    cache = here / "cache"
    cache.mkdir(parents=True)
    for name in SHARED_CACHES:
        (cache / name).symlink_to(edge_home / "shared" / name, target_is_directory=True)
    saved = {key: os.environ.get(key) for key in ISOLATED_VARIABLES}
    os.environ["EDGE_CACHE_DIR"] = str(cache)
    os.environ["EDGE_LOCAL_DEVICE"] = str(here / "local-device")
    yield here
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3`` ... when a module's fixtures were set up before in
    this process: pytest sets them up again when another module's tests ran in between (a
    scheduler handing out single tests did; tests/support/parallel.py hands out modules)."""
    found, count = path, 1
    while found.exists():
        count += 1
        found = path.with_name(f"{path.name}-{count}")
    return found


@pytest.fixture(scope="session")
def ssh_server() -> Iterator[SSHDevice]:
    """A real OpenSSH sshd on 127.0.0.1 serving edgeuser, with a device Python venv."""
    with running_device() as device:
        yield device


@pytest.fixture(scope="module")
def ssh_device(ssh_server: SSHDevice) -> SSHDevice:
    """The session's sshd device, its home emptied for this module (no other module's releases)."""
    empty_home(ssh_server)
    return ssh_server


@pytest.fixture(scope="session")
def digits_model(tmp_path_factory: pytest.TempPathFactory) -> DigitsModel:
    """A CNN trained on scikit-learn's digits, exported to ONNX: once, kept in the test data
    cache (tests.support.kept) and copied here."""
    return kept_digits(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="session")
def digits(digits_model: DigitsModel) -> DigitsModel:
    """The session's digits model (modules may wrap it in a ``digits`` fixture of their own)."""
    return digits_model
