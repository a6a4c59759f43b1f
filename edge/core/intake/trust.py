"""Model files that would run code when read are refused unless ``--trust-model-code``.

Read as data, before any framework loader: a PyTorch file must be TorchScript whose code calls
only PyTorch's compute ops (a pickle goes only through torch's weights-only unpickler,
edge.core.intake.pytorch); a Keras file's model configs (the H5's ``model_config`` attribute,
found as h5py finds it, after a user block too; a .keras zip's config.json; both for a file
that is both) must hold no Lambda layer, no op layer (TFOpLambda, SlicingOpLambda,
ClassMethod, InstanceMethod/Property) naming anything but tensor math, and no class from a
module outside Keras and TensorFlow; a SavedModel's graph and functions no op of
``edge.core.intake.tfgraph.RISKY_TF_OPS`` (edge.core.intake.tfgraph.risky_ops). A .tflite runs
no code of its own: LiteRT has no kernel for a custom or select-TF op unless the user loads
one.
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

#: Namespaces of TensorFlow whose functions an op layer (TFOpLambda, SlicingOpLambda) may call:
#: tensor math only (``tf.math.add``, ``tf.nn.relu``, ``x + y`` as ``__operators__.add``...).
_TF_NAMESPACES = ("math.", "nn.", "linalg.", "image.", "signal.", "bitwise.", "__operators__.",
                  "random.", "sparse.", "ragged.", "strings.", "dtypes.")

#: Top-level TensorFlow functions an op layer may call (array and math ops).
_TF_FUNCTIONS = frozenset("""
abs acos acosh add add_n argmax argmin argsort asin asinh atan atan2 atanh boolean_mask
broadcast_to cast ceil clip_by_norm clip_by_value complex concat constant convert_to_tensor cos
cosh cumsum divide dynamic_partition dynamic_stitch einsum equal exp expand_dims eye fill
floor floordiv gather gather_nd greater greater_equal identity identity_n less less_equal
linspace logical_and logical_not logical_or matmul maximum meshgrid minimum multiply negative
norm not_equal one_hot ones ones_like pad pow range rank realdiv reduce_all reduce_any
reduce_logsumexp reduce_max reduce_mean reduce_min reduce_prod reduce_std reduce_sum
reduce_variance repeat reshape reverse roll round rsqrt scatter_nd searchsorted sequence_mask
shape sigmoid sign sin sinh size slice sort split sqrt square squeeze stack stop_gradient
strided_slice subtract tan tanh tensor_scatter_nd_add tensor_scatter_nd_update tile transpose
truediv truncatediv unique unstack where zeros zeros_like
""".split())

#: Ragged/sparse tensor methods and properties tf_keras wraps in layers (InstanceMethod,
#: InstanceProperty, ClassMethod): tf_keras's own list, nothing else is resolved.
_TENSOR_ATTRS = frozenset("""
values flat_values row_splits nested_row_splits value_rowids nested_value_rowids nrows
row_starts row_limits row_lengths nested_row_lengths bounding_shape with_values
with_flat_values with_row_splits_dtype merge_dims to_tensor to_sparse indices dense_shape
""".split())
_TENSOR_CLASSES = frozenset({"RaggedTensor", "SparseTensor"})

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
    why = next((w for c in _keras_configs(source) for w in _risky_layers(c)), None)
    if why:
        raise _refuse(source, why)


def _keras_configs(source: Path) -> list[Any]:
    """The model configs of an H5 or .keras file: what h5py finds (a superblock after a user
    block too) and what a zip holds; a file that is both is checked as both (Keras's loaders
    pick by the file name, h5py or the zip reader). An empty list: weights only."""
    try:
        hdf5, zipped = _is_hdf5(source), zipfile.is_zipfile(source)
        texts = [_h5_config(source) if hdf5 else None, _zip_config(source) if zipped else None]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{source}: cannot read its model config ({first_line(exc)})") from None
    if not (hdf5 or zipped):
        raise UsageError(f"{source}: cannot read its model config (neither HDF5 nor a zip)")
    return [_parsed(text, source) for text in texts if text is not None]


def _parsed(text: str, source: Path) -> Any:
    data = loads(text, "json", str(source))
    check_depth(data, str(source))
    return data


def _is_hdf5(source: Path) -> bool:
    """Whether h5py (so Keras) reads ``source`` as HDF5: its superblock at offset 0 or after
    a user block (512, 1024, ... bytes)."""
    import h5py  # with the tflite extra (Keras's own reader)

    return bool(h5py.is_hdf5(str(source)))


def _h5_config(source: Path) -> str | None:
    import h5py

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
    config = config if isinstance(config, dict) else {}
    name = config.get("name", "?")
    if kind == "Lambda":
        return f"a Lambda layer ('{name}') holds Python code"
    why = _risky_op_layer(str(kind), config)
    if why:
        return f"a {kind} layer ('{name}') {why}"
    module = value.get("module")
    if isinstance(module, str) and module.split(".")[0] not in _KERAS_MODULES:
        return f"its config names a class from module '{module}'"
    return None


def _risky_op_layer(kind: str, config: dict[str, Any]) -> str | None:
    """Why a tf_keras op layer (a TensorFlow function, class method or tensor attribute named
    in the config and resolved by name when loaded) may run more than tensor math."""
    if kind in ("TFOpLambda", "SlicingOpLambda"):
        call = str(config.get("function", ""))
        return None if _plain_tf_call(call) else f"calls tf.{call}"
    if kind == "ClassMethod":
        cls, method = str(config.get("cls_symbol", "")), str(config.get("method_name", ""))
        plain = cls in _TENSOR_CLASSES and method.startswith("from_") and method.isidentifier()
        return None if plain else f"calls tf.{cls}.{method}"
    if kind in ("InstanceMethod", "InstanceProperty"):
        attr = str(config.get("attr_name", ""))
        return None if attr in _TENSOR_ATTRS else f"reads the tensor's '{attr}'"
    return None


def _plain_tf_call(call: str) -> bool:
    """Whether ``call`` (a name under tf., maybe under compat.v1./compat.v2.) is tensor math."""
    for prefix in ("compat.v1.", "compat.v2."):
        call = call.removeprefix(prefix)
    if call.startswith(_TF_NAMESPACES):
        return all(part.isidentifier() for part in call.split("."))
    return call in _TF_FUNCTIONS
