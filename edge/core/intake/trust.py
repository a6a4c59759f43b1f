"""Model files that would run code when read are refused unless ``--trust-model-code``.

Read as data, before any framework loader: a PyTorch file must be TorchScript whose code calls
no torch.from_file (a pickle goes only through torch's weights-only unpickler,
edge.core.intake.pytorch); a Keras file's model config (the H5's ``model_config`` attribute, a
.keras zip's config.json) must hold no Lambda layer, no TFOpLambda that calls file, Python or
debugging functions, and no class from a module outside Keras and TensorFlow; a SavedModel's
graph and functions no op of ``edge.core.intake.tfgraph.RISKY_TF_OPS``. A .tflite runs no code
of its own: LiteRT has no kernel for a custom or select-TF op unless the user loads one.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edge.core.docfile import check_depth, loads
from edge.core.errors import UsageError, first_line
from edge.core.extras import require
from edge.core.intake.pytorch import check_torch
from edge.core.intake.tfgraph import risky_ops

__all__ = ["OPT_IN", "refuse_model_code"]

#: The flag that lets edge read a model that runs code.
OPT_IN = "--trust-model-code"

#: Module roots a Keras config may name a class from (Keras 3's "module" keys).
_KERAS_MODULES = ("keras", "tf_keras", "tensorflow")

#: What a TFOpLambda may not call: files, Python, printing, summaries, debugging, datasets,
#: checkpoints, lookup tables (read from files), raw ops (WriteFile...), also under compat.v1.
_RISKY_ROOTS = ("io.", "gfile.", "data.", "summary.", "debugging.", "saved_model.", "train.",
                "raw_ops.", "lookup.", "distribute.", "autograph.", "sysconfig.", "py_function",
                "numpy_function", "print")
_RISKY_TF_CALLS = (*_RISKY_ROOTS, *(f"compat.v1.{r}" for r in _RISKY_ROOTS),
                   "compat.v1.py_func", "compat.v1.Print", "compat.v1.read_file",
                   "compat.v1.write_file", "compat.v1.matching_files")

#: The most config JSON a .keras zip may declare (a model's config is kilobytes).
_MAX_CONFIG_BYTES = 64 << 20


def refuse_model_code(source: Path, kind: str) -> None:
    """UsageError (one line naming the risk and OPT_IN) when reading ``source`` of ``kind``
    would run code from the file; nothing for a kind that runs none."""
    if kind == "torch":
        check_torch(source)
    elif kind in ("keras", "savedmodel"):
        require("tflite", "tf2onnx", "tensorflow", why=f"{source}: reading {kind} models")
        (_check_keras if kind == "keras" else _check_savedmodel)(source)


def _refuse(source: Path, what: str) -> UsageError:
    return UsageError(f"{source}: {what}: reading it would run code from the file; edge "
                      f"refuses it unless you pass {OPT_IN} for a model you trust")


def _check_savedmodel(folder: Path) -> None:
    try:
        ops = risky_ops(folder)
    except ValueError as exc:
        raise UsageError(f"{folder}: saved_model.pb is not a SavedModel ({exc}); edge reads "
                         f"only a SavedModel whose ops it can check, unless you pass {OPT_IN}"
                         ) from None
    if ops:
        raise _refuse(folder, f"its graph runs {', '.join(ops)} (files, Python or the network)")


def _check_keras(source: Path) -> None:
    config = _keras_config(source)
    why = next(_risky_layers(config), None) if config is not None else None
    if why:
        raise _refuse(source, why)


def _keras_config(source: Path) -> Any:
    """The model config of an H5 or .keras file (None when it has none: weights only)."""
    try:
        text = _h5_config(source) if _is_hdf5(source) else _zip_config(source)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{source}: cannot read its model config ({first_line(exc)})") from None
    if text is None:
        return None
    data = loads(text, "json", str(source))
    check_depth(data, str(source))
    return data


def _is_hdf5(source: Path) -> bool:
    with open(source, "rb") as handle:
        return handle.read(8) == b"\x89HDF\r\n\x1a\n"


def _h5_config(source: Path) -> str | None:
    import h5py  # with the tflite extra (Keras's own reader)

    with h5py.File(source, "r") as handle:
        value = handle.attrs.get("model_config")
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _zip_config(source: Path) -> str | None:
    with zipfile.ZipFile(source) as archive:
        if "config.json" not in archive.namelist():
            return None
        if archive.getinfo("config.json").file_size > _MAX_CONFIG_BYTES:
            raise ValueError("config.json is larger than 64 MB")
        return archive.read("config.json").decode("utf-8")


def _risky_layers(config: Any) -> Iterator[str]:
    """Why each object of the config runs code: a Lambda, a risky TFOpLambda, a foreign
    module (walked without recursion; check_depth bounded the config)."""
    stack = [config]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack += value
        elif isinstance(value, dict):
            why = _risky_object(value)
            if why:
                yield why
            stack += list(value.values())


def _risky_object(value: dict[str, Any]) -> str | None:
    kind, config = value.get("class_name"), value.get("config")
    name = config.get("name", "?") if isinstance(config, dict) else "?"
    if kind == "Lambda":
        return f"a Lambda layer ('{name}') holds Python code"
    if kind == "TFOpLambda" and isinstance(config, dict):
        call = str(config.get("function", ""))
        if call.startswith(_RISKY_TF_CALLS):
            return f"a TFOpLambda layer ('{name}') calls tf.{call}"
    module = value.get("module")
    if isinstance(module, str) and module.split(".")[0] not in _KERAS_MODULES:
        return f"its config names a class from module '{module}'"
    return None

