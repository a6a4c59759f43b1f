"""NCNN on the device, for edge's agent: load a ``.ncnn.param`` (its weights ``.bin`` and its
settings ``.json`` beside it, under the same stem) on the CPU, or on the device's Vulkan GPU for a
``.vk.ncnn.param``, and hand back a closure running it once on random inputs.

The settings say what pnnx's blobs are (``in0``..., ``out0``...: the reference model's inputs
and outputs in order, with their shapes and dtypes) and how NCNN computes: fp32 (NCNN's fp16
storage and arithmetic off: they are on by default and an ARMv8.2 core would use them) or fp16.
Edge's host verifies artifacts with these same functions. Python 3.8, the standard library,
numpy and ncnn only.
"""

import json
import os

try:  # inside the agent zipapp on a device
    from edge_agent import observe, runtimes
    from edge_agent.errors import AgentError, one_line
except ImportError:  # on edge's host
    from devices.agent import observe, runtimes
    from devices.agent.errors import AgentError, one_line

NAME = "ncnn"
SUFFIXES = (".vk.ncnn.param", ".ncnn.param")
MODULES = ("ncnn",)
DISTRIBUTIONS = ("ncnn",)
#: The agent's commands this runtime adds: none (NCNN's Python API gives no per-layer times).
COMMANDS = ()
#: The companions' suffixes after the artifact's stem (weights, settings).
WEIGHTS, SETTINGS = ".bin", ".json"
_FP16 = ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic")


def load(path, threads):
    """(run once on random inputs, ncnn version) for a ``.ncnn.param``."""
    np = runtimes.numpy()
    ncnn = runtimes.import_module(*MODULES)
    settings = read_settings(path)
    net = open_net(ncnn, path, settings, threads)
    feeds = [runtimes.random_input(np, spec["shape"], spec["dtype"])
             for spec in settings["inputs"]]
    return observe.Loaded(lambda: run_net(np, ncnn, net, settings, feeds),
                          lambda: dict(ncnn_observed(net, settings),
                                       versions=observe.versions_of(
                                           lambda: ncnn_versions(ncnn, settings)))), \
        ncnn.__version__


def ncnn_versions(ncnn, settings):
    """NCNN's version, and on Vulkan the GPU and its driver and API versions (GPU 0's)."""
    found = {"ncnn": str(ncnn.__version__)}
    if settings.get("vulkan") and ncnn.get_gpu_count() > 0:
        info = ncnn.get_gpu_info(0)
        found.update({"vulkan device": str(info.device_name()),
                      "vulkan driver": str(info.driver_version()),
                      "vulkan api": str(info.api_version())})
    return found


def ncnn_observed(net, settings):
    """Each layer of a loaded net and where NCNN runs it: on the Vulkan GPU when the net
    computes there and the layer supports Vulkan (NCNN routes each layer by that flag, the
    others run on the CPU between transfers); f32 with fp16 off, else "f16 allowed" (NCNN
    does not say whether the device took it). Its Python API shows no weight shapes: no MACs,
    shares by layers."""
    gpu, fp16 = bool(settings.get("vulkan")), bool(settings.get("fp16"))
    layers = []
    for layer in net.layers():
        on_gpu = gpu and bool(layer.support_vulkan)
        precision = "f16 allowed" if fp16 else "f32"
        layers.append(observe.layer(layer.name, layer.type, "GPU" if on_gpu else "CPU",
                                    precision, "Vulkan" if on_gpu else "CPU kernels"))
    return {"method": "NCNN's layers and the Vulkan support it routes each by",
            "layers": [rec for rec in layers if rec["op"] not in NOT_LAYERS],
            "made_for": "GPU" if gpu else ""}


#: NCNN layers that only hold the inputs: left out.
NOT_LAYERS = frozenset({"Input"})


def stem_of(path):
    """The artifact's path without its suffix (``m.vk.ncnn.param`` -> ``m``)."""
    for suffix in SUFFIXES:
        if path.endswith(suffix):
            return path[:-len(suffix)]
    raise AgentError(f"{path} is not a .ncnn.param file", status=2)


def read_settings(path):
    """The ``.json`` beside the artifact: blobs, shapes, dtypes, precision, unit."""
    companion = stem_of(path) + SETTINGS
    try:
        with open(companion, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise AgentError(f"ncnn: cannot read the settings {companion} that travel with "
                         f"{os.path.basename(path)} ({one_line(exc)}); deploy the bundle's "
                         "files together", status=2) from None


def open_net(ncnn, path, settings, threads):
    """An ``ncnn.Net`` loaded the way ``settings`` say (fp16 on or off, CPU or Vulkan)."""
    net = ncnn.Net()
    fp16 = bool(settings.get("fp16"))
    for option in _FP16:
        setattr(net.opt, option, fp16)
    net.opt.use_bf16_storage = False
    net.opt.num_threads = threads
    if settings.get("vulkan"):
        _use_gpu(ncnn, net)
    else:
        net.opt.use_vulkan_compute = False
    weights = stem_of(path) + WEIGHTS
    if net.load_param(path) != 0 or net.load_model(weights) != 0:
        raise AgentError(f"ncnn cannot load {os.path.basename(path)} with {weights}")
    return net


def _use_gpu(ncnn, net):
    """Vulkan compute on GPU 0, or AgentError when the device shows none."""
    if ncnn.get_gpu_count() < 1:
        raise AgentError("ncnn: no Vulkan GPU is usable here (is the GPU's Vulkan driver "
                         "installed? e.g. mesa-vulkan-drivers: v3dv on a Raspberry Pi, panvk "
                         "or the vendor's Mali driver on an RK3588)")
    net.opt.use_vulkan_compute = True
    net.set_vulkan_device(0)


def run_net(np, ncnn, net, settings, feeds):
    """The outputs of one run (numpy, the reference's shapes and dtypes) for ``feeds`` in the
    reference's input order; NCNN's Mats have no batch dimension: it is dropped and restored."""
    extractor = net.create_extractor()
    for spec, value in zip(settings["inputs"], feeds):
        array = np.ascontiguousarray(np.asarray(value, dtype=np.float32).reshape(spec["mat"]))
        extractor.input(spec["blob"], ncnn.Mat(array))
    outputs = []
    for spec in settings["outputs"]:
        status, mat = extractor.extract(spec["blob"])
        if status != 0:
            raise AgentError(f"ncnn failed to compute {spec['blob']} (status {status})")
        outputs.append(_shaped(np, np.array(mat), spec))
    return outputs


def _shaped(np, array, spec):
    """An output in the reference's shape (its batch dimension restored) and dtype."""
    size = 1
    for d in spec["shape"]:
        size *= d
    shaped = array.reshape(spec["shape"]) if array.size == size else array[None]
    return shaped.astype(spec["dtype"])
