"""Model intake beyond ONNX: turn TFLite, Keras, SavedModel and PyTorch models into the reference.

The reference is one ONNX file every target converts from. ONNX sources pass through unless
their dims must be pinned or their weights sit in Constant nodes; TensorFlow-family sources are
converted by tf2onnx in a child process (TensorFlow never loads into edge's own process);
PyTorch modules are exported with the TorchScript exporter. Every conversion is checked: the
source and the reference run on the same random inputs and must agree.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge.core.cache import cache_key, cache_root
from edge.core.errors import UsageError, first_line
from edge.core.model import save_onnx_atomic, sha256_file
from edge.core.values import Origin

if TYPE_CHECKING:
    import onnx

__all__ = [
    "ACCEPTED",
    "OPSET",
    "dynamic_inputs",
    "parse_shape_flags",
    "parse_shapes",
    "pin_from_sample",
    "reference_model",
    "source_kind",
    "to_reference",
]

Shapes = dict[str, tuple[int, ...]]

#: File suffix -> source kind; a directory holding saved_model.pb is a SavedModel.
SUFFIXES = {".onnx": "onnx", ".tflite": "tflite", ".keras": "keras", ".h5": "keras",
            ".hdf5": "keras", ".pt": "torch", ".pth": "torch"}
ACCEPTED = ".onnx, .tflite, .keras, .h5, .pt, .pth, or a SavedModel directory"
OPSET = 17
DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")
TIMEOUT_S = 900.0
_VERSION = "1"  # bump when the conversion changes, to invalidate cached references
_TF_KINDS = ("tflite", "keras", "savedmodel")
_TF = ("tf2onnx", "tensorflow", "tf-keras", "ai-edge-litert", "onnx")
#: distributions whose versions key the cached reference of each source kind
_CONVERTERS = {"onnx": ("onnx",), "tflite": _TF, "keras": _TF, "savedmodel": _TF,
               "torch": ("torch", "onnx")}
_PARITY_COSINE = 0.9999
_PARITY_REL = 1e-3


# --- --shape NAME=DIMS[:DTYPE] -----------------------------------------------------------------


def parse_shapes(texts: Sequence[str]) -> Shapes:
    """``--shape NAME=1,3,224,224`` flags (repeatable) as {name: dims}."""
    return parse_shape_flags(texts)[0]


def parse_shape_flags(texts: Sequence[str]) -> tuple[Shapes, dict[str, str]]:
    """``--shape NAME=DIMS[:DTYPE]`` flags as ({name: dims}, {name: dtype}); dtype is optional."""
    shapes: Shapes = {}
    dtypes: dict[str, str] = {}
    for text in texts:
        name, dims, dtype = _parse_one(text)
        if name in shapes:
            raise UsageError(f"--shape {text}: input '{name}' is given twice")
        shapes[name] = dims
        if dtype is not None:
            dtypes[name] = dtype
    return shapes, dtypes


def _parse_one(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """One flag: NAME=DIMS[:DTYPE]; the last '=' splits, so names may contain '='."""
    name, eq, rest = text.rpartition("=")
    if not eq or not name.strip():
        raise UsageError(f"--shape {text!r}: expected NAME=DIMS, e.g. --shape input=1,3,224,224")
    body, colon, dtype = rest.partition(":")
    if colon and dtype.strip() not in DTYPES:
        raise UsageError(f"--shape {text}: unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    parts = [p.strip() for p in body.replace("x", ",").split(",")]
    if not body.strip() or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UsageError(f"--shape {text}: dims must be positive integers separated by commas, "
                         "e.g. --shape input=1,3,224,224")
    return name.strip(), tuple(int(p) for p in parts), (dtype.strip() if colon else None)


# --- the entry point ---------------------------------------------------------------------------


def source_kind(source: Path) -> str:
    """onnx | tflite | keras | savedmodel | torch, from the file suffix (or SavedModel folder)."""
    if source.is_dir():
        if (source / "saved_model.pb").is_file() or (source / "saved_model.pbtxt").is_file():
            return "savedmodel"
        raise UsageError(f"{source}: a folder must be a TensorFlow SavedModel (no saved_model.pb "
                         f"in it); accepted models: {ACCEPTED}")
    if not source.is_file():
        raise UsageError(f"model file {source} does not exist")
    kind = SUFFIXES.get(source.suffix.lower())
    if kind is None:
        raise UsageError(f"{source}: unknown model type {source.suffix or '(no suffix)'!r}; "
                         f"accepted: {ACCEPTED}")
    return kind


def to_reference(
    source: Path, workdir: Path, *, shapes: Mapping[str, Sequence[int]] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> Path:
    """The reference ONNX for ``source``: the file itself, or a converted/fixed copy in workdir.

    ``shapes`` pins dynamic input dims (``--shape``); PyTorch sources need it for every forward
    argument, and ``dtypes`` (default float32) for their non-float ones. Copies are cached in
    ``workdir`` by source content and options. Raises UsageError with a one-line reason.
    """
    source = Path(source)
    kind = source_kind(source)
    pins = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
    types = dict(dtypes or {})
    if kind == "onnx":
        return _fix_onnx(source, workdir, pins)
    _sniff(source, kind)
    out = _cached_path(source, workdir, kind, pins, types)
    if out.is_file():
        return out
    workdir.mkdir(parents=True, exist_ok=True)
    if kind == "torch":
        raw, feeds, expected = _from_torch(source, out, pins, types)
    else:
        raw, feeds, expected = _from_tf(kind, source, out, pins)
    model = _finish(raw, pins, source)
    save_onnx_atomic(model, out)
    _check_parity(out, feeds, expected, source)
    return out


def dynamic_inputs(reference: Path) -> list[str]:
    """Names of the reference's inputs that still have a symbolic or unknown dim."""
    import onnx

    model = onnx.load(str(reference), load_external_data=False)
    return [v.name for v in _graph_inputs(model) if any(d <= 0 for d in _dims(v))]


