"""What every intake path shares: accepted kinds, the opset, example inputs, a converter check."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from edge.core.cache import cache_key
from edge.core.errors import UsageError

Shapes = dict[str, tuple[int, ...]]

log = logging.getLogger("edge")

#: File suffix -> source kind; a directory holding saved_model.pb is a SavedModel.
SUFFIXES = {".onnx": "onnx", ".tflite": "tflite", ".keras": "keras", ".h5": "keras",
            ".hdf5": "keras", ".pt": "torch", ".pth": "torch", ".jit": "torch"}

ACCEPTED = ".onnx, .tflite, .keras, .h5, .pt, .pth, .jit (TorchScript), or a SavedModel directory"

OPSET = 17

DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")

TIMEOUT_S = 900.0
#: How the failure of a conversion child killed by a signal reads (never remembered).
STOPPED = "stopped by signal"


def example(shape: Sequence[int], dtype: str) -> np.ndarray:
    """Seeded example data: small non-negative ints for index-like inputs, normal floats else."""
    rng = np.random.default_rng(0)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.integers(0, 2, size=tuple(shape)).astype(bool)
    if kind in "iu":
        return rng.integers(0, 2, size=tuple(shape)).astype(dtype)
    return rng.standard_normal(tuple(shape)).astype(dtype)


_VERSION = "1"  # bump when the conversion changes, to invalidate cached references

_TF = ("tf2onnx", "tensorflow", "tf-keras", "ai-edge-litert", "onnx")

#: distributions whose versions key the cached reference of each source kind
#: (onnxruntime for ONNX too: whether it loads a pinned model decides which If branches stay)
_CONVERTERS = {"onnx": ("onnx", "onnxruntime"), "tflite": (*_TF, "tflite2onnx", "onnxruntime"),
               "keras": _TF, "savedmodel": _TF, "torch": ("torch", "onnx")}


class NoOnnxReference(UsageError):
    """No converter made an ONNX model that reproduces the source (the message says why)."""


def cached_path(source: Path, workdir: Path, kind: str, pins: Shapes,
                 dtypes: Mapping[str, str], values: Mapping[str, str] | None = None) -> Path:
    """Where the reference for this source content and these options (``values``: --arg)
    lives in workdir."""
    digest = hashlib.sha256()
    extra = [sorted(values.items())] if values else []  # keys made without --arg stay valid
    key = cache_key(kind, sorted(pins.items()), sorted(dtypes.items()), *extra, recipe=_VERSION,
                    converters=_CONVERTERS[kind])
    digest.update(key.encode())
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    for path in files:
        digest.update(str(path.relative_to(source) if source.is_dir() else "").encode())
        with open(path, "rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):  # type: ignore[misc]
                digest.update(block)
    return workdir / f"{source.stem or 'model'}.{kind}-{digest.hexdigest()[:16]}.onnx"


def usable_entry(out: Path) -> bool:
    """Whether the cached reference ``out`` is there and reads as a model with inputs and
    outputs. A broken one (an older edge's half-write on a full disk, a crash) is removed, with
    a warning, so that it is made again: a cache entry is never trusted just for existing."""
    if not out.is_file():
        return False
    try:
        graph = onnx.load(str(out), load_external_data=False).graph
        whole = bool(graph.input) and bool(graph.output)
    except Exception:  # noqa: BLE001 - onnx/protobuf raise several types for a torn file
        whole = False
    if not whole:
        log.warning("%s: a broken cache entry (unreadable); making it again", out)
        out.unlink(missing_ok=True)
    return whole


def read_check(path: Path) -> tuple[dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Feeds and the source's outputs, written by the child as in/NAME and out/INDEX/NAME."""
    with np.load(path, allow_pickle=False) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in/")}
        outs = sorted((int(k.split("/")[1]), k.split("/", 2)[2], data[k])
                      for k in data.files if k.startswith("out/"))
    return feeds, [(name, value) for _, name, value in outs]
