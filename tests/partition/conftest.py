"""Fixtures for the partition tests: a trained split-friendly CNN, split at every useful cut."""

from __future__ import annotations

import pytest

from tests.support.splitnet import SplitNet, kept_splitnet


@pytest.fixture(scope="session")
def splitnet(tmp_path_factory: pytest.TempPathFactory) -> SplitNet:
    """A CNN trained on lfw_subset frames (3x96x96 in, 2 classes out), once and kept in the
    test data cache (tests.support.kept)."""
    return kept_splitnet(tmp_path_factory.mktemp("splitnet"))
