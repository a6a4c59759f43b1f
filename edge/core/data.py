"""Calibration and evaluation data: .npy, .npz keyed by input name, or a folder of images.

Axis 0 indexes samples; a sample gets a batch dimension of 1 when it has one dimension fewer
than the model input, and a 0-d input (a scalar such as a sample rate) takes one value per
sample: shape [N] (or [N, 1]). Integer and bool inputs take integer data, or floats holding
whole numbers; float data must be finite and within +/-1e18. ``--eval`` files carry labels
under the key ``labels``.

Arrays are read by a bounded reader: the .npy header (or each .npz member's) is read first and
the bytes it declares are compared with the bytes the file or zip member really holds and with
MAX_DATA_BYTES, before anything is allocated; so are its samples (at most MAX_SAMPLES) and its
values, zero dimensions left out (a shape (10**18, 0) declares 0 bytes). A sample of no values
is refused. An .npz's other members are never read. An image that is no regular file (a FIFO)
is refused before it is opened.
"""

from __future__ import annotations

import hashlib
import math
import warnings
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npy_format

from edge.core.errors import UsageError
from edge.core.units import size_text
from edge.core.values import Dataset, ModelInfo, TensorSpec

__all__ = ["SyntheticDataWarning", "dataset_digest", "load_dataset", "synthetic_dataset"]

#: Most bytes one data file's arrays may declare (all samples are held in memory at once).
MAX_DATA_BYTES = 2 << 30
#: Most members an .npz may list (one per model input, plus labels).
MAX_NPZ_MEMBERS = 1024
#: Most samples one data file may hold (each becomes a feed of its own, a few hundred bytes).
MAX_SAMPLES = 1_000_000
MAX_MAGNITUDE = 1e18  # no real input is larger; its square overflows float32 in comparisons
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".webp")


class SyntheticDataWarning(UserWarning):
    """Calibration fell back to random data: int8 scales will not match real inputs."""


def load_dataset(path: str | Path, model: ModelInfo, *, want_labels: bool = False) -> Dataset:
    """Load a data file for ``model``; raise UsageError naming what is wrong."""
    path = Path(path)
    if path.is_dir():
        arrays, labels = _load_images(path, model), None
    elif not path.is_file():
        raise UsageError(f"data file {path} does not exist")
    elif path.suffix == ".npy":
        arrays, labels = _load_npy(path, model), None
    elif path.suffix == ".npz":
        arrays, labels = _load_npz(path, model)
    else:
        raise UsageError(f"{path}: data must be .npy, .npz or a folder of images")
    feeds = _to_feeds(arrays, model, path)
    if labels is not None and len(labels) != len(feeds):
        raise UsageError(f"{path}: 'labels' has {len(labels)} entries for {len(feeds)} samples")
    labels = _class_ids(labels, path) if want_labels and labels is not None else None
    return Dataset(feeds=feeds, labels=labels, source=str(path))


def synthetic_dataset(model: ModelInfo, count: int = 64, seed: int = 0) -> Dataset:
    """Uniform [0, 1) samples, warned: only a stand-in when no calibration data is given."""
    warnings.warn(
        "no --calib data: calibrating on synthetic uniform [0,1) inputs; int8 accuracy on real "
        "data is unknown. Give --calib with real samples.",
        SyntheticDataWarning,
        stacklevel=2,
    )
    rng = np.random.default_rng(seed)
    feeds = tuple(
        {s.name: _random(rng, s) for s in model.inputs} for _ in range(count)
    )
    return Dataset(feeds=feeds, source="synthetic uniform [0,1)", synthetic=True)


def dataset_digest(data: Dataset) -> str:
    """A content hash of the samples, for caching conversions."""
    digest = hashlib.sha256()
    for feed in data.feeds:
        for name in sorted(feed):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(feed[name]).tobytes())
    return digest.hexdigest()


