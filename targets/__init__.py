"""Conversion targets: one module per target, registered by name and imported only when used."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from edge.core.cache import cache_key
from edge.core.errors import UsageError

if TYPE_CHECKING:
    from edge.core.toolchain import Toolchain
    from targets.base import ConvertSettings, Target

__all__ = ["REGISTRY", "TOOLCHAINS", "artifact_suffixes", "declared_toolchains", "get_target",
           "source_files", "target_for_suffix", "workdir_name"]

#: target name -> "module:Class"; the class implements targets.base.Target.
REGISTRY: dict[str, str] = {
    "tflite": "targets.tflite:TFLiteTarget",
    "onnxruntime": "targets.onnxruntime:OnnxRuntimeTarget",
    "openvino": "targets.openvino:OpenVINOTarget",
    "nnapi": "targets.nnapi:NNAPITarget",
    "litert": "targets.litert:LiteRTTarget",  # reads the original .tflite (no ONNX reference)
}


#: toolchain name -> "module:attribute" of the Toolchain of a converter whose target is not
#: registered yet (a registered target declares its own in ``caps.toolchain``).
TOOLCHAINS: dict[str, str] = {
    "rknn-toolkit2": "targets.rknn.convert:TOOLCHAIN",  # the RKNN runtime comes with issue 28
}


def declared_toolchains() -> dict[str, Toolchain]:
    """Every toolchain edge manages, by name: the registered targets' and TOOLCHAINS."""
    found = {t.caps.toolchain.name: t.caps.toolchain for t in _importable() if t.caps.toolchain}
    for name, where in TOOLCHAINS.items():
        module_name, attribute = where.split(":")
        found.setdefault(name, getattr(importlib.import_module(module_name), attribute))
    return dict(sorted(found.items()))


def get_target(name: str) -> Target:
    """Instantiate the target registered under ``name``."""
    try:
        module_name, class_name = REGISTRY[name].split(":")
    except KeyError:
        raise UsageError(f"unknown target '{name}': choose one of {', '.join(REGISTRY)}") from None
    return getattr(importlib.import_module(module_name), class_name)()


def _importable() -> list[Target]:
    """Every registered target whose module imports here."""
    found = []
    for name in REGISTRY:
        try:
            found.append(get_target(name))
        except ImportError:
            continue
    return found


def target_for_suffix(suffix: str) -> Target | None:
    """The target that owns artifacts with this suffix (one that converts on its own, not
    through another's run: ``.tflite`` is TFLite's, not NNAPI's), or None."""
    return next((t for t in _importable() if t.caps.suffix == suffix
                 and t.caps.converts_with is None and t.caps.reads == ".onnx"), None)


def artifact_suffixes() -> tuple[str, ...]:
    """The suffixes of the artifacts the registered targets make."""
    return tuple(dict.fromkeys(t.caps.suffix for t in _importable()))


def workdir_name(name: str, settings: ConvertSettings) -> str:
    """The cache directory name of a target's conversions with these settings.

    Targets that share a converter run (``converts_with``) share the directory; its key holds
    the settings and, of every target sharing it, the recipe version, the converters' versions
    and a digest of its module's source: a recipe change, a converter upgrade or an edit of the
    target's code never reuses an old artifact.
    """
    shared = get_target(name).caps.converts_with or name
    group = [t for t in _importable() if t.name == shared or t.caps.converts_with == shared]
    key = cache_key(settings.digest(), *((t.name, t.caps.recipe, _source_digest(t))
                                         for t in sorted(group, key=lambda t: t.name)),
                    recipe=max(t.caps.recipe for t in group),
                    converters=["numpy", *(d for t in group for d in t.caps.converters)],
                    toolchain={f"{t.name}:{d}": v for t in group if t.caps.toolchain
                               for d, v in t.caps.toolchain.versions().items()})
    return f"{shared}-{settings.digest()}-{key}"


def _source_digest(target: Target) -> str:
    """sha256 (16 hex) of the module that defines the target's class and of the ``targets``
    modules it imports from (e.g. the TFLite target's onnx2tf run and runner)."""
    import hashlib

    digest = hashlib.sha256()
    for source in source_files(target):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def source_files(target: Target) -> list[Path]:
    """The source files a target's conversions depend on, sorted: its module's and those of
    the ``targets`` modules whose classes or functions that module imports."""
    import inspect
    import sys

    module = sys.modules[type(target).__module__]
    names = {module.__name__} | {
        value.__module__ for value in vars(module).values()
        if (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__.startswith("targets.")}
    files = (inspect.getsourcefile(sys.modules[name]) for name in names)
    return sorted(Path(f) for f in files if f)
