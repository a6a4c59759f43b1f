"""The contract every target implements: convert a reference ONNX model, then load and run it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np

from edge.values import Dataset, ModelInfo

__all__ = ["ConversionError", "Runner", "Target"]


class ConversionError(Exception):
    """A target could not convert a model; the message says why (one line)."""


class Runner(Protocol):
    """A loaded artifact. Feeds and outputs use the reference model's names and layouts."""

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference model's output order."""
        ...


class Target(Protocol):
    """A runtime plus the converter that produces its artifacts."""

    name: ClassVar[str]
    runtime: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]]
    suffix: ClassVar[str]

    def missing(self) -> str | None:
        """Why this target cannot run on the host (a package is not installed), else None."""
        ...

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path
    ) -> tuple[Path, tuple[str, ...]]:
        """Write the artifact for ``precision`` into ``workdir``; return (file, notes).

        ``workdir`` is a cache directory shared by all precisions of this target for this model
        and calibration set, so one converter run may serve several precisions.
        Raises ConversionError with a one-line reason.
        """
        ...

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> Runner:
        """Load an artifact for running on this host."""
        ...