def pin_from_sample(reference: Path, workdir: Path, feed: Mapping[str, np.ndarray]) -> Path:
    """Pin the reference's dynamic dims to one calibration sample's shapes (a fixed copy)."""
    names = dynamic_inputs(reference)
    pins = {n: tuple(int(d) for d in np.shape(feed[n])) for n in names if n in feed}
    return to_reference(reference, workdir, shapes=pins) if pins else reference


#: Leading bytes by kind: TFLite's flatbuffer identifier sits at offset 4; .keras is a zip.
_MAGIC = {"tflite": (4, (b"TFL3",)), "keras": (0, (b"PK\x03\x04", b"\x89HDF\r\n\x1a\n"))}


def _sniff(source: Path, kind: str) -> None:
    """Reject a file that is plainly not of its suffix's format before starting a converter."""
    if kind not in _MAGIC:
        return
    offset, magics = _MAGIC[kind]
    with open(source, "rb") as handle:
        head = handle.read(offset + 8)[offset:]
    if not any(head.startswith(m) for m in magics):
        raise UsageError(f"{source}: not a valid {kind} file (its header is not a {kind} "
                         f"header); accepted models: {ACCEPTED}")


# --- ONNX: pin dims, move Constant weights into initializers -----------------------------------


def _fix_onnx(source: Path, workdir: Path, pins: Shapes) -> Path:
    """The source itself when nothing needs fixing, else a fixed copy in workdir."""
    from edge.core.model import load_onnx

    model = load_onnx(source)
    _check_pins(model, pins, source)
    if not _needs_fix(model, pins):
        return source
    out = _cached_path(source, workdir, "onnx", pins, {})
    if not out.is_file():
        workdir.mkdir(parents=True, exist_ok=True)
        save_onnx_atomic(_finish(model, pins, source), out)
    return out


def _needs_fix(model: onnx.ModelProto, pins: Shapes) -> bool:
    """Whether a pin changes a dim or a main-graph Constant node could become an initializer."""
    inputs = {v.name: _dims(v) for v in _graph_inputs(model)}
    changes = any(inputs[n] != dims for n, dims in pins.items())
    return changes or any(_movable(n) for n in model.graph.node)


