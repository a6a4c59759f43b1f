"""NNAPI (Android's accelerator API): everything about it in one folder. ``target`` checks
which operators of the TFLite target's int8 artifact NNAPI runs at an Android API level and
keeps the artifact (a .tflite) when they all do. Its files are .tflite: on a device and here
the TFLite runtime loads and times them (on the CPU), so it declares no agent module, profiler
or suffix of its own, and provisioning does not install it (NNAPI is part of Android)."""

from targets.base import Runtime
from targets.nnapi.target import (
    API_LEVELS,
    DEFAULT_API_LEVEL,
    RULES,
    NNAPIReport,
    NNAPITarget,
    OpRule,
    OpVerdict,
    nnapi_report,
)

__all__ = ["API_LEVELS", "DEFAULT_API_LEVEL", "RULES", "RUNTIME", "NNAPIReport", "NNAPITarget",
           "OpRule", "OpVerdict", "nnapi_report"]

RUNTIME = Runtime(
    name="nnapi",
    targets=(("nnapi", "targets.nnapi.target:NNAPITarget"),),
    suffixes=(),
    agent=None,
    profiler=None,
    provision=None,
    label="NNAPI", colour="#e45756",
    note="the NNAPI artifact on LiteRT's CPU kernels: no NNAPI accelerator here")
