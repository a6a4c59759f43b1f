"""Calibration and evaluation data: .npy, .npz keyed by input name, or a folder of images.

Axis 0 indexes samples; a sample gets a batch dimension of 1 when it has one dimension fewer
than the model input, and a 0-d input (a scalar such as a sample rate) takes one value per
sample: shape [N] (or [N, 1]). Integer and bool inputs take integer data, or floats holding
whole numbers; float data must be finite and within +/-1e18. ``--eval`` files carry labels
under the key ``labels``.
"""

from __future__ import annotations

import hashlib
import warnings
import zipfile
from pathlib import Path

import numpy as np

from edge.core.errors import UsageError
from edge.core.values import Dataset, ModelInfo, TensorSpec

__all__ = ["SyntheticDataWarning", "dataset_digest", "load_dataset", "synthetic_dataset"]

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
        array: np.ndarray = np.load(path, allow_pickle=False)
        return array
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"{path}: not a readable .npy array ({exc})") from None


def _load_npz(path: Path, model: ModelInfo) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {k: archive[k] for k in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: not a readable .npz archive ({exc})") from None
    labels = data.pop("labels", None)
    missing = [s.name for s in model.inputs if s.name not in data]
    if missing:
        raise UsageError(f"{path}: no array for input(s) {', '.join(missing)}; "
                         f"keys found: {', '.join(sorted(data)) or 'none'}")
    return {s.name: data[s.name] for s in model.inputs}, labels


def _load_images(folder: Path, model: ModelInfo) -> dict[str, np.ndarray]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
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
