"""Runtimes on the device, found rather than listed: each runtime's folder
(``targets/<name>/``) holds its agent module, zipped into the agent beside this one; here it is
found by its suffixes, imported, asked its version and to load a model with random inputs (a
zero-argument callable that runs it once). Helpers the runtimes' modules share."""

import ctypes
import importlib
import importlib.metadata as md
import importlib.util
import os
import pkgutil
import sys

from .errors import AgentError, one_line

#: In the zipapp, each runtime's agent module sits beside this one as ``runtime_<name>.py``.
PREFIX = "runtime_"
#: On edge's host, the runtimes are found through these entry points (targets/<name>/).
GROUP = "edge.targets"
#: ... and through the folders of this package that declare ``RUNTIME``.
PACKAGE = "targets"
_FOUND = {}  # type: dict


def plugins():
    """Runtime name -> its agent module (``NAME``, ``SUFFIXES``, ``MODULES``,
    ``DISTRIBUTIONS``, ``COMMANDS``, ``load(path, threads)``, and optionally ``MISSING``: how
    to install it when it is not ``pip install`` of its first distribution): those zipped
    beside this module on a device, else on edge's host those the registered runtimes name."""
    if not _FOUND:
        _FOUND.update(_bundled() or _installed())
    return _FOUND


def _bundled():
    package = __name__.rpartition(".")[0]
    names = [m.name for m in pkgutil.iter_modules(sys.modules[package].__path__)
             if m.name.startswith(PREFIX)]
    modules = [importlib.import_module(package + "." + name) for name in sorted(names)]
    return {m.NAME: m for m in modules}


def declared():
    """Every registered runtime's declaration (edge's host only): the folders of the
    ``targets`` package that declare ``RUNTIME``, then the ``edge.targets`` entry points."""
    return [r for r in (*_folders(), *(ep.load() for ep in md.entry_points(group=GROUP)))
            if r is not None]


def _installed():
    """Every registered runtime's declared ``agent`` module (edge's host only)."""
    modules = [importlib.import_module(d.agent) for d in declared() if d.agent]
    return {m.NAME: m for m in sorted(modules, key=lambda m: m.NAME)}


def _folders():
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return []
    folders = pkgutil.iter_modules(list(spec.submodule_search_locations))
    return [getattr(importlib.import_module(PACKAGE + "." + f.name), "RUNTIME", None)
            for f in folders if f.ispkg]


def suffixes():
    """Suffix -> runtime name, from every runtime's agent module, longest suffix first (an
    accelerator's ".vela.tflite" before ".tflite")."""
    found = {s: name for name, m in plugins().items() for s in m.SUFFIXES}
    return dict(sorted(found.items(), key=lambda item: (-len(item[0]), item[0])))


def suffix_of(model):
    """The longest runtime suffix ``model``'s name ends with, else its last one."""
    name = os.path.basename(model).lower()
    found = [s for s in suffixes() if name.endswith(s) and len(name) > len(s)]
    return found[0] if found else os.path.splitext(model)[1]


def model_runtime(model):
    """The runtime that runs ``model`` (by suffix); a missing file or unknown suffix is exit 2."""
    if not os.path.isfile(model):
        raise AgentError(f"model {model} not found", status=2)
    runtime = suffixes().get(suffix_of(model))
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
    try:
        import_module(*plugin.MODULES)
    except AgentError:
        hint = getattr(plugin, "MISSING", None) or "pip install " + plugin.DISTRIBUTIONS[0]
        raise AgentError("runtime not installed on the device: " + hint) from None
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


def delegate_problem(library):
    """Why the TFLite external delegate ``library`` cannot load (one line), or None.

    Checked before LiteRT's ``load_delegate``: when its loader fails it leaves a half-built
    ``Delegate`` whose ``__del__`` raises later, wherever the garbage collector happens to run
    (on CPython 3.11, inside another ``compile()`` that then fails with "AST constructor
    recursion depth mismatch")."""
    try:
        handle = ctypes.CDLL(library)
    except OSError as exc:
        return one_line(exc)
    if not hasattr(handle, "tflite_plugin_create_delegate"):
        return "it exports no tflite_plugin_create_delegate (not a TFLite external delegate)"
    return None


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
