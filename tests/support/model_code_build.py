"""Builds the TensorFlow-family model files that run code when read (issue 27, hostile_code).

Run as ``python -m tests.support.model_code_build OUT`` (TensorFlow loads in that child only).
Every file that writes does so to ``code-ran`` in the working directory of the process that
reads it: a refused read leaves the working directory empty.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

MARKER = "code-ran"
SPEC = tf.TensorSpec([1, 4], tf.float32, name="x")


def _mark(x):  # the Lambda's body: runs when a Keras loader rebuilds the model
    open("code-ran", "w").write("x")  # noqa: SIM115 - the payload of a hostile model
    return x


def keras_files(out: Path) -> None:
    """A Lambda in a Sequential model, and one inside a functional submodel."""
    flat = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Lambda(_mark),
                                tf_keras.layers.Dense(2)])
    flat.save(out / "lambda.h5")
    inner_in = tf_keras.Input((4,))
    inner = tf_keras.Model(inner_in, tf_keras.layers.Lambda(_mark)(inner_in), name="inner")
    outer_in = tf_keras.Input((4,))
    outer = tf_keras.Model(outer_in, tf_keras.layers.Dense(2)(inner(outer_in)))
    outer.save(out / "nested-lambda.h5")
    clean = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    clean.save(out / "clean.h5")


class _Module(tf.Module):
    def __init__(self, body) -> None:
        super().__init__()
        self.w = tf.Variable(tf.ones([4, 2]))
        self.body = body


def _saved(out: Path, name: str, body) -> None:
    module = _Module(body)

    @tf.function(input_signature=[SPEC])
    def serve(x):
        return {"y": module.body(module, x)}

    tf.saved_model.save(module, str(out / name), signatures={"serving_default": serve})


def _write(m, x):
    with tf.control_dependencies([tf.io.write_file(MARKER, "x")]):
        return tf.matmul(x, m.w)


def _read(m, x):
    size = tf.cast(tf.strings.length(tf.io.read_file("/etc/hostname")), tf.float32)
    return tf.matmul(x, m.w) + size * 0.0


def _matching(m, x):
    found = tf.cast(tf.size(tf.io.matching_files("/etc/*")), tf.float32)
    return tf.matmul(x, m.w) + found * 0.0


@tf.function
def _nested_write(x):
    with tf.control_dependencies([tf.io.write_file(MARKER, "x")]):
        return tf.identity(x)


def _nested(m, x):
    y = tf.cond(tf.reduce_sum(x) > -1e30, lambda: _nested_write(x), lambda: x)
    return tf.matmul(y, m.w)


def _save_op(m, x):
    with tf.control_dependencies([tf.raw_ops.Save(filename=MARKER, tensor_names=["x"],
                                                  data=[x])]):
        return tf.matmul(x, m.w)


def _py(m, x):
    y = tf.py_function(lambda t: t, [x], tf.float32)
    return tf.matmul(tf.reshape(y, [1, 4]), m.w)


def _clean(m, x):
    return tf.matmul(x, m.w)


SAVED = {"writefile": _write, "readfile": _read, "matchingfiles": _matching,
         "nested-writefile": _nested, "save-op": _save_op, "pyfunc": _py, "clean": _clean}


def flex_tflite(out: Path) -> None:
    """A .tflite whose select-TF op (FlexWriteFile) would write the marker, were it run."""
    @tf.function(input_signature=[SPEC])
    def serve(x):
        with tf.control_dependencies([tf.io.write_file(MARKER, "x")]):
            return tf.identity(x) * 2.0

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [serve.get_concrete_function()], serve)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                           tf.lite.OpsSet.SELECT_TF_OPS]
    (out / "flex.tflite").write_bytes(converter.convert())


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    keras_files(out)
    for name, body in SAVED.items():
        _saved(out, f"{name}.savedmodel", body)
    flex_tflite(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