def _finish(model: onnx.ModelProto, pins: Shapes, source: Path) -> onnx.ModelProto:
    """Pin dims, move Constant nodes to initializers and check the result."""
    import onnx

    _check_pins(model, pins, source)
    _pin_dims(model, pins)
    _constants_to_initializers(model)
    _static_outputs(model)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several types for a bad graph
        raise UsageError(f"{source}: the reference ONNX is not valid "
                         f"({first_line(exc)})") from None
    return model


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (old IR versions list weights as inputs)."""
    weights = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def _dims(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    """Dims with symbolic or unknown ones as -1."""
    return tuple(d.dim_value if d.HasField("dim_value") else -1
                 for d in value.type.tensor_type.shape.dim)


def _check_pins(model: onnx.ModelProto, pins: Shapes, source: Path) -> None:
    """Every pinned name is an input of matching rank whose fixed dims agree."""
    inputs = {v.name: _dims(v) for v in _graph_inputs(model)}
    for name, dims in pins.items():
        if name not in inputs:
            raise UsageError(f"--shape {name}=...: {source} has no input '{name}'; its inputs: "
                             f"{', '.join(inputs)}")
        have = inputs[name]
        shown = "[" + ",".join(str(d) if d > 0 else "?" for d in have) + "]"
        if len(have) != len(dims) or any(0 < h != d for h, d in zip(have, dims, strict=True)):
            raise UsageError(f"--shape {name}={','.join(map(str, dims))}: input '{name}' of "
                             f"{source.name} has shape {shown} ('?' dims may be pinned)")


def _pin_dims(model: onnx.ModelProto, pins: Shapes) -> None:
    """Set pinned input dims; a dim_param pinned on an input is fixed everywhere it appears."""
    params = _pinned_params(model, pins)
    for value in _graph_inputs(model):
        for dim, size in zip(value.type.tensor_type.shape.dim, pins.get(value.name, ()),
                             strict=False):
            dim.dim_value = size
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in params:
                dim.dim_value = params[dim.dim_param]


def _pinned_params(model: onnx.ModelProto, pins: Shapes) -> dict[str, int]:
    """Symbolic dim name -> pinned size; one name pinned to two sizes is a UsageError."""
    params: dict[str, tuple[int, str]] = {}
    for value in _graph_inputs(model):
        for dim, size in zip(value.type.tensor_type.shape.dim, pins.get(value.name, ()),
                             strict=False):
            if not (dim.HasField("dim_param") and dim.dim_param):
                continue
            seen = params.setdefault(dim.dim_param, (size, value.name))
            if seen[0] != size:
                raise UsageError(f"--shape: dim '{dim.dim_param}' is shared by inputs "
                                 f"'{seen[1]}' and '{value.name}' but pinned to {seen[0]} "
                                 f"and {size}")
    return {name: size for name, (size, _) in params.items()}


def _movable(node: onnx.NodeProto) -> bool:
    """A Constant node whose value can be an initializer (not a sparse one)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 \
        and not any(a.name == "sparse_value" for a in node.attribute)


def _constants_to_initializers(model: onnx.ModelProto) -> int:
    """Move main-graph Constant nodes into initializers; return how many moved."""
    outputs = {v.name for v in model.graph.output}
    keep, moved = [], []
    for node in model.graph.node:
        if _movable(node) and node.output[0] not in outputs:
            moved.append(_constant_tensor(node))
        else:
            keep.append(node)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
        model.graph.initializer.extend(moved)
        if model.ir_version < 4:  # initializers had to be graph inputs before IR 4
            model.ir_version = 4
    return len(moved)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto:
    """The tensor a Constant node produces, named after its output."""
    import onnx
    from onnx import helper, numpy_helper

    attr = node.attribute[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = node.output[0]
        return tensor
    value = helper.get_attribute_value(attr)
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64}
    if attr.name in kinds:
        return numpy_helper.from_array(np.asarray(value, dtype=kinds[attr.name]), node.output[0])
    strings = value if isinstance(value, list) else [value]
    shape = [len(strings)] if attr.name == "value_strings" else []
    return helper.make_tensor(node.output[0], onnx.TensorProto.STRING, shape, strings)


