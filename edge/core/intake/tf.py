"""TensorFlow-family sources (TFLite, Keras, SavedModel): tf2onnx in a child process, so
TensorFlow never loads into edge's own process (``python -m edge.core.intake.tf JOB``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge.core.bounded import (
    OUT_OF_MEMORY,
    Bounds,
    apply_limits,
    bounds,
    limit_env,
    out_of_memory,
    over_deadline,
    over_memory,
)
from edge.core.errors import UsageError, first_line
from edge.core.extras import require
from edge.core.files import free_bytes, no_space
from edge.core.intake.common import OPSET, STOPPED, TIMEOUT_S, Shapes, example, read_check
from edge.core.intake.tflite import START, convert_tflite


def from_tf(
    kind: str, source: Path, out: Path, pins: Shapes, *, trust: bool = False,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[tuple[str, np.ndarray]]]:
    """Convert in a child process; return the raw ONNX and the source's outputs on random feeds
    (``trust``: Keras loads Lambda layers, outside its safe mode)."""
    require("tflite", "tf2onnx", "tensorflow", why=f"{source}: reading {kind} models")
    raw, check = out.with_suffix(".raw.onnx"), out.with_suffix(".check.npz")
    job = {"kind": kind, "source": str(source.resolve()), "out": str(raw), "check": str(check),
           "shapes": {k: list(v) for k, v in pins.items()}, "opset": OPSET, "trust": trust}
    log = out.with_suffix(".log")
    try:  # the child's files are scratch, never a cache entry: removed whatever happens
        _run_child(job, log, source, kind)
        model = onnx.load(str(raw))
        feeds, expected = read_check(check)
    finally:
        raw.unlink(missing_ok=True)
        check.unlink(missing_ok=True)
    return model, feeds, expected


def import_root() -> Path:
    """The directory that holds the ``edge`` package (the child must import this edge)."""
    return Path(__file__).resolve().parents[len(__name__.split(".")) - 1]


#: Free space below which a failed conversion child is taken to have met a full disk.
_ROOM = 1 << 20


def _run_child(job: dict[str, Any], log: Path, source: Path, kind: str) -> None:
    """Run the child with its output in ``log``; a failure is a UsageError. It converts and
    runs the model first: within the limits of a model's first run (edge.core.bounded), and
    the conversion's own time limit."""
    job_file = log.with_suffix(".job.json")
    job_file.write_text(json.dumps(job))
    limits = bounds(source)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(import_root()),
                                          os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           **limit_env(limits)}
    timeout = min(TIMEOUT_S, limits.deadline_s)
    log.write_text("")
    while True:
        start = log.stat().st_size
        with open(log, "a") as handle:
            try:
                # -P: the working folder is not on the child's import path (a numpy.py beside
                # the model is never imported)
                done = subprocess.run([sys.executable, "-P", "-m", "edge.core.intake.tf",
                                       str(job_file)], stdout=handle, stderr=subprocess.STDOUT,
                                      env=env, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise over_deadline(f"{source}: converting and first running this {kind} "
                                    "model", limits) from None
        crashed = kind == "tflite" and -done.returncode in _CRASHES
        if not (crashed and _crashed_converter(job, done.returncode, _read_from(log, start))):
            break
        job_file.write_text(json.dumps(job))
    job_file.unlink(missing_ok=True)
    _check_exit(done.returncode, log, source, kind, limits)


#: Signals a crashing converter dies of (an interrupted run or the OOM killer sends others)
_CRASHES = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                      signal.SIGABRT})
_OP = re.compile(r"OP=([A-Z][A-Z0-9_]*)")


def _read_from(log: Path, offset: int) -> str:
    """What the child wrote to ``log`` in this run (from ``offset``)."""
    with open(log, errors="replace") as handle:
        handle.seek(offset)
        return handle.read()


def _crashed_converter(job: dict[str, Any], code: int, text: str) -> bool:
    """Whether the crash (signal ``-code``) came from a TFLite converter not yet recorded (the
    last start line in the run's log ``text``): then it is put in ``job["crashed"]``, with the
    operators it reported failing on, to be skipped on the next run."""
    started = [ln[len(START):].strip() for ln in text.splitlines() if ln.startswith(START)]
    crashed = job.setdefault("crashed", {})
    if not started or started[-1] in crashed:
        return False
    ops = sorted(set(_OP.findall(text.split(START + started[-1], 1)[-1])))
    crashed[started[-1]] = (f"crashed ({signal.Signals(-code).name})"
                            + (f" after it could not convert {', '.join(ops)}" if ops else ""))
    return True


