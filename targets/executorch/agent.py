"""ExecuTorch on the device, for edge's agent: loading a ``.pte`` program (XNNPACK delegate and
portable kernels) with ExecuTorch's C++ runtime bindings on random inputs.

The bindings (``executorch.extension.pybindings._C``) are imported directly: the documented
``executorch.runtime`` imports them through ``executorch.exir`` (the whole export toolchain,
about 10 s on this host before any program loads), which running a program never needs. They
take and give torch tensors, so the device needs the torch wheel beside executorch's.

Zipped into the agent as ``edge_agent/runtime_executorch.py`` (devices/agentfile.py): Python
3.8, the standard library, numpy and executorch (with torch) only. Edge imports it on its host
too.
"""

import importlib.metadata as md
import os

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import runtimes
    from devices.agent.errors import AgentError, one_line

NAME = "executorch"
SUFFIXES = (".pte",)
MODULES = ("executorch.extension.pybindings._C",)
DISTRIBUTIONS = ("executorch",)
#: ExecuTorch's ScalarType codes (runtime/core/portable_type/scalar_type.h) -> numpy dtypes.
DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
          6: "float32", 7: "float64", 11: "bool"}


def load(path, threads):
    """The program's ``forward`` and a closure running it on random inputs (``threads`` does
    not apply: XNNPACK's thread pool is sized by ExecuTorch)."""
    program, version = open_program(path)
    np = runtimes.numpy()
    torch = runtimes.import_module("torch")
    feeds = [torch.from_numpy(runtimes.random_input(np, shape, dtype))
             for shape, dtype in inputs(program)]
    return (lambda: program.forward(feeds)), version


def inputs(program):
    """(shape, numpy dtype) of each input of a program's ``forward``, from its metadata."""
    meta = program.method_meta("forward")
    found = []
    for index in range(meta.num_inputs()):
        info = meta.input_tensor_meta(index)
        if info.dtype() not in DTYPES:
            raise AgentError(f"executorch: input {index} has ScalarType {info.dtype()}, which "
                             "the agent cannot make a random value of", status=2)
        found.append((list(info.sizes()), DTYPES[info.dtype()]))
    return found


def open_program(path):
    """(the program at ``path`` with its ``forward`` loaded, executorch's version); one line
    when it fails."""
    if not os.path.isfile(path):
        raise AgentError(f"model {path} not found", status=2)
    bindings = runtimes.import_module(*MODULES)
    try:
        program = bindings._load_for_executorch(path)
        program.method_meta("forward")
    except Exception as exc:  # the bindings raise RuntimeError and others
        raise AgentError(f"executorch cannot load {path}: {one_line(exc)}") from None
    return program, _version()


def _version():
    try:
        return md.version("executorch")
    except md.PackageNotFoundError:  # a build without its metadata
        return "unknown"


#: The agent's commands this runtime adds: (name, function, default --runs, default --threads).
COMMANDS = ()