def _static_outputs(model: onnx.ModelProto) -> None:
    """Fill symbolic output dims that shape inference can now compute (best effort)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference is optional here; ORT infers at load time anyway
        return
    known = {v.name: v for v in inferred.graph.output}
    for value in model.graph.output:
        other = known.get(value.name)
        if other is None:
            continue
        mine, theirs = value.type.tensor_type.shape.dim, other.type.tensor_type.shape.dim
        if len(mine) != len(theirs):
            continue
        for dim, new in zip(mine, theirs, strict=True):
            if not dim.HasField("dim_value") and new.HasField("dim_value") and new.dim_value > 0:
                dim.dim_value = new.dim_value


# --- TensorFlow family: tf2onnx in a child process ---------------------------------------------


def _from_tf(
    kind: str, source: Path, out: Path, pins: Shapes,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Convert in a child process; return the raw ONNX and the source's outputs on random feeds."""
    import onnx

    _require("tf2onnx", "tensorflow", why=f"{source}: reading {kind} models")
    raw, check = out.with_suffix(".raw.onnx"), out.with_suffix(".check.npz")
    job = {"kind": kind, "source": str(source.resolve()), "out": str(raw), "check": str(check),
           "shapes": {k: list(v) for k, v in pins.items()}, "opset": OPSET}
    log = out.with_suffix(".log")
    _run_child(job, log, source, kind)
    try:
        model = onnx.load(str(raw))
        feeds, expected = _read_check(check)
    finally:
        raw.unlink(missing_ok=True)
        check.unlink(missing_ok=True)
    return model, feeds, expected


def _run_child(job: dict[str, Any], log: Path, source: Path, kind: str) -> None:
    """``python -m edge.core.intake JOB`` with its output in ``log``; a failure is a UsageError."""
    job_file = log.with_suffix(".job.json")
    job_file.write_text(json.dumps(job))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                          os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with open(log, "w") as handle:
        try:
            done = subprocess.run([sys.executable, "-m", "edge.core.intake", str(job_file)],
                                  stdout=handle, stderr=subprocess.STDOUT, env=env,
                                  timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise UsageError(f"{source}: {kind} conversion timed out after {TIMEOUT_S:.0f} s "
                             f"(log: {log})") from None
    job_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise UsageError(f"{source}: could not convert this {kind} model to ONNX: "
                         f"{_log_reason(log)} (log: {log})")


def _log_reason(log: Path) -> str:
    """The child's one-line failure reason (its last 'edge-intake-error:' line, or last line)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    marked = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("edge-intake-error:")]
    return (marked or lines or ["no output"])[-1][:300]


def _read_check(path: Path) -> tuple[dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Feeds and the source's outputs, written by the child as in/NAME and out/INDEX/NAME."""
    with np.load(path, allow_pickle=False) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in/")}
        outs = sorted((int(k.split("/")[1]), k.split("/", 2)[2], data[k])
                      for k in data.files if k.startswith("out/"))
    return feeds, [(name, value) for _, name, value in outs]


def _child_main(job_file: str) -> int:
    """Child process: convert one TensorFlow-family model, and run it on random feeds."""
    job = json.loads(Path(job_file).read_text())
    try:
        convert = {"tflite": _child_tflite, "keras": _child_keras,
                   "savedmodel": _child_savedmodel}[job["kind"]]
        feeds, outputs = convert(job)
    except Exception as exc:  # report any failure as one line for the parent
        import traceback

        traceback.print_exc()
        print(f"edge-intake-error: {type(exc).__name__}: {first_line(exc)}", flush=True)
        return 1
    arrays = {f"in/{k}": v for k, v in feeds.items()}
    arrays.update({f"out/{i}/{name}": v for i, (name, v) in enumerate(outputs)})
    np.savez(job["check"], **arrays)  # type: ignore[arg-type]
    return 0


def _child_tflite(job: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[tuple[str, Any]]]:
    """tf2onnx.from_tflite, then LiteRT runs the .tflite on random feeds."""
    import tf2onnx
    from ai_edge_litert.interpreter import Interpreter

    proto, _ = tf2onnx.convert.from_tflite(job["source"], opset=job["opset"],
                                           output_path=job["out"])
    interp = Interpreter(model_path=job["source"])
    details = interp.get_input_details()
    names = [i.name for i in proto.graph.input]
    feeds = {}
    for name, detail in zip(names, details, strict=True):
        shape = _child_shape(job, name, detail.get("shape_signature", detail["shape"]))
        interp.resize_tensor_input(detail["index"], shape)
        feeds[name] = _random(shape, np.dtype(detail["dtype"]).name)
    interp.allocate_tensors()
    for name, detail in zip(names, details, strict=True):
        interp.set_tensor(detail["index"], feeds[name])
    interp.invoke()
    outputs = [(d["name"], np.array(interp.get_tensor(d["index"])))
               for d in interp.get_output_details()]
    return feeds, outputs


def _child_keras(job: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[tuple[str, Any]]]:
    """Load with Keras (tf_keras as a fallback), tf2onnx.from_keras, then run on random feeds."""
    import tensorflow as tf
    import tf2onnx

    model = _load_keras(job["source"])
    specs, feeds = [], {}
    for tensor in model.inputs:
        name = tensor.name.split(":")[0]
        shape = _child_shape(job, name, [-1 if d is None else d for d in tensor.shape])
        dtype = tf.as_dtype(tensor.dtype).name
        pinned = job["shapes"].get(name)
        specs.append(tf.TensorSpec(pinned or tuple(tensor.shape), dtype, name=name))
        feeds[name] = _random(shape, dtype)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=specs, opset=job["opset"],
                                          output_path=job["out"])
    feeds = _rename_feeds(feeds, [i.name for i in proto.graph.input])
    result = model([tf.constant(v) for v in feeds.values()] if len(feeds) > 1
                   else tf.constant(next(iter(feeds.values()))), training=False)
    return feeds, _named_outputs(result, [o.name for o in proto.graph.output])