def _check_exit(code: int, log: Path, source: Path, kind: str, limits: Bounds) -> None:
    """The child's exit status as a UsageError (a full disk, a signal, its memory limit, the
    reason it logged); nothing for 0."""
    if code != 0 and free_bytes(log.parent) < _ROOM:  # its log may say nothing
        raise no_space(log.with_suffix(".onnx"), _ROOM)
    if code == OUT_OF_MEMORY:
        raise over_memory(f"{source}: converting and first running this {kind} model", limits)
    if code < 0:  # killed (an interrupted run, the OOM killer): not the model's
        raise UsageError(f"{source}: the {kind} conversion was {STOPPED} {-code} "
                         f"(log: {log}); run again")
    if code != 0:
        raise UsageError(f"{source}: could not convert this {kind} model to ONNX: "
                         f"{_log_reason(log)} (log: {log})")


def _log_reason(log: Path) -> str:
    """The child's one-line failure reason (its last 'edge-intake-error:' line, or last line)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    marked = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("edge-intake-error:")]
    return (marked or lines or ["no output"])[-1][:600]


def child_main(job_file: str) -> int:
    """Child process: convert one TensorFlow-family model, and run it on random feeds."""
    apply_limits()
    job = json.loads(Path(job_file).read_text())
    try:
        convert = {"tflite": _child_tflite, "keras": _child_keras,
                   "savedmodel": _child_savedmodel}[job["kind"]]
        feeds, outputs = convert(job)
    except Exception as exc:  # report any failure as one line for the parent
        traceback.print_exc()
        if out_of_memory(exc):
            return OUT_OF_MEMORY
        chain = type(exc).__name__ == "ChainFailed"  # already one line, every converter's reason
        reason = str(exc) if chain else f"{type(exc).__name__}: {first_line(exc)}"
        print(f"edge-intake-error: {reason}", flush=True)
        return 1
    arrays = {f"in/{k}": v for k, v in feeds.items()}
    arrays.update({f"out/{i}/{name}": v for i, (name, v) in enumerate(outputs)})
    np.savez(job["check"], **arrays)  # type: ignore[arg-type]
    return 0


def _child_tflite(job: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[tuple[str, Any]]]:
    """The converter chain (edge.core.intake.tflite), each result checked against LiteRT."""
    return convert_tflite(job)


def _child_keras(job: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[tuple[str, Any]]]:
    """Load with Keras (tf_keras as a fallback), tf2onnx.from_keras, then run on random feeds."""
    import tensorflow as tf
    import tf2onnx

    model = _load_keras(job["source"], trust=bool(job.get("trust")))
    specs, feeds = [], {}
    for tensor in model.inputs:
        name = tensor.name.split(":")[0]
        shape = _child_shape(job, name, [-1 if d is None else d for d in tensor.shape])
        dtype = tf.as_dtype(tensor.dtype).name
        pinned = job["shapes"].get(name)
        specs.append(tf.TensorSpec(pinned or tuple(tensor.shape), dtype, name=name))
        feeds[name] = example(shape, dtype)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=specs, opset=job["opset"],
                                          output_path=job["out"])
    feeds = _rename_feeds(feeds, [i.name for i in proto.graph.input])
    result = model([tf.constant(v) for v in feeds.values()] if len(feeds) > 1
                   else tf.constant(next(iter(feeds.values()))), training=False)
    return feeds, _named_outputs(result, [o.name for o in proto.graph.output])


def _load_keras(path: str, *, trust: bool) -> Any:
    """A Keras model from .keras/.h5; tf_keras reads legacy Keras 2 files Keras 3 cannot. The
    parent checked the config (edge.core.intake.trust) unless the user trusts the model."""
    import keras

    try:
        return keras.saving.load_model(path, compile=False, safe_mode=not trust)
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
    proto = onnx.load(job["out"])
    fn = loaded.signatures[key]
    specs = fn.structured_input_signature[1]
    feeds = {}
    for key, spec in specs.items():
        shape = _child_shape(job, key, [-1 if d is None else d for d in spec.shape])
        feeds[key] = example(shape, spec.dtype.name)
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


if __name__ == "__main__":  # the converter child: python -m edge.core.intake.tf JOB.json
    if len(sys.argv) != 2:
        sys.exit("usage: python -m edge.core.intake.tf JOB.json (edge runs this itself)")
    sys.exit(child_main(sys.argv[1]))
