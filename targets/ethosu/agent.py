"""Arm Ethos-U on the device, for edge's agent: loading a Vela-compiled ``.vela.tflite`` with
LiteRT (``ai_edge_litert``, else ``tflite_runtime``) and the Ethos-U external delegate of the
board's BSP (NXP's i.MX 93 Linux BSP ships ``libethosu_op_delegate.so`` and the ``/dev/ethosu0``
driver node), on random inputs.

The file's Ethos-U operator runs only on the NPU, so without the delegate library or the driver
node the model cannot run at all: loading is refused naming what is missing (status 3).
``EDGE_ETHOSU_DELEGATE`` names another delegate library, ``EDGE_ETHOSU_DEVICE`` another node.

Zipped into the agent as ``edge_agent/runtime_ethos-u.py`` (devices/agentfile.py): Python 3.8,
the standard library, numpy and LiteRT only. Edge imports it on its host too.
"""

import importlib.metadata as md
import os

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import runtimes
    from devices.agent.errors import AgentError, one_line

NAME = "ethos-u"
SUFFIXES = (".vela.tflite",)
MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")
DISTRIBUTIONS = ("ai-edge-litert", "tflite-runtime")
COMMANDS = ()  # no per-layer times: the NPU runs the Ethos-U operator whole
DELEGATE = "libethosu_op_delegate.so"  # NXP's i.MX 93 BSP, /usr/lib
DEVICE = "/dev/ethosu0"  # the Ethos-U kernel driver's node
LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/lib/aarch64-linux-gnu",
                "/usr/lib/arm-linux-gnueabihf")


def load(path, threads):
    """A LiteRT interpreter with the Ethos-U delegate on random inputs; AgentError (status 3)
    naming the driver node or delegate library when the device lacks it."""
    np = runtimes.numpy()
    module = runtimes.import_module(*MODULES)
    delegate = ethosu_delegate(module)
    interpreter = module.Interpreter(model_path=path, num_threads=threads,
                                     experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               runtimes.random_input(np, list(detail["shape"]), detail["dtype"]))
    return interpreter.invoke, version_of(module)


def ethosu_delegate(module):
    """The loaded Ethos-U external delegate, after checking the driver node and library."""
    device = os.environ.get("EDGE_ETHOSU_DEVICE", DEVICE)
    library = os.environ.get("EDGE_ETHOSU_DELEGATE", DELEGATE)
    if not os.path.exists(device):
        raise AgentError("ethos-u: the Ethos-U driver is not loaded (" + device + " absent): "
                         "this device has no Ethos-U NPU, or its BSP's ethosu kernel driver "
                         "is not loaded", status=3)
    found = find_library(library)
    if found is None:
        raise AgentError("ethos-u: the Ethos-U delegate " + library + " is not installed "
                         "(looked in LD_LIBRARY_PATH and " + ", ".join(LIBRARY_DIRS) + "); it "
                         "comes with the board's BSP (NXP: tensorflow-lite-ethosu-delegate), "
                         "or set EDGE_ETHOSU_DELEGATE to its path", status=3)
    problem = runtimes.delegate_problem(found)
    if problem is not None:
        raise AgentError("ethos-u: the Ethos-U delegate " + found + " did not load: " + problem,
                         status=3)
    try:
        return module.load_delegate(found)
    except (ValueError, OSError, RuntimeError) as exc:
        raise AgentError("ethos-u: the Ethos-U delegate " + found + " did not load: "
                         + one_line(exc), status=3) from None


def find_library(library):
    """The path of ``library`` (a path, or a name searched as the dynamic loader would)."""
    if os.sep in library:
        return library if os.path.isfile(library) else None
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    for folder in paths + list(LIBRARY_DIRS):
        candidate = os.path.join(folder, library)
        if os.path.isfile(candidate):
            return candidate
    return None


def version_of(module):
    """The installed version of a LiteRT module's distribution."""
    for dist in DISTRIBUTIONS:
        if module.__name__.split(".")[0].replace("_", "-") == dist:
            try:
                return md.version(dist)
            except md.PackageNotFoundError:
                break
    return "unknown"
