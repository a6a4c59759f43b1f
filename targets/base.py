"""The contract every target implements: convert a reference ONNX model, then load and run it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Protocol

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.values import BenchResult, Dataset, ModelInfo, Origin

__all__ = ["PRECISIONS", "AcceleratorTarget", "ConversionError", "ConvertSettings", "Provision",
           "NodeOutputsTarget", "OriginTarget", "Runner", "ServingTarget", "Runtime", "Target",
           "Capabilities", "check_precision", "missing_modules", "workdir_lock"]

#: Precision names shared by every target. ``int8``: weights and activations int8 (static,
#: calibrated); ``int8-dynamic``: int8 weights, activations quantized at run time; ``bf16``:
#: float weights computed in bfloat16 (the runtime converts them at load).
PRECISIONS = ("int8", "int8-dynamic", "fp16", "bf16", "fp32")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConvertSettings:
    """Options that change a conversion's output (part of its cache key)."""

    calibration: Literal["minmax", "entropy", "percentile"] = "minmax"
    keep_float: tuple[str, ...] = ()  # reference ONNX node names left in float (recovery)
    #: ONNX operator types left in float wherever the target's graph has them, also in ops its
    #: importer made from them (recovery's last rung: int8 only where a product is computed)
    float_ops: tuple[str, ...] = ()
    #: the profile's options for the accelerator this target reaches (``Accelerator.options``
    #: of the one whose runtime is the target's name or runtime), sorted (key, value) pairs:
    #: an NPU's SoC, a compiler's configuration; read them with ``dict(settings.accelerator)``
    accelerator: tuple[tuple[str, str], ...] = ()

    def digest(self) -> str:
        """A short key for cache directories; the default settings give ``default``."""
        if self == ConvertSettings():
            return "default"
        text = f"{self.calibration}|{','.join(sorted(self.keep_float))}"
        if self.float_ops:
            text += "|ops:" + ",".join(sorted(self.float_ops))
        if self.accelerator:
            text += "|" + ",".join(f"{k}={v}" for k, v in sorted(self.accelerator))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, kw_only=True, slots=True)
class Provision:
    """What ``edge deploy --provision`` installs on a device for a runtime (numpy comes too)."""

    requirements: tuple[str, ...]  # pinned as the host verified it: "onnxruntime==1.31.1"
    module: str  # imported on the device to check the install: "ai_edge_litert.interpreter"
    distribution: str  # whose version the device reports: "ai-edge-litert"
    # True: the requirements are installed without their dependencies (fetched with pip
    # download --no-deps, installed with pip install --no-deps), so they list every wheel the
    # runtime needs on the device (numpy excepted: edge's pin); for a runtime whose declared
    # dependencies are its host tools, or carry markers the host would evaluate for itself
    no_deps: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Runtime:
    """Everything about one runtime, declared in its folder ``targets/<name>/`` and registered
    under its name in the ``edge.targets`` entry point group. Every part is declared, ``None``
    where the runtime has none (the parts test, tests/targets/test_parts.py, checks them)."""

    name: str  # as manifests, profiles and the device agent name it
    targets: tuple[tuple[str, str], ...]  # (target name, "module:Class"): converter + loader
    suffixes: tuple[str, ...]  # files its agent loader and profiler open (one owner each)
    agent: str | None  # its device-side loader module (Python 3.8, stdlib + the runtime)
    profiler: str | None  # "module:function" timing each layer of a file (targets.layers)
    provision: Provision | None  # the wheels a device needs, None: edge cannot install it
    label: str  # how reports name it
    colour: str  # its colour in report plots
    note: str = ""  # what a measurement of its artifacts on this host stands for (reports)
    # companions named with more than one suffix part (".npu.bin": the weights a plain
    # read_model of "model.npu.xml" looks for), kept whole on the device as the main file is
    companions: tuple[str, ...] = ()


class ConversionError(Exception):
    """A target could not convert a model; the message says why (one line)."""