def _load_keras(path: str) -> Any:
    """A Keras model from .keras/.h5; tf_keras reads legacy Keras 2 files Keras 3 cannot."""
    import keras

    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as first:
        try:
            import tf_keras

            return tf_keras.models.load_model(path, compile=False)
        except Exception:
            raise first from None


def _child_savedmodel(job: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[tuple[str, Any]]]:
    """tf2onnx's own SavedModel path (its CLI), then the serving signature on random feeds."""
    import tensorflow as tf
    from tf2onnx import convert

    loaded = tf.saved_model.load(job["source"])
    if not loaded.signatures:
        raise ValueError("the SavedModel has no serving signature")
    key = "serving_default" if "serving_default" in loaded.signatures else \
        next(iter(loaded.signatures))
    argv = sys.argv
    sys.argv = ["tf2onnx.convert", "--saved-model", job["source"], "--signature_def", key,
                "--output", job["out"], "--opset", str(job["opset"])]
    try:
        convert.main()
    finally:
        sys.argv = argv
    import onnx

    proto = onnx.load(job["out"])
    fn = loaded.signatures[key]
    specs = fn.structured_input_signature[1]
    feeds = {}
    for key, spec in specs.items():
        shape = _child_shape(job, key, [-1 if d is None else d for d in spec.shape])
        feeds[key] = _random(shape, spec.dtype.name)
    result = fn(**{k: tf.constant(v) for k, v in feeds.items()})
    feeds = _rename_feeds(feeds, [i.name for i in proto.graph.input])
    return feeds, _named_outputs(result, [o.name for o in proto.graph.output])


def _child_shape(job: dict[str, Any], name: str, dims: Sequence[int]) -> list[int]:
    """Pinned dims for ``name`` if given, else the model's dims with unknown ones as 1."""
    pinned = job["shapes"].get(name)
    return list(pinned) if pinned else [int(d) if int(d) > 0 else 1 for d in dims]


def _rename_feeds(feeds: dict[str, np.ndarray], onnx_names: list[str]) -> dict[str, np.ndarray]:
    """Key feeds by the ONNX input names: by name when they match, else by position."""
    if set(feeds) == set(onnx_names) or len(feeds) != len(onnx_names):
        return feeds
    return dict(zip(onnx_names, feeds.values(), strict=True))


def _named_outputs(result: Any, onnx_names: list[str]) -> list[tuple[str, np.ndarray]]:
    """Flatten a TF call's result (tensor, list or dict) into (name, array) pairs."""
    if isinstance(result, dict):
        return [(k, np.asarray(v)) for k, v in result.items()]
    values = list(result) if isinstance(result, (list, tuple)) else [result]
    names = onnx_names if len(onnx_names) == len(values) else [str(i) for i in range(len(values))]
    return [(n, np.asarray(v)) for n, v in zip(names, values, strict=True)]


# --- PyTorch: the TorchScript exporter ---------------------------------------------------------


