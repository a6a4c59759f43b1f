"""LiteRT (TFLite) on the device, for edge's agent: loading a ``.tflite`` model with
``ai_edge_litert``, else ``tflite_runtime``, on random inputs.

Zipped into the agent as ``edge_agent/runtime_tflite.py`` (devices/agentfile.py): Python 3.8,
the standard library, numpy and LiteRT only. Edge imports it on its host too.
"""

import importlib.metadata as md

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
except ImportError:  # on edge's host
    from devices.agent import runtimes

NAME = "tflite"
SUFFIXES = (".tflite",)
MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")
DISTRIBUTIONS = ("ai-edge-litert", "tflite-runtime")
COMMANDS = ()  # no agent command of its own: per-layer times come from prefix benches


def load(path, threads):
    """A LiteRT interpreter (ai_edge_litert, else tflite_runtime) on random inputs."""
    np = runtimes.numpy()
    module = runtimes.import_module(*MODULES)
    interpreter = module.Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               runtimes.random_input(np, list(detail["shape"]), detail["dtype"]))
    return interpreter.invoke, version_of(module)


def version_of(module):
    """The installed version of a LiteRT module's distribution."""
    for dist in ("ai-edge-litert", "tflite-runtime", "tensorflow"):
        try:
            if module.__name__.split(".")[0].replace("_", "-") == dist:
                return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"
