"""Builds the TensorFlow-family model files that run code when read (issue 27, hostile_code).

Run as ``python -m tests.support.model_code_build OUT`` (TensorFlow loads in that child only).
Every file that writes does so to ``code-ran`` in the working directory of the process that
reads it: a refused read leaves the working directory empty.
"""

from __future__ import annotations

import functools
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


def _collective_reduce(m, x):  # waits for the group's second member
    y = tf.raw_ops.CollectiveReduceV2(input=x, group_size=2, group_key=1, instance_key=1,
                                      ordering_token=[], merge_op="Add", final_op="Id")
    return tf.matmul(y, m.w)


def _collective_gather(m, x):
    y = tf.raw_ops.CollectiveGatherV2(input=x, group_size=2, group_key=1, instance_key=2,
                                      ordering_token=[])
    return tf.matmul(y[:1], m.w)


def _collective_bcast(m, x):
    y = tf.raw_ops.CollectiveBcastRecvV2(group_size=2, group_key=1, instance_key=3,
                                         shape=[1, 4], T=tf.float32)
    return tf.matmul(x + y, m.w)


def _recv(m, x):  # waits for a tensor another task never sends
    y = tf.raw_ops.Recv(tensor_type=tf.float32, tensor_name="edge",
                        send_device="/job:localhost/replica:0/task:1/device:CPU:0",
                        send_device_incarnation=1,
                        recv_device="/job:localhost/replica:0/task:0/device:CPU:0")
    return tf.matmul(x + y, m.w)


def _forever(m, x):  # a while_loop whose condition is always true
    _, y = tf.while_loop(lambda i, y: tf.constant(True), lambda i, y: (i + 1, y * 1.0),
                         [tf.constant(0), x])
    return tf.matmul(y, m.w)


SAVED = {"writefile": _write, "readfile": _read, "matchingfiles": _matching,
         "nested-writefile": _nested, "save-op": _save_op, "pyfunc": _py, "clean": _clean,
         "collective-reduce": _collective_reduce, "collective-gather": _collective_gather,
         "collective-bcast": _collective_bcast, "recv": _recv, "while-forever": _forever}


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


def polyglot_h5(out: Path) -> None:
    """lambda.h5 behind a 512-byte HDF5 user block starting with a zip's magic, a zip (no
    config.json) appended: a zip by its first bytes, HDF5 (with the Lambda) to h5py and Keras."""
    import io
    import zipfile

    import h5py

    with h5py.File(out / "lambda.h5", "r") as src, \
            h5py.File(out / "polyglot.h5", "w", userblock_size=512) as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        for key in src:
            src.copy(src[key], dst, name=key)
    with open(out / "polyglot.h5", "r+b") as handle:
        handle.write(b"PK\x03\x04")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("weights.bin", b"x")
    with open(out / "polyglot.h5", "ab") as handle:
        handle.write(buffer.getvalue())


def _tf1_saved(out: Path, name: str, build) -> None:
    """A TF1 SavedModel (x[1, 4] -> y) from ``build(graph, x, y)``, which returns the builder's
    keyword arguments (saver, main_op)."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1, 4], name="x")
        v = tf1.get_variable("v", [4], initializer=tf1.zeros_initializer())
        y = tf.identity(x + v, name="y")
        extra = build(graph, v)
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            builder = tf1.saved_model.Builder(str(out / name))
            signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(
                session, ["serve"], signature_def_map={"serving_default": signature}, **extra)
            builder.save()


def _saver_savev2(graph, v) -> dict:
    """The SaverDef's restore op (run by a TF1 loader) depends on a SaveV2 writing the marker."""
    saver = tf.compat.v1.train.Saver([v])
    evil = tf.raw_ops.SaveV2(prefix=tf.constant(MARKER), tensor_names=tf.constant(["p"]),
                             shape_and_slices=tf.constant([""]), tensors=[tf.constant([1.0])])
    restore = graph.get_operation_by_name(saver.saver_def.restore_op_name)
    with tf.control_dependencies([evil, restore]):
        saver.saver_def.restore_op_name = tf.no_op(name="restore_all_evil").name
    return {"saver": saver}


def _dataset_from_graph(graph, v, blob: bytes) -> dict:
    """The main op rebuilds a tf.data pipeline from a serialized GraphDef (DatasetFromGraph)
    that caches /etc/hostname's lines into the marker."""
    salt = tf.strings.substr(tf.strings.as_string(tf.random.uniform([])), 0, 0)
    dataset = tf.raw_ops.DatasetFromGraph(graph_def=tf.strings.join([tf.constant(blob), salt]))
    line = tf.raw_ops.DatasetToSingleElement(dataset=dataset, output_types=[tf.string],
                                             output_shapes=[[]])[0]
    return {"main_op": tf.group(line, name="main_op")}


def _dataset_blob() -> bytes:
    """The serialized GraphDef of the dataset (built eagerly, outside the TF1 graph)."""
    dataset = tf.data.TextLineDataset("/etc/hostname").cache(MARKER)
    policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return dataset._as_serialized_graph(external_state_policy=policy).numpy()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    keras_files(out)
    for name, body in SAVED.items():
        _saved(out, f"{name}.savedmodel", body)
    flex_tflite(out)
    polyglot_h5(out)
    _tf1_saved(out, "saver-savev2.savedmodel", _saver_savev2)
    _tf1_saved(out, "dataset-from-graph.savedmodel",
               functools.partial(_dataset_from_graph, blob=_dataset_blob()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