def _from_torch(
    source: Path, out: Path, pins: Shapes, dtypes: Mapping[str, str],
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Export a saved module with torch.onnx.export(dynamo=False) on example inputs from pins."""
    import onnx

    _require("torch", why=f"{source}: reading PyTorch models")
    import torch

    module = _load_torch(source)
    names = _torch_inputs(module, pins, source)
    feeds = {n: _random(pins[n], dtypes.get(n, "float32")) for n in names}
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    with torch.no_grad():
        try:
            result = module(*args)
        except Exception as exc:  # the module's own error on the example inputs
            raise UsageError(f"{source}: the module failed on the --shape example inputs "
                             f"({first_line(exc)})") from None
    values = _flatten_torch(result)
    out_names = ["output"] if len(values) == 1 else [f"output_{i}" for i in range(len(values))]
    _export_torch(module, args, names, out_names, out, source)
    model = onnx.load(str(out))
    return model, feeds, list(zip(out_names, values, strict=True))


def _load_torch(source: Path) -> Any:
    """A TorchScript archive or a whole pickled module, in eval mode."""
    import zipfile

    import torch

    try:
        scripted = zipfile.is_zipfile(source) and any(
            n.endswith("constants.pkl") for n in zipfile.ZipFile(source).namelist())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load is deprecated
            module = (torch.jit.load(str(source), map_location="cpu") if scripted
                      else torch.load(str(source), map_location="cpu", weights_only=False))
    except Exception as exc:  # unpickling raises many types (missing class, bad file)
        raise UsageError(f"{source}: not a loadable PyTorch module ({first_line(exc)}); save "
                         "it with torch.save(model) with its class importable, or with "
                         "torch.jit.save") from None
    if not isinstance(module, torch.nn.Module):
        what = "a state_dict" if isinstance(module, Mapping) else type(module).__name__
        raise UsageError(f"{source}: holds {what}, not a module; save the whole module "
                         "(torch.save(model)) or TorchScript (torch.jit.save)")
    return module.eval()


def _torch_inputs(module: Any, pins: Shapes, source: Path) -> list[str]:
    """Forward's argument names that get example inputs: the required ones plus pinned ones."""
    params = _forward_params(module)
    unknown = [n for n in pins if n not in dict(params)]
    if unknown:
        raise UsageError(f"--shape {unknown[0]}=...: {source.name}'s forward() has no argument "
                         f"'{unknown[0]}'; its arguments: {', '.join(n for n, _ in params)}")
    last = max((i for i, (n, req) in enumerate(params) if req or n in pins), default=-1)
    names = [n for n, _ in params[: last + 1]]
    missing = [n for n in names if n not in pins]
    if missing or not names:
        wanted = missing or [n for n, _ in params] or ["NAME"]
        raise UsageError(f"{source}: a PyTorch model needs example input shapes; give "
                         + " ".join(f"--shape {n}=DIMS" for n in wanted)
                         + " (DIMS like 1,3,224,224; append :int64 for an integer input)")
    return names


def _forward_params(module: Any) -> list[tuple[str, bool]]:
    """(name, required) for each positional argument of forward, without self."""
    import inspect

    import torch

    if isinstance(module, torch.jit.ScriptModule):
        args = module.forward.schema.arguments[1:]  # type: ignore[attr-defined]
        return [(a.name, not a.has_default_value()) for a in args]
    sig = inspect.signature(module.forward)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [(p.name, p.default is inspect.Parameter.empty)
            for p in sig.parameters.values() if p.kind in kinds]


def _flatten_torch(result: Any) -> list[np.ndarray]:
    """A forward result (tensor, or nested tuples/lists/dicts of them) as flat numpy arrays."""
    if isinstance(result, Mapping):
        return [a for v in result.values() for a in _flatten_torch(v)]
    if isinstance(result, (list, tuple)):
        return [a for v in result for a in _flatten_torch(v)]
    return [result.detach().cpu().numpy()]


def _export_torch(module: Any, args: tuple[Any, ...], names: list[str], out_names: list[str],
                  out: Path, source: Path) -> None:
    """torch.onnx.export with the TorchScript exporter at OPSET; failures name the source."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, args, str(out), input_names=names, output_names=out_names,
                              opset_version=OPSET, dynamo=False, do_constant_folding=True)
        except Exception as exc:  # the exporter raises many types
            raise UsageError(f"{source}: torch.onnx.export failed ({first_line(exc)})") from None


# --- parity, caching, helpers ------------------------------------------------------------------


def _check_parity(reference: Path, feeds: dict[str, np.ndarray],
                  expected: list[tuple[str, np.ndarray]], source: Path) -> None:
    """The reference must reproduce the source's outputs on the same inputs (else UsageError)."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, feeds), strict=True))
    except Exception as exc:  # ORT raises its own exception types
        reference.unlink(missing_ok=True)
        raise UsageError(f"{source}: the converted ONNX does not run in onnxruntime "
                         f"({first_line(exc)})") from None
    pairs = _pair_outputs(got, expected, names)
    problem = next((p for p in (_mismatch(n, a, b) for n, a, b in pairs) if p), None)
    if problem or len(pairs) != len(names):
        reference.unlink(missing_ok=True)
        raise UsageError(f"{source}: the converted ONNX does not reproduce the source: "
                         f"{problem or 'outputs do not correspond'}")


def _pair_outputs(got: dict[str, np.ndarray], expected: list[tuple[str, np.ndarray]],
                  names: list[str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, onnx, source) pairs: by name when every name matches, else by position."""
    if {n for n, _ in expected} == set(names):
        return [(n, got[n], v) for n, v in expected]
    if len(expected) != len(names):
        return []
    return [(n, got[n], v) for n, (_, v) in zip(names, expected, strict=True)]


def _mismatch(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """Why ``got`` differs from ``want`` (shape, values), or None."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"output '{name}' has shape {list(got.shape)}, the source gives {list(want.shape)}"
    if got.dtype.kind not in "fc":
        agree = float(np.mean(got == want)) if got.size else 1.0
        return None if agree >= 0.99 else f"output '{name}' agrees on {100 * agree:.1f}%"
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    worst = float(np.max(np.abs(a - b))) if a.size else 0.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / norm) if norm > 0 else (1.0 if worst == 0 else 0.0)
    if cosine >= _PARITY_COSINE and worst <= _PARITY_REL * scale:
        return None
    return f"output '{name}' cosine {cosine:.5f}, max abs diff {worst:.3g}"


def _random(shape: Sequence[int], dtype: str) -> np.ndarray:
    """Seeded example data: small non-negative ints for index-like inputs, normal floats else."""
    rng = np.random.default_rng(0)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.integers(0, 2, size=tuple(shape)).astype(bool)
    if kind in "iu":
        return rng.integers(0, 2, size=tuple(shape)).astype(dtype)
    return rng.standard_normal(tuple(shape)).astype(dtype)


def _cached_path(source: Path, workdir: Path, kind: str, pins: Shapes,
                 dtypes: Mapping[str, str]) -> Path:
    """Where the reference for this source content and these options lives in workdir."""
    digest = hashlib.sha256()
    key = cache_key(kind, sorted(pins.items()), sorted(dtypes.items()), recipe=_VERSION,
                    converters=_CONVERTERS[kind])
    digest.update(key.encode())
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    for path in files:
        digest.update(str(path.relative_to(source) if source.is_dir() else "").encode())
        with open(path, "rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):  # type: ignore[misc]
                digest.update(block)
    return workdir / f"{source.stem or 'model'}.{kind}-{digest.hexdigest()[:16]}.onnx"



def _require(*modules: str, why: str) -> None:
    """UsageError naming the extra to install when a converter module is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        extra = "pip install torch==2.13.0" if "torch" in missing else "pip install 'edge[tflite]'"
        raise UsageError(f"{why} needs {', '.join(missing)} ({extra})")


def reference_model(source: Path, *, shapes: dict[str, tuple[int, ...]] | None = None,
                    dtypes: dict[str, str] | None = None) -> tuple[Origin, Path]:
    """The user's file and the reference ONNX every target converts from (cached)."""
    kind = source_kind(source)
    reference = to_reference(source, cache_root() / "reference", shapes=shapes, dtypes=dtypes)
    digest = sha256_file(source) if source.is_file() else "(folder)"
    return Origin(path=str(source.resolve()), sha256=digest, format=kind), reference


if __name__ == "__main__":  # the converter child: python -m edge.core.intake JOB.json
    if len(sys.argv) != 2:
        sys.exit("usage: python -m edge.core.intake JOB.json (edge runs this itself)")
    sys.exit(_child_main(sys.argv[1]))