def missing_modules(caps: Capabilities) -> str | None:
    """Why a target cannot run here: its declared modules that are not installed, and the extra
    that installs them."""
    absent = [m for m in caps.modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if not absent:
        return None
    return f"{', '.join(absent)} not installed (pip install 'edge[{caps.extra}]')"


#: The file beside a converted artifact holding its notes, written last: its completion mark.
NOTES_SUFFIX = ".notes.json"


def cached_notes(out: Path) -> tuple[str, ...] | None:
    """The notes of a finished artifact (its notes file is written last), else None."""
    try:
        notes = json.loads(out.with_name(out.name + NOTES_SUFFIX).read_text())
    except (OSError, ValueError):
        return None
    return tuple(notes) if out.is_file() else None


@contextlib.contextmanager
def scratch_dir(workdir: Path, prefix: str) -> Iterator[Path]:
    """A private scratch directory inside ``workdir`` (same file system: renames are atomic),
    removed afterwards."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
    except OSError as exc:
        raise ConversionError(f"cannot use workdir {workdir}: {exc}") from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def workdir_lock(workdir: Path) -> Iterator[None]:
    """Serialize conversions of one work directory across threads and processes."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        handle = open(workdir / ".lock", "a")  # noqa: SIM115 - held for the block
    except OSError as exc:
        raise ConversionError(f"cannot use workdir {workdir}: {exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def check_precision(target: Target, precision: str) -> None:
    """Raise ConversionError unless the target offers ``precision``."""
    if precision not in target.caps.precisions:
        raise ConversionError(f"{target.name} has no {precision} path; choose one of "
                              f"{', '.join(target.caps.precisions)}")


class Runner(Protocol):
    """A loaded artifact. Feeds and outputs use the reference model's names and layouts."""

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference model's output order."""
        ...


class Target(Protocol):
    """A runtime plus the converter that produces its artifacts."""

    name: ClassVar[str]
    caps: ClassVar[Capabilities]  # what it can do, declared

    def missing(self) -> str | None:
        """Why this target cannot run on the host (a package is not installed), else None."""
        ...

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = ...,
    ) -> tuple[Path, tuple[str, ...]]:
        """Write the artifact for ``precision`` into ``workdir``; return (file, notes).

        ``workdir`` is a cache directory shared by all precisions of this target for this model,
        calibration set and settings, so one converter run may serve several precisions.
        A target that cannot honour a setting (e.g. keep_float) says so in the notes.
        Raises ConversionError with a one-line reason.
        """
        ...

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> Runner:
        """Load an artifact for running on this host."""
        ...


class AcceleratorTarget(Target, Protocol):
    """A target whose artifacts run on a device's accelerator (``caps.accelerator`` declared):
    ``load`` runs them here the way ``caps.host_runs`` says, to verify them."""

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """The model's operator kinds the accelerator would leave to the CPU (the plan says
        them before converting); None: only a conversion tells."""
        ...

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """The vendor tool's estimate of one inference (``BenchResult.source`` "estimate"),
        None when the vendor offers none."""
        ...


class NodeOutputsTarget(Target, Protocol):
    """A target (``caps.node_outputs`` declared) that runs an artifact keeping every node's
    output, named by the reference ONNX tensor names its converter kept."""

    def node_outputs(self, artifact: Path, model: ModelInfo,
                     feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Tensor name -> its values on each feed (float node outputs only); ``feeds`` are
        the reference ``model``'s."""
        ...


class ServingTarget(Target, Protocol):
    """A target (``caps.serving`` declared) that writes a serving engine's config for its
    artifact, so the engine loads it the way edge verified it."""

    def serving_files(self, artifact: Path, precision: str) -> dict[str, Path]:
        """Bundle-relative name -> file: the config and the artifact laid out for the engine."""
        ...


class OriginTarget(Target, Protocol):
    """A target (``caps.origin_formats`` declared) that converts the user's original file of
    those formats itself (a PyTorch module), the reference ONNX being its fallback."""

    def for_origin(self, origin: Origin) -> Target:
        """This target converting from ``origin`` (the user's file, as intake read it)."""
        ...
