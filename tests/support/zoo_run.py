"""Run a zoo model file on its own runtime: ONNX on ONNX Runtime, TFLite on LiteRT, an OpenVINO IR
on OpenVINO's CPU plugin, Keras on Keras, TorchScript (.pt, .jit) on PyTorch.

``original(path)`` loads a model file and returns a ``Model``: its input names and ranks and a
``run(feeds)`` over one sample (feeds keyed by input name; a single-input model also takes its
one array under any name). ``outputs(model, arrays)`` runs every sample and stacks each
output over samples, in the file's own output order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True, kw_only=True, slots=True)
class Model:
    """A loaded model file."""

    inputs: tuple[tuple[str, int], ...]  # (name, rank)
    outputs: tuple[str, ...]
    run: Callable[[Feeds], list[np.ndarray]]


def original(path: Path, threads: int = 1) -> Model:
    """The model file on the runtime its format belongs to."""
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return _onnx(path, threads)
    if suffix == ".tflite":
        return _tflite(path, threads)
    if suffix == ".xml":
        return _openvino(path, threads)
    if suffix in (".h5", ".hdf5", ".keras"):
        return _keras(path)
    if suffix in (".pt", ".pth", ".jit"):
        return _torchscript(path, threads)
    raise ValueError(f"no runtime for {path.name}")


def _onnx(path: Path, threads: int) -> Model:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs = tuple((i.name, len(i.shape)) for i in session.get_inputs())
    names = [n for n, _ in inputs]
    return Model(inputs=inputs, outputs=tuple(o.name for o in session.get_outputs()),
                 run=lambda feeds: session.run(None, _by_name(feeds, names)))


def _tflite(path: Path, threads: int) -> Model:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), num_threads=threads)
    interp.allocate_tensors()
    details = interp.get_input_details()
    inputs = tuple((d["name"], len(d["shape"])) for d in details)
    outs = interp.get_output_details()

    def run(feeds: Feeds) -> list[np.ndarray]:
        named = _by_name(feeds, [n for n, _ in inputs])
        for d in details:
            interp.set_tensor(d["index"], named[d["name"]].astype(d["dtype"]))
        interp.invoke()
        return [np.array(interp.get_tensor(d["index"])) for d in outs]

    return Model(inputs=inputs, outputs=tuple(d["name"] for d in outs), run=run)


def _keras(path: Path) -> Model:
    """A Keras model under ``tf.function`` (graph mode: eager calls would be ~100x slower)."""
    import tensorflow as tf
    import tf_keras

    net = tf_keras.models.load_model(str(path), compile=False)
    call = tf.function(lambda xs: net(xs, training=False))
    inputs = tuple((t.name.split(":")[0], len(t.shape)) for t in net.inputs)
    names = [n for n, _ in inputs]

    def run(feeds: Feeds) -> list[np.ndarray]:
        named = _by_name(feeds, names)
        result = call([tf.constant(named[n]) for n in names])
        return [np.asarray(r) for r in (result if isinstance(result, list) else [result])]

    return Model(inputs=inputs, outputs=tuple(t.name for t in net.outputs), run=run)


def _torchscript(path: Path, threads: int) -> Model:
    """A TorchScript module with one tensor output (named "output", as edge names it). Its
    inputs' ranks are unknown (-1): each sample is fed as stored, batch dim included; an
    ``int`` argument (silero's sr) gets a Python int. A module that keeps state between calls
    (silero's ``reset_states``) starts every sample afresh, as every other zoo entry does."""
    import torch

    torch.set_num_threads(threads)
    module = torch.jit.load(str(path), map_location="cpu").eval()
    args = module.forward.schema.arguments[1:]
    names = [a.name for a in args if not a.has_default_value()]
    ints = {a.name for a in args if str(a.type) == "int"}

    def run(feeds: Feeds) -> list[np.ndarray]:
        named = _by_name(feeds, names)
        if hasattr(module, "reset_states"):
            module.reset_states()
        values = [int(named[n]) if n in ints else torch.from_numpy(np.ascontiguousarray(named[n]))
                  for n in names]
        with torch.no_grad():
            return [module(*values).numpy()]

    return Model(inputs=tuple((n, -1) for n in names), outputs=("output",), run=run)


#: Where edge's IR records the precision it is verified computing in (what it says to load
#: it with: targets/openvino/target.py writes it); f32 when absent.
_OV_COMPUTES = ["edge", "inference_precision"]


def _openvino(path: Path, threads: int) -> Model:
    """An OpenVINO IR compiled for the CPU with the precision hint it records (as its manifest
    says to load it), latency hint, ``threads`` threads; inputs bound by name each run."""
    import openvino as ov

    core = ov.Core()
    ir = core.read_model(str(path))
    hint = str(ir.get_rt_info(_OV_COMPUTES).astype(str)) if ir.has_rt_info(_OV_COMPUTES) \
        else "f32"
    compiled = core.compile_model(ir, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                              "INFERENCE_PRECISION_HINT": hint,
                                              "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    inputs = tuple((p.get_any_name(), len(p.get_partial_shape())) for p in compiled.inputs)
    names = [n for n, _ in inputs]

    def run(feeds: Feeds) -> list[np.ndarray]:
        named = _by_name(feeds, names)
        result = request.infer([named[n] for n in names])
        return [np.asarray(result[port]) for port in compiled.outputs]

    return Model(inputs=inputs, outputs=tuple(o.get_any_name() for o in compiled.outputs),
                 run=run)


def _by_name(feeds: Feeds, names: Sequence[str]) -> Feeds:
    """Feeds keyed by the model's names; one input takes the one array whatever its key."""
    if len(names) == 1 and len(feeds) == 1:
        return {names[0]: next(iter(feeds.values()))}
    missing = [n for n in names if n not in feeds]
    if missing:
        raise KeyError(f"no data for input(s) {missing}; have {sorted(feeds)}")
    return {n: feeds[n] for n in names}


def feed(model: Model, arrays: Feeds, index: int) -> Feeds:
    """Sample ``index`` of each array, given a batch axis where the input has one more dim."""
    out: Feeds = {}
    names = [n for n, _ in model.inputs]
    for key, value in _by_name(arrays, names).items():
        rank = dict(model.inputs)[key]
        sample = np.asarray(value[index])
        out[key] = sample[None] if sample.ndim == rank - 1 else sample
    return out


def outputs(model: Model, arrays: Feeds) -> list[np.ndarray]:
    """Every output over every sample, stacked on a new axis 0."""
    count = len(next(iter(arrays.values())))
    runs = [model.run(feed(model, arrays, i)) for i in range(count)]
    return [np.stack([r[k] for r in runs]) for k in range(len(runs[0]))]
