"""Conversion targets: one module per target, registered by name and imported only when used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from edge.core.errors import UsageError

if TYPE_CHECKING:
    from targets.base import Target

__all__ = ["REGISTRY", "get_target"]

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
