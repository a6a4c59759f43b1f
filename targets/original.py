"""The user's own model file as a candidate (``original``): nothing converted, run as it is by
the runtime of its format, verified, timed and chosen like any converted artifact.

It is not in the registry and has no folder: it exists per model, not per runtime, and runs
on the runtime whose target declares the file's format (``Capabilities.formats``). It speaks
the ``Target`` contract so that optimize converts (here: picks the file), verifies, times and
stores it on the same path as every other candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edge.core.capabilities import Capabilities
from edge.core.intake import dropped_branches, dynamic_inputs
from edge.core.values import ORIGINAL, Dataset, ModelInfo, Origin
from targets import get_target, runtime_for_format
from targets.base import ConversionError, ConvertSettings, Runner

__all__ = ["OriginalTarget", "original_target"]

_DEFAULT = ConvertSettings()


@dataclass(frozen=True, kw_only=True, slots=True)
class OriginalTarget:
    """The user's file (``source``) on the runtime of its format (``caps.runtime``)."""

    caps: Capabilities
    source: Path
    notes: tuple[str, ...]
    name: str = ORIGINAL

    def missing(self) -> str | None:
        """Nothing to convert: the runtime's own target says whether it loads here."""
        return get_target(self.caps.runtime).missing()

    def convert(self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
                settings: ConvertSettings = _DEFAULT) -> tuple[Path, tuple[str, ...]]:
        """The user's file itself (no conversion)."""
        if not self.source.is_file():
            raise ConversionError(f"the original file {self.source} is gone")
        return self.source, self.notes

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> Runner:
        """Loaded by its runtime's target, speaking the reference's names and layouts."""
        return get_target(self.caps.runtime).load(artifact, model, threads=threads)


def original_target(origin: Origin, reference: ModelInfo) -> OriginalTarget:
    """The candidate for the user's file ``origin`` (whose reference ONNX is ``reference``).

    An ONNX file with dynamic input dims is taken with those dims pinned (the reference edge
    verifies against): the agent times files on their static shapes, so the user's file as
    it is would be timed on 1-sized dims and look faster than it is.
    """
    runtime = runtime_for_format(origin.format)
    if runtime is None:
        raise ConversionError(f"a {origin.format} model cannot run as it is")
    source = Path(origin.path)
    name = source.name
    notes = [f"your own {name}, run as it is by {runtime} (nothing converted)"]
    if origin.format == "onnx" and _dynamic(source):
        source = Path(reference.path)
        notes = [f"your own {name} with its dynamic input dims pinned to "
                 f"{_shapes(reference)} (as verified and timed), run by {runtime}",
                 *_dropped(source)]
    caps = Capabilities(runtime=runtime, precisions=(reference.precision,),
                        suffix=source.suffix.lower())
    return OriginalTarget(caps=caps, source=source, notes=tuple(notes))


def _dynamic(source: Path) -> bool:
    return bool(dynamic_inputs(source))


def _dropped(reference: Path) -> tuple[str, ...]:
    """The If branches the pinned copy dropped because they cannot run at its dims."""
    return dropped_branches(reference)


def _shapes(model: ModelInfo) -> str:
    return ", ".join(f"{s.name} {list(s.shape)}" for s in model.inputs)
