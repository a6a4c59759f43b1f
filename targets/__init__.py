"""Conversion targets: one module per target, registered by name and imported only when used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from edge.core.cache import cache_key
from edge.core.errors import UsageError

if TYPE_CHECKING:
    from targets.base import ConvertSettings, Target

__all__ = ["REGISTRY", "get_target", "workdir_name"]

#: target name -> "module:Class"; the class implements targets.base.Target.
REGISTRY: dict[str, str] = {
    "tflite": "targets.tflite:TFLiteTarget",
    "onnxruntime": "targets.onnxruntime:OnnxRuntimeTarget",
    "openvino": "targets.openvino:OpenVINOTarget",
    "nnapi": "targets.nnapi:NNAPITarget",
}


def get_target(name: str) -> Target:
    """Instantiate the target registered under ``name``."""
    try:
        module_name, class_name = REGISTRY[name].split(":")
    except KeyError:
        raise UsageError(f"unknown target '{name}': choose one of {', '.join(REGISTRY)}") from None
    return getattr(importlib.import_module(module_name), class_name)()


def workdir_name(name: str, settings: ConvertSettings) -> str:
    """The cache directory name of a target's conversions with these settings.

    Targets that share a converter run (``converts_with``) share the directory; its key holds
    the settings and, of every target sharing it, the recipe version and the converters'
    versions: a recipe change or a converter upgrade never reuses an old artifact.
    """
    shared = get_target(name).caps.converts_with or name
    group = sorted(n for n in REGISTRY if n == shared
                   or get_target(n).caps.converts_with == shared)
    caps = [get_target(n).caps for n in group]
    key = cache_key(settings.digest(), *((n, c.recipe) for n, c in zip(group, caps, strict=True)),
                    recipe=max(c.recipe for c in caps),
                    converters=[d for c in caps for d in c.converters])
    return f"{shared}-{settings.digest()}-{key}"
