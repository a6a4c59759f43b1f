"""The entry point: any accepted source -> the cached reference ONNX every target converts from."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from edge.core.cache import cache_root
from edge.core.errors import UsageError
from edge.core.extras import require
from edge.core.files import no_space_as
from edge.core.intake.common import (
    ACCEPTED,
    SUFFIXES,
    NoOnnxReference,
    Shapes,
    cached_path,
    usable_entry,
)
from edge.core.intake.memory import remembered_failure
from edge.core.intake.onnxfix import finish, fix_onnx, graph_inputs, input_dims
from edge.core.intake.parity import check_parity
from edge.core.intake.pytorch import from_torch_bounded, is_torchscript
from edge.core.intake.tf import from_tf
from edge.core.intake.trust import refuse_model_code
from edge.core.model import inspect_model, save_onnx_atomic, sha256_file, unrunnable
from edge.core.values import Origin

log = logging.getLogger("edge")


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
    dtypes: Mapping[str, str] | None = None, trust_code: bool = False,
    args: Mapping[str, str] | None = None,
) -> Path:
    """The reference ONNX for ``source``: the file itself, or a converted/fixed copy in workdir.

    ``shapes`` pins dynamic input dims (``--shape``); PyTorch sources need it for every forward
    argument, and ``dtypes`` (default float32) for their non-float ones. Copies are cached in
    ``workdir`` by source content and options. A model that would run code from its file when
    read (a pickled module, a Keras Lambda, a SavedModel with file or Python ops) is refused
    unless ``trust_code`` (--trust-model-code). ``args`` (--arg NAME=VALUE) gives a PyTorch
    forward's non-tensor arguments, baked into the reference. Raises UsageError with a
    one-line reason.
    """
    source = Path(source)
    kind = source_kind(source)
    pins = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
    types = dict(dtypes or {})
    values = dict(args or {})
    if values and kind != "torch":
        raise UsageError(f"--arg {next(iter(values))}=...: --arg gives a PyTorch forward's "
                         f"non-tensor arguments; {source.name} is a {kind} model (use --shape)")
    if kind == "onnx":
        return fix_onnx(source, workdir, pins)
    _sniff(source, kind)
    if not trust_code:
        refuse_model_code(source, kind)
    out = cached_path(source, workdir, kind, pins, types, values)
    if usable_entry(out):
        return out
    with no_space_as(out):
        workdir.mkdir(parents=True, exist_ok=True)
        return _convert(kind, source, out, pins, types, trust_code, values)


def _convert(kind: str, source: Path, out: Path, pins: Shapes,
             types: dict[str, str], trust: bool, values: dict[str, str]) -> Path:
    """Run the converter, finish the ONNX and check it reproduces the source."""
    if kind == "torch":
        raw, feeds, expected = from_torch_bounded(source, out, pins, types, trust=trust,
                                                  arg_values=values)
    else:
        # not remembered
        require("tflite", "tf2onnx", "tensorflow", why=f"{source}: reading {kind} models")
        with _remembered(kind, out, source):
            raw, feeds, expected = from_tf(kind, source, out, pins, trust=trust)
    model = finish(raw, pins, source)
    save_onnx_atomic(model, out)
    with _remembered(kind, out, source):
        check_parity(out, feeds, expected, source)
    return out


def _remembered(kind: str, out: Path, source: Path) -> contextlib.AbstractContextManager[None]:
    """Failures of the TensorFlow-family converters (a child that loads TensorFlow) are
    remembered; a PyTorch export fails fast and depends on --shape, so it is not."""
    return contextlib.nullcontext() if kind == "torch" else remembered_failure(out, source)


def dynamic_inputs(reference: Path) -> list[str]:
    """Names of the reference's inputs that still have a symbolic or unknown dim."""
    model = onnx.load(str(reference), load_external_data=False)
    return [v.name for v in graph_inputs(model) if any(d <= 0 for d in input_dims(v))]


def pin_from_sample(reference: Path, workdir: Path, feed: Mapping[str, np.ndarray]) -> Path:
    """Pin the reference's dynamic dims to one calibration sample's shapes (a fixed copy)."""
    names = dynamic_inputs(reference)
    pins = {n: tuple(int(d) for d in np.shape(feed[n])) for n in names if n in feed}
    return to_reference(reference, workdir, shapes=pins) if pins else reference


#: Leading bytes by kind: TFLite's flatbuffer identifier sits at offset 4; .keras is a zip.
_MAGIC = {"tflite": (4, (b"TFL3",)), "keras": (0, (b"PK\x03\x04", b"\x89HDF\r\n\x1a\n"))}


def check_model_file(source: Path, *, trust_code: bool = False) -> None:
    """The cheap checks a model file gets before anything connects or converts: its kind, its
    header, no code it would run (unless ``trust_code``), and for ONNX a model that loads and
    that edge can run (UsageError otherwise)."""
    kind = source_kind(source)
    _sniff(source, kind)
    if not trust_code:
        refuse_model_code(source, kind)
    if kind == "onnx":
        odd = unrunnable(inspect_model(source))
        if odd:
            raise UsageError(f"{source.name}: {odd}")


def _sniff(source: Path, kind: str) -> None:
    """Reject a file that is plainly not of its suffix's format before starting a converter."""
    if source.suffix.lower() == ".jit" and not is_torchscript(source):
        raise UsageError(f"{source}: a .jit file must be a TorchScript archive "
                         "(torch.jit.save); this one is not (rename a pickled module to .pt)")
    if kind not in _MAGIC:
        return
    offset, magics = _MAGIC[kind]
    with open(source, "rb") as handle:
        head = handle.read(offset + 8)[offset:]
    if not any(head.startswith(m) for m in magics):
        raise UsageError(f"{source}: not a valid {kind} file (its header is not a {kind} "
                         f"header); accepted models: {ACCEPTED}")


def reference_model(source: Path, *, shapes: dict[str, tuple[int, ...]] | None = None,
                    dtypes: dict[str, str] | None = None,
                    tflite_fallback: bool = False, trust_code: bool = False,
                    args: dict[str, str] | None = None) -> tuple[Origin, Path]:
    """The user's file and the reference ONNX every target converts from (cached).

    With ``tflite_fallback`` a .tflite no converter can turn into a faithful ONNX model is its
    own reference (run on LiteRT; only targets that read .tflite files take it), with a warning.
    ``trust_code`` (--trust-model-code) reads a model that runs code (see ``to_reference``);
    ``args`` (--arg) are a PyTorch forward's non-tensor values, recorded in the Origin.
    """
    kind = source_kind(source)
    try:
        reference = to_reference(source, cache_root() / "reference", shapes=shapes,
                                 dtypes=dtypes, trust_code=trust_code, args=args)
    except NoOnnxReference as exc:
        if not tflite_fallback or kind != "tflite":
            raise
        log.warning("%s; what edge can still do: the original .tflite is the reference, run on "
                    "LiteRT, and only LiteRT candidates made from it (fp32, fp16, int8, "
                    "int8-dynamic) compete, no other runtime", exc)
        reference = source
    digest = sha256_file(source) if source.is_file() else "(folder)"
    return Origin(path=str(source.resolve()), sha256=digest, format=kind,
                  args=dict(args or {})), reference
