"""ExecuTorch: ``.pte`` programs lowered to the XNNPACK delegate, fp32 and int8 (PT2E), made from
the reference ONNX read into PyTorch (``targets.executorch.lower``), and run here with
ExecuTorch's own runtime (its C++ bindings), as the device does."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.files import no_space_as
from edge.core.native_log import native_log, stderr_to_log
from edge.core.values import Dataset, ModelInfo, Origin
from targets.base import (
    ConversionError,
    ConvertSettings,
    cached_notes,
    check_precision,
    missing_modules,
    scratch_dir,
)

__all__ = ["FILES", "ExecuTorchRunner", "ExecuTorchTarget"]

DEFAULT_SETTINGS = ConvertSettings()
#: precision -> artifact file name inside the workdir (the workdir encodes the settings).
FILES: dict[str, str] = {"fp32": "model_fp32.pte", "int8": "model_int8.pte"}
_NOTES_SUFFIX = ".notes.json"


class ExecuTorchRunner:
    """A ``.pte`` program's ``forward`` on ExecuTorch's runtime (XNNPACK and portable kernels)."""

    def __init__(self, path: Path, model: ModelInfo, *, threads: int) -> None:
        with _quiet_loggers():
            import torch

            # the C++ bindings alone: executorch.runtime imports them through executorch.exir,
            # the export toolchain (~10 s), which running a program never needs
            from executorch.extension.pybindings import _C

        self._torch = torch
        self._names = [spec.name for spec in model.inputs]
        with _stderr_to_log():  # XNNPACK's cpuinfo reports the sysfs files it missed
            self._program = _C._load_for_executorch(str(path))
            self._program.method_meta("forward")
        self._first = True  # the first run makes XNNPACK's threadpool: cpuinfo talks again

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference's order."""
        # fresh copies: a sample sliced from a batch may carry a 0 stride, which ExecuTorch refuses
        inputs = [self._torch.from_numpy(np.array(feeds[n], order="C", copy=True))
                  for n in self._names]
        if self._first:
            self._first = False
            with _stderr_to_log():
                return [np.asarray(out.numpy()) for out in self._program.forward(inputs)]
        return [np.asarray(out.numpy()) for out in self._program.forward(inputs)]


class ExecuTorchTarget:
    """ExecuTorch with the XNNPACK delegate on the device CPU."""

    name: ClassVar[str] = "executorch"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="executorch", precisions=("fp32", "int8"), suffix=".pte",
        modules=("executorch", "torch", "torchao"), extra="executorch",
        converters=("executorch", "torch", "torchao"), recipe=2, origin_formats=("torch",))

    def __init__(self, origin: Origin | None = None) -> None:
        self._origin = origin  # the user's PyTorch file, converted itself when it exports

    def for_origin(self, origin: Origin) -> ExecuTorchTarget:
        """This target converting the user's PyTorch file (``Origin.format`` "torch")."""
        return ExecuTorchTarget(origin)

    def missing(self) -> str | None:
        """executorch, torch and torchao come with the ``executorch`` extra."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Write (or reuse) this precision's ``.pte`` in ``workdir``; return (file, notes)."""
        check_precision(self, precision)
        out = Path(workdir) / FILES[precision]
        notes = cached_notes(out)
        if notes is not None:
            return out, notes
        with _quiet_loggers():  # torch and executorch: only to convert
            from targets.executorch.lower import lower

        lowered = lower(model, precision, calib, self._origin)
        notes = _notes(precision, lowered, len(calib), settings)
        with no_space_as(out), scratch_dir(Path(workdir), ".executorch-") as scratch:
            partial = scratch / out.name
            partial.write_bytes(lowered.buffer)
            _publish(partial, out, notes)
        return out, notes

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> ExecuTorchRunner:
        """ExecuTorch's runtime on this host (the XNNPACK kernels the device runs)."""
        try:
            return ExecuTorchRunner(artifact, model, threads=threads)
        except RuntimeError as exc:
            raise ConversionError(f"ExecuTorch cannot load {artifact.name}: "
                                  f"{first_line(exc)} (its runtime's own output: "
                                  f"{runtime_log()})") from None


def _notes(precision: str, lowered: Any, samples: int,
           settings: ConvertSettings) -> tuple[str, ...]:
    """What was made, and the operators left outside the XNNPACK delegate."""
    how = ("fp32" if precision == "fp32" else
           f"int8 (PT2E, XNNPACK quantizer: symmetric, per-channel weights, calibrated on "
           f"{samples} samples)")
    notes = [f"{how} .pte lowered to the XNNPACK delegate (ExecuTorch); "
             f"{lowered.delegated} operator(s) inside the delegate",
             f"made from {lowered.source}",
             _outside(lowered.outside)]
    if settings.keep_float:
        notes.append("keep_float is not honoured by the executorch target")
    return tuple(notes)


def _outside(outside: dict[str, int]) -> str:
    """The note naming the operators left to ExecuTorch's portable kernels."""
    if not outside:
        return "outside the XNNPACK delegate: none (every operator is delegated)"
    listed = ", ".join(f"{op} x{count}" for op, count in outside.items())
    return f"outside the XNNPACK delegate (portable kernels): {listed}"


# ---------------------------------------------------------------- quiet imports and loads

#: Loggers that warn when torch, torchao and executorch import: torchao's CUDA kernels missing
#: beside a CPU torch, a deprecated pytree registration.
_NOISY = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """The import-time warnings of ``_NOISY`` stay out of edge's output."""
    loggers = [logging.getLogger(name) for name in _NOISY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def runtime_log() -> Path:
    """Where the runtime's own C++ output goes (XNNPACK's cpuinfo notes on the sysfs files it
    missed): a log to read when something goes wrong, not the terminal."""
    return native_log("executorch")


def _stderr_to_log() -> contextlib.AbstractContextManager[None]:
    """File descriptor 2 appended to ``runtime_log()`` (``edge.core.native_log``)."""
    return stderr_to_log("executorch")


# ---------------------------------------------------------------- cache (atomic, with notes)


def _publish(partial: Path, out: Path, notes: tuple[str, ...]) -> None:
    """Rename the finished artifact into place, then its notes (the completion marker)."""
    tmp_notes = partial.with_name(partial.name + _NOTES_SUFFIX)
    tmp_notes.write_text(json.dumps(list(notes)))
    os.replace(partial, out)
    os.replace(tmp_notes, out.with_name(out.name + _NOTES_SUFFIX))


