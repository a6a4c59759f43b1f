"""Models shipped with edge, addressed as ``sample:NAME`` wherever a model path is accepted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edge.core.errors import UsageError

__all__ = ["SAMPLES", "Sample", "resolve"]

_DIR = Path(__file__).resolve().parents[1] / "samples"
PREFIX = "sample:"


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """A shipped model with its calibration and labelled evaluation data."""

    model: Path
    calib: Path
    eval: Path


SAMPLES = {
    "digits": Sample(model=_DIR / "digits.onnx", calib=_DIR / "digits_calib.npy",
                     eval=_DIR / "digits_eval.npz"),
}


def resolve(source: Path) -> Sample | None:
    """The sample a ``sample:NAME`` source names, None for an ordinary path."""
    text = str(source)
    if not text.startswith(PREFIX):
        return None
    name = text[len(PREFIX):]
    if name not in SAMPLES:
        raise UsageError(f"unknown sample '{name}': choose one of "
                         f"{', '.join(PREFIX + n for n in SAMPLES)}")
    return SAMPLES[name]
