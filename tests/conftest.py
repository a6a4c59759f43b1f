"""Shared pytest fixtures: a real sshd device, a digits CNN trained here, an isolated cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.digits import DigitsModel, train_digits
from tests.support.sshd import SSHDevice, running_device


@pytest.fixture(scope="session", autouse=True)
def isolated_edge_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Conversion cache and the embedded local device live in this test session's temp dir."""
    root = tmp_path_factory.mktemp("edge-home")
    saved = {k: os.environ.get(k) for k in ("EDGE_CACHE_DIR", "EDGE_LOCAL_DEVICE")}
    os.environ["EDGE_CACHE_DIR"] = str(root / "cache")
    os.environ["EDGE_LOCAL_DEVICE"] = str(root / "local-device")
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def ssh_device() -> Iterator[SSHDevice]:
    """A real OpenSSH sshd on 127.0.0.1 serving edgeuser, with a device Python venv."""
    with running_device() as device:
        yield device


@pytest.fixture(scope="session")
def digits_model(tmp_path_factory: pytest.TempPathFactory) -> DigitsModel:
    """A CNN trained in this session on scikit-learn's digits, exported to ONNX."""
    return train_digits(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="session")
def digits(digits_model: DigitsModel) -> DigitsModel:
    """The session's digits model (modules may wrap it in a ``digits`` fixture of their own)."""
    return digits_model