def _class_ids(labels: np.ndarray, path: Path) -> np.ndarray:
    """Class ids from [N] or [N, 1] ids, or [N, K > 1] one-hot/scores (reduced by argmax)."""
    if labels.ndim == 2:
        labels = labels[:, 0] if labels.shape[1] == 1 else labels.argmax(axis=1)
    if labels.ndim != 1:
        raise UsageError(f"{path}: 'labels' must be [N] class ids or [N, K] one-hot, "
                         f"got shape {list(labels.shape)}")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.issubdtype(labels.dtype, np.floating) or np.any(labels != np.round(labels)):
            raise UsageError(f"{path}: 'labels' must be integer class ids, got {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise UsageError(f"{path}: 'labels' must be class ids 0, 1, ...; "
                         f"{int(np.sum(labels < 0))} are negative (e.g. {labels.min()})")
    return labels.astype(np.int64)


def _random(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    """Uniform [0, 1) floats; 0/1 for integer and bool inputs (valid ids, masks and flags).

    A 0-d input gets a 0-d array, never a numpy scalar (ONNX Runtime refuses scalars).
    """
    shape = spec.static_shape
    if np.dtype(spec.dtype).kind in "iub":
        return np.asarray(rng.integers(0, 2, size=shape)).astype(spec.dtype)
    return np.asarray(rng.random(shape, dtype=np.float32)).astype(spec.dtype)


def _load_npy(path: Path, model: ModelInfo) -> dict[str, np.ndarray]:
    if len(model.inputs) != 1:
        names = ", ".join(s.name for s in model.inputs)
        raise UsageError(f"{path}: the model has {len(model.inputs)} inputs ({names}); "
                         "give an .npz keyed by input name")
    return {model.inputs[0].name: _read_array(path)}


def _read_array(path: Path) -> np.ndarray:
    try:
        with open(path, "rb") as fh:
            return _bounded_array(fh, path.stat().st_size, str(path), MAX_DATA_BYTES)
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{path}: not a readable .npy array ({exc})") from None
    except MemoryError:
        raise UsageError(f"{path}: too large to hold in this host's memory") from None


def _bounded_array(fh: IO[bytes], size: int, where: str, budget: int) -> np.ndarray:
    """The .npy array in ``fh`` (``size`` bytes) once its header's claim is checked."""
    declared = _declared_bytes(fh, size, where, budget)
    array: np.ndarray = npy_format.read_array(fh, allow_pickle=False)
    if array.nbytes != declared:
        raise UsageError(f"{where}: holds {size_text(array.nbytes)}, not the "
                         f"{size_text(declared)} its header declares")
    return array


def _declared_bytes(fh: IO[bytes], size: int, where: str, budget: int) -> int:
    """The bytes the .npy header at ``fh`` declares, refused when more than the ``size`` the
    file holds or than ``budget``; ``fh`` is left at the header's start."""
    start = fh.tell()
    shape, dtype = _header(fh, where)
    if any(d < 0 for d in shape):
        raise UsageError(f"{where}: its header declares a negative dimension {list(shape)}")
    declared = math.prod(shape) * dtype.itemsize
    held = size - (fh.tell() - start)
    if declared > held:
        raise UsageError(f"{where}: its header declares {list(shape)} {dtype} "
                         f"({size_text(declared)}) but it holds {size_text(max(held, 0))}")
    if declared > budget:
        raise UsageError(f"{where}: {size_text(declared)} of data is more than edge reads "
                         f"({size_text(MAX_DATA_BYTES)} per file); give fewer samples")
    _check_counts(shape, where)
    fh.seek(start)
    return declared


def _check_counts(shape: tuple[int, ...], where: str) -> None:
    """Refuse more than MAX_SAMPLES samples, or more values (zero dims left out) than the
    budget holds at one byte each: a shape with a 0 in it declares 0 bytes, whatever else
    it claims, and edge makes one feed per sample."""
    if shape and shape[0] > MAX_SAMPLES:
        raise UsageError(f"{where}: its header declares {shape[0]:,} samples; edge reads at "
                         f"most {MAX_SAMPLES:,} per file")
    if math.prod(d for d in shape if d) > MAX_DATA_BYTES:
        raise UsageError(f"{where}: its header declares shape {list(shape)}, more values than "
                         f"edge reads ({MAX_DATA_BYTES:,} per file)")


def _header(fh: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an .npy header (format 1.0 or 2.0); nothing after it is read."""
    version = npy_format.read_magic(fh)
    if version not in ((1, 0), (2, 0)):
        raise UsageError(f"{where}: .npy format {version[0]}.{version[1]} (a structured array "
                         "with unicode field names); save plain numbers with numpy.save")
    read = (npy_format.read_array_header_1_0 if version == (1, 0)
            else npy_format.read_array_header_2_0)
    shape, _, dtype = read(fh)
    if dtype.hasobject:
        raise UsageError(f"{where}: holds Python objects ({dtype}); save numbers")
    return tuple(shape), dtype


def _load_npz(path: Path, model: ModelInfo) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    try:
        with zipfile.ZipFile(path) as archive:
            data = _npz_arrays(archive, path, [s.name for s in model.inputs])
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile,
            NotImplementedError, RuntimeError) as exc:  # an unknown method, an encrypted member
        raise UsageError(f"{path}: not a readable .npz archive ({exc})") from None
    except MemoryError:
        raise UsageError(f"{path}: too large to hold in this host's memory") from None
    labels = data.pop("labels", None)
    return {s.name: data[s.name] for s in model.inputs}, labels


def _npz_arrays(archive: zipfile.ZipFile, path: Path, names: list[str]) -> dict[str, np.ndarray]:
    """The members for ``names`` (and ``labels``), each header checked against the member's
    size and the file's budget before it is read; other members are not read."""
    infos = archive.infolist()
    if len(infos) > MAX_NPZ_MEMBERS:
        raise UsageError(f"{path}: {len(infos):,} members; an .npz holds one array per model "
                         f"input and labels (at most {MAX_NPZ_MEMBERS})")
    members = {_npz_key(i.filename): i for i in infos}
    missing = [n for n in names if n not in members]
    if missing:
        raise UsageError(f"{path}: no array for input(s) {', '.join(missing)}; "
                         f"keys found: {', '.join(sorted(members)[:20]) or 'none'}")
    budget, data = MAX_DATA_BYTES, {}
    for name in [n for n in (*names, "labels") if n in members]:
        with archive.open(members[name]) as fh:
            where = f"{path}: member {name}"
            data[name] = _bounded_array(fh, members[name].file_size, where, budget)
        budget -= data[name].nbytes
    return data


def _npz_key(member: str) -> str:
    """The key numpy gives a member: its name without ``.npy``."""
    return member[:-4] if member.endswith(".npy") else member


def _load_images(folder: Path, model: ModelInfo) -> dict[str, np.ndarray]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(files) > MAX_SAMPLES:
        raise UsageError(f"{folder}: {len(files):,} images; edge reads at most {MAX_SAMPLES:,}")
    strange = next((p for p in files if not p.is_file()), None)
    if strange is not None:  # opening a FIFO waits for a writer forever
        raise UsageError(f"{strange} is not a regular file (a FIFO, socket, device or "
                         "folder?); refusing to open it")
    if not files:
        raise UsageError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) in the folder")
    if len(model.inputs) != 1:
        raise UsageError(f"{folder}: a folder of images feeds one-input models only")
    spec = model.inputs[0]
    return {spec.name: np.stack([_read_image(p, spec) for p in files])}


def _read_image(path: Path, spec: TensorSpec) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise UsageError("reading image folders needs Pillow: pip install 'edge[images]'") from None
    shape = spec.static_shape
    if len(shape) != 4:
        raise UsageError(f"{path}: images need a 4-D model input, {spec.name} is {spec.shape}")
    channels_first = shape[1] in (1, 3)
    channels, height, width = (shape[1:] if channels_first else (shape[3], shape[1], shape[2]))
    try:
        with Image.open(path) as opened:
            image = opened.convert("L" if channels == 1 else "RGB").resize((width, height))
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # truncated, unknown, bomb
        raise UsageError(f"{path}: not a readable image ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'})") from None
    array = np.asarray(image, dtype=np.float32).reshape(height, width, channels) / 255.0
    return array.transpose(2, 0, 1) if channels_first else array


def _to_feeds(
    arrays: dict[str, np.ndarray], model: ModelInfo, path: Path
) -> tuple[dict[str, np.ndarray], ...]:
    counts = {len(a) if a.ndim else 0 for a in arrays.values()}
    if len(counts) != 1 or 0 in counts:
        raise UsageError(f"{path}: every input needs the same number of samples on axis 0")
    shaped = {s.name: _per_sample(arrays[s.name], s, path) for s in model.inputs}
    count = counts.pop()
    # a[i, ...] keeps a 0-d sample an array (a[i] would be a numpy scalar ORT cannot take)
    return tuple({name: a[i, ...] for name, a in shaped.items()} for i in range(count))


def _per_sample(array: np.ndarray, spec: TensorSpec, path: Path) -> np.ndarray:
    """Reshape [N, *sample] to [N, *model_input_shape] and cast to the input dtype."""
    want = spec.shape
    sample = given = array.shape[1:]
    if len(sample) == len(want) - 1:
        array = array[:, None, ...] if want and _is_batch(want[0]) else array
        sample = array.shape[1:]
    elif not want and sample == (1,):  # [N, 1] for a 0-d input: one value per sample
        array, sample = array.reshape(len(array)), ()
    if len(sample) != len(want) or not all(
        not isinstance(w, int) or w <= 0 or w == s for w, s in zip(want, sample, strict=True)
    ):
        raise UsageError(f"{path}: samples of shape {list(given)} do not fit input "
                         f"'{spec.name}' of shape {list(want)}")
    if 0 in sample:
        raise UsageError(f"{path}: samples of shape {list(given)} hold no values for input "
                         f"'{spec.name}' of shape {list(want)}")
    _check_finite(array, spec, path)
    _check_exact(array, spec, path)
    try:
        return array.astype(spec.dtype, copy=False)
    except (TypeError, ValueError):
        raise UsageError(f"{path}: cannot cast {array.dtype} data to {spec.dtype} "
                         f"for input '{spec.name}'") from None


def _check_exact(array: np.ndarray, spec: TensorSpec, path: Path) -> None:
    """Float data for an integer or bool input must hold whole numbers (0/1 for bool)."""
    kind = np.dtype(spec.dtype).kind
    if array.dtype.kind != "f" or kind not in "iub":
        return
    whole = bool(np.all(np.isfinite(array)) and np.all(array == np.round(array)))
    if whole and kind == "b":
        whole = bool(np.all((array == 0) | (array == 1)))
    if not whole:
        raise UsageError(f"{path}: input '{spec.name}' is {spec.dtype} but its data holds "
                         f"non-{'0/1' if kind == 'b' else 'integer'} {array.dtype} values")


def _check_finite(array: np.ndarray, spec: TensorSpec, path: Path) -> None:
    """Float data holds finite numbers of a sane size: NaN, Inf or 3e38 would make every
    comparison against the original meaningless (a NaN cosine passes nothing and fails nothing)."""
    if array.dtype.kind == "c":
        raise UsageError(f"{path}: input '{spec.name}' has complex {array.dtype} data; give "
                         "real numbers (the imaginary part would be dropped silently)")
    if array.dtype.kind != "f" or array.size == 0:
        return
    bad = ~np.isfinite(array)
    what = "NaN or Inf"
    if not bad.any():
        bad, what = np.abs(array) > MAX_MAGNITUDE, f"beyond +/-{MAX_MAGNITUDE:.0e}"
    if bad.any():
        first = int(np.argmax(bad.reshape(len(array), -1).any(axis=1))) if array.ndim else 0
        raise UsageError(f"{path}: input '{spec.name}' has {int(bad.sum())} of {array.size} "
                         f"values {what} (first in sample {first}); give finite data at "
                         "the scale the model was trained on")


def _is_batch(dim: int | str) -> bool:
    return not isinstance(dim, int) or dim <= 1
