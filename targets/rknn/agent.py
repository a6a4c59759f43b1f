"""RKNN on the device, for edge's agent: loading a ``.rknn`` model onto a Rockchip NPU with
rknn-toolkit-lite2 (``rknnlite.api``) on random inputs.

Without the RKNPU kernel driver (no /sys/kernel/debug/rknpu and no DRM render node bound to
the rknpu driver) or when rknnlite cannot start the NPU runtime, loading is refused with one
line naming the driver (exit 3): there is no CPU fallback for a .rknn file.

Zipped into the agent as ``edge_agent/runtime_rknn.py`` (devices/agentfile.py): Python 3.8, the
standard library, numpy and rknnlite only. Edge imports it on its host too.
"""

import ast
import glob
import importlib.metadata as md
import os

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
    from edge_agent.errors import AgentError
except ImportError:  # on edge's host
    from devices.agent import runtimes
    from devices.agent.errors import AgentError

NAME = "rknn"
SUFFIXES = (".rknn",)
MODULES = ("rknnlite.api",)
DISTRIBUTIONS = ("rknn-toolkit-lite2",)
COMMANDS = ()  # no agent command of its own
#: Where the RKNPU driver shows itself: its debugfs folder, or a DRM render node it drives.
DEBUGFS = "/sys/kernel/debug/rknpu"
RENDER_NODES = "/sys/class/drm/renderD*"
#: The model description rknn-toolkit2 embeds in a .rknn file (a Python literal).
_ATTRS = b"{'attrs':"


def load(path, threads):
    """rknnlite on the NPU and a closure running ``path`` on random inputs (``threads`` does
    not apply: the NPU's cores are chosen by the runtime)."""
    return _start(path, None)


def load_on(path, threads, unit):
    """As ``load``, on one core of the NPU: ``unit`` npuN is rknn's core mask NPU_CORE_N (a
    pack places each model on its own core; edge.core.pack)."""
    if not unit.startswith("npu") or not unit[3:].isdigit():
        raise AgentError(f"rknn places a model on an NPU core (npu0, npu1, ...), not {unit}",
                         status=2)
    return _start(path, "NPU_CORE_" + unit[3:])


def _start(path, core):
    why = driver_missing()
    if why:
        raise AgentError(f"rknn: the RKNPU driver is not loaded ({why}): a .rknn model runs "
                         "only on a Rockchip NPU with its kernel driver")
    inputs = model_inputs(path)
    api = runtimes.import_module(*MODULES)
    lite = api.RKNNLite(verbose=False)
    if lite.load_rknn(path) != 0:
        raise AgentError(f"rknn cannot read {path}: not a .rknn model for this runtime")
    if lite.init_runtime(**_mask(api.RKNNLite, core)) != 0:
        lite.release()
        raise AgentError("rknn: init_runtime failed: the RKNPU driver did not accept the model "
                         "(driver, librknnrt and the model's platform must match)")
    np = runtimes.numpy()
    feeds = [runtimes.random_input(np, shape, "float32") for shape in inputs]
    layout = "nchw" if any(len(shape) == 4 for shape in inputs) else None  # as the ONNX model
    return (lambda: lite.inference(inputs=feeds, data_format=layout)), version()


def _mask(lite, core):
    """init_runtime's core_mask for ``core`` (NPU_CORE_N); none asked: the runtime's choice.
    A core the runtime does not name (an NPU with fewer cores) is exit 2."""
    if core is None:
        return {}
    if not hasattr(lite, core):
        raise AgentError(f"rknn has no {core} on this device (rknnlite names the RK3588's "
                         "NPU_CORE_0..2)", status=2)
    return {"core_mask": getattr(lite, core)}


def driver_missing(debugfs=DEBUGFS, render_nodes=RENDER_NODES):
    """Why the RKNPU driver looks absent, or "" when it is there."""
    if os.path.isdir(debugfs):
        return ""
    for node in sorted(glob.glob(render_nodes)):
        driver = os.path.realpath(os.path.join(node, "device", "driver"))
        if "rknpu" in os.path.basename(driver).lower():
            return ""
    return f"{debugfs} absent and no /dev/dri render node is driven by rknpu"


def model_inputs(path):
    """The input shapes a .rknn file declares, in order (from its embedded description)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise AgentError(f"cannot read {path}: {exc.strerror}", status=2) from None
    attrs = _description(data).get("attrs", {})
    inputs = sorted((v.get("idx", 0), list(v.get("shape", [])))
                    for v in attrs.values() if isinstance(v, dict) and not v.get("is_output"))
    if not inputs:
        raise AgentError(f"{path} declares no input: not a model rknn-toolkit2 made", status=2)
    return [shape for _, shape in inputs]


def _description(data):
    """The dict literal that starts at the description marker (balanced braces)."""
    start = data.find(_ATTRS)
    depth = 0
    for end in range(start, len(data) if start >= 0 else 0):
        depth += {123: 1, 125: -1}.get(data[end], 0)  # { and }
        if depth == 0:
            try:
                return ast.literal_eval(data[start:end + 1].decode("utf-8"))
            except (ValueError, SyntaxError, UnicodeDecodeError):
                break
    raise AgentError("the model has no description rknn-toolkit2 writes: not a .rknn file",
                     status=2)


def version():
    """rknn-toolkit-lite2's version."""
    try:
        return md.version(DISTRIBUTIONS[0])
    except md.PackageNotFoundError:
        return "unknown"
