"""Runtimes on the device, found rather than listed: each runtime's folder
(``targets/<name>/``) holds its agent module, zipped into the agent beside this one; here it is
found by its suffixes, imported, asked its version and to load a model with random inputs (a
zero-argument callable that runs it once). Helpers the runtimes' modules share."""

import importlib
import importlib.metadata as md
import os
import pkgutil
import sys

from .errors import AgentError, one_line

#: In the zipapp, each runtime's agent module sits beside this one as ``runtime_<name>.py``.
PREFIX = "runtime_"
#: On edge's host, the runtimes are found through these entry points (targets/<name>/).
GROUP = "edge.targets"
_FOUND = {}  # type: dict


def plugins():
    """Runtime name -> its agent module (``NAME``, ``SUFFIXES``, ``MODULES``,
    ``DISTRIBUTIONS``, ``COMMANDS``, ``load(path, threads)``): those zipped beside this module
    on a device, else on edge's host those the registered runtimes name."""
    if not _FOUND:
        _FOUND.update(_bundled() or _installed())
    return _FOUND


def _bundled():
    package = __name__.rpartition(".")[0]
    names = [m.name for m in pkgutil.iter_modules(sys.modules[package].__path__)
             if m.name.startswith(PREFIX)]
    modules = [importlib.import_module(package + "." + name) for name in sorted(names)]
    return {m.NAME: m for m in modules}


def _installed():
    """Every ``edge.targets`` entry point's declared ``agent`` module (edge's host only)."""
    declared = [ep.load() for ep in md.entry_points(group=GROUP)]
    modules = [importlib.import_module(d.agent) for d in declared if d.agent]
    return {m.NAME: m for m in sorted(modules, key=lambda m: m.NAME)}


def suffixes():
    """Suffix -> runtime name, from every runtime's agent module."""
    return {s: name for name, m in plugins().items() for s in m.SUFFIXES}


def model_runtime(model):
    """The runtime that runs ``model`` (by suffix); a missing file or unknown suffix is exit 2."""
    if not os.path.isfile(model):
        raise AgentError(f"model {model} not found", status=2)
    runtime = suffixes().get(os.path.splitext(model)[1])
    if runtime is None:
        raise AgentError(f"no runtime for {model}", status=2)
    return runtime


def threads_for(requested):
    """0: all of the device's cores; else at most that many."""
    cores = os.cpu_count() or 1
    return min(requested, cores) if requested > 0 else cores


def load(model, threads):
    """(run, runtime version) for ``model``: its runtime imported first (import time is not
    load time), then loaded; any load failure is one line (exit 3)."""
    runtime = model_runtime(model)
    numpy()
    plugin = plugins()[runtime]
    import_module(*plugin.MODULES)
    try:
        return plugin.load(model, threads)
    except AgentError:
        raise
    except Exception as exc:  # noqa: BLE001 - any runtime's load failure is one line
        raise AgentError(f"{runtime} cannot load {model}: {one_line(exc)}") from None


def numpy():
    """numpy, or a clear error."""
    try:
        import numpy
    except ImportError:
        raise AgentError("numpy is not installed on the device") from None
    return numpy


def import_module(*names):
    """The first of ``names`` that imports, or 'runtime not installed: pip install ...'."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    package = names[0].split(".")[0].replace("_", "-")  # ai_edge_litert: ai-edge-litert
    raise AgentError("runtime not installed on the device: pip install " + package)


def runtime_versions():
    """Runtime name -> version for every runtime installed here."""
    found = {}
    for runtime, plugin in plugins().items():
        for dist in plugin.DISTRIBUTIONS:
            try:
                found[runtime] = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
    return found


def random_input(np, shape, dtype):
    """Uniform [0, 1) floats, 0/1 integers (valid ids, masks, flags) or bools (seed 0);
    symbolic dims as 1, and a 0-d input stays a 0-d array (never a numpy scalar)."""
    shape = [dim(d) for d in shape]
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(0)
    if dtype.kind in "iub":
        return np.asarray(rng.integers(0, 2, size=shape)).astype(dtype)
    return np.asarray(rng.random(shape, dtype=np.float32)).astype(dtype)


def dim(value):
    """A concrete dimension: symbolic or unknown (-1, None, 'batch') becomes 1."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        return 1
    return value if value > 0 else 1
