"""The Edge TPU on the device, for edge's agent: loading a ``.edgetpu.tflite`` with TFLite's
interpreter and the Edge TPU delegate (``load_delegate("libedgetpu.so.1")``, as pycoral's
``make_interpreter`` does), on random inputs.

Zipped into the agent as ``edge_agent/runtime_edgetpu.py``: the standard library, numpy and
``tflite_runtime`` (Mendel Linux's, which pycoral pins) or ``ai_edge_litert`` only, and Python
3.7 syntax -- the Coral Dev Board's Mendel Linux (Debian 10) has Python 3.7. A device without
the library, or without an Edge TPU (``/dev/apex_0``: the PCIe/Dev Board's apex driver; or a
Coral USB Accelerator), is refused with one line naming what is missing (exit 3).
"""

import ctypes
import glob
import os
import sys

try:  # inside the agent zipapp on a device
    from edge_agent import runtimes
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import runtimes
    from devices.agent.errors import AgentError, one_line

NAME = "edgetpu"
SUFFIXES = (".edgetpu.tflite",)
MODULES = ("tflite_runtime.interpreter", "ai_edge_litert.interpreter")
#: What the device reports as its Edge TPU runtime: Coral's pycoral (Mendel Linux has it; python3-
#: pycoral from Coral's apt repository elsewhere). Not tflite-runtime: any TFLite device has it.
DISTRIBUTIONS = ("pycoral",)
COMMANDS = ()  # no agent command of its own: the compiled graph is one Edge TPU op
LIBRARY = "libedgetpu.so.1"
#: The Dev Board's (and M.2 / Mini PCIe cards') Edge TPU, made by the apex (gasket) driver.
PCIE_DEVICE = "/dev/apex_0"
#: USB vendor:product of the Coral USB Accelerator before and after its firmware is loaded.
USB_IDS = (("1a6e", "089a"), ("18d1", "9302"))
SYS_USB = "/sys/bus/usb/devices"
INSTALL = ("install it from Coral's apt repository (coral-edgetpu-stable): "
           "sudo apt-get install libedgetpu1-std (Mendel Linux has it)")


def load(path, threads):
    """An interpreter with the Edge TPU delegate on random inputs: (invoke, version)."""
    np = runtimes.numpy()
    module = runtimes.import_module(*MODULES)
    library = edgetpu_library()
    require_device()
    try:
        delegate = module.load_delegate(LIBRARY)
    except (ValueError, OSError, AttributeError) as exc:  # AttributeError: not a delegate
        raise AgentError(f"{NAME}: {LIBRARY} found no usable Edge TPU: {one_line(exc)}") \
            from None
    interpreter = module.Interpreter(model_path=path, experimental_delegates=[delegate],
                                     num_threads=threads)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"],
                               runtimes.random_input(np, list(detail["shape"]), detail["dtype"]))
    return interpreter.invoke, version_of(module, library)


def edgetpu_library():
    """libedgetpu loaded with ctypes, or AgentError naming it and how to install it."""
    try:
        return ctypes.CDLL(LIBRARY)
    except OSError:
        raise AgentError(f"{NAME}: {LIBRARY} (the Edge TPU runtime) is not installed: "
                         f"{INSTALL}") from None


def require_device():
    """AgentError unless an Edge TPU is attached: the apex driver's node or a USB one."""
    if os.path.exists(PCIE_DEVICE) or usb_accelerators():
        return
    usb = ", ".join(f"{vendor}:{product}" for vendor, product in USB_IDS)
    raise AgentError(f"{NAME}: no Edge TPU found: {PCIE_DEVICE} is absent (the apex driver is "
                     "not loaded: on a Dev Board, modprobe apex; for a PCIe card, install "
                     f"gasket-dkms) and no Coral USB Accelerator is attached ({usb})")


def usb_accelerators():
    """The sysfs folders of attached Coral USB Accelerators."""
    found = []
    for folder in glob.glob(os.path.join(SYS_USB, "*")):
        if (_read(folder, "idVendor"), _read(folder, "idProduct")) in USB_IDS:
            found.append(folder)
    return found


def _read(folder, name):
    try:
        with open(os.path.join(folder, name)) as handle:
            return handle.read().strip().lower()
    except OSError:
        return ""


def version_of(module, library):
    """'<interpreter package> <version>, libedgetpu <version>' (what the device reports)."""
    package = module.__name__.split(".")[0]
    version = getattr(sys.modules.get(package), "__version__", "unknown")
    return f"{package} {version}, libedgetpu {_library_version(library)}"


def _library_version(library):
    """libedgetpu's own version string (edgetpu_version() of its C API), else 'unknown'."""
    function = getattr(library, "edgetpu_version", None)
    if function is None:
        return "unknown"
    function.restype = ctypes.c_char_p
    text = function()
    return text.decode(errors="replace") if text else "unknown"
