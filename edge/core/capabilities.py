"""What a conversion target can do, declared by the target itself (never probed at run time).

Targets live a layer above (``targets/``); the plan and the chooser read these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from edge.core.toolchain import Toolchain

__all__ = ["Capabilities", "IsaNeed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class IsaNeed:
    """A precision the runtime computes only on CPUs of ``arch`` with one of ``isa``: elsewhere
    it would silently compute in fp32 (the device is refused), and this host must have it too to
    verify an artifact (else it waits for one that has)."""

    arch: str  # "x86_64"
    isa: frozenset[str]  # any one of these instruction sets, as profiles name them
    names: str  # how messages name them: "AVX512-BF16 or AMX"
    computed_by: str  # who computes it: "OpenVINO's CPU plugin"


@dataclass(frozen=True, kw_only=True, slots=True)
class Capabilities:
    """A target's declared abilities."""

    runtime: str  # the runtime that runs its artifacts, on the device and here
    precisions: tuple[str, ...]
    suffix: str  # the main artifact file's suffix
    companions: tuple[str, ...] = ()  # suffixes of files that travel with it (".bin")
    keeps_float: bool = False  # honours ConvertSettings.keep_float: accuracy recovery can use it
    #: how its int8 may get a mixed plan (edge.flows.mixed): "layers" (its runtime times every
    #: layer of an artifact), "kinds" (a whole-model trial with the layers between its int8
    #: convolutions in float: its runtime fuses quantized kernels past per-node times), "" (none)
    layer_plan: Literal["", "layers", "kinds"] = ""
    converts_with: str | None = None  # a target whose work directory (converter run) it shares
    converts_in_background: bool = False  # its converter is a child process: start it early
    archs: tuple[str, ...] = ()  # device architectures its runtime runs on; () = any
    modules: tuple[str, ...] = ()  # host modules it needs to convert and verify
    extra: str = "all"  # the pip extra that installs them
    converters: tuple[str, ...] = ()  # distributions whose versions key its cache
    recipe: int = 1  # bump when the conversion recipe changes: cached artifacts are rebuilt
    reads: str = ".onnx"  # the reference format it converts from (".tflite": the original)
    toolchain: Toolchain | None = None  # a converter run in its own environment (edge toolchains)
    formats: tuple[str, ...] = ()  # model file formats it runs as they are (the user's file)
    #: precision -> the instructions it needs on the device's CPU (and on this host)
    needs_isa: tuple[tuple[str, IsaNeed], ...] = ()
    #: the device's unit its artifacts run on, when not the CPU ("Rockchip NPU"): its figures
    #: on this host are never timings of the device
    accelerator: str = ""
    #: how ``load`` runs an accelerator's artifact on this host to verify it: in the vendor's
    #: "simulated" NPU, with the "reference" kernels of the format, or the same graph on the
    #: host's "cpu"
    host_runs: Literal["", "simulated", "reference", "cpu"] = ""
    #: offers ``node_outputs`` (``targets.base.NodeOutputsTarget``): every node's output of an
    #: artifact by the ONNX tensor names it keeps, to find where an fp32 departs from the original
    node_outputs: bool = False
    #: offers ``serving_files`` (``targets.base.ServingTarget``): a serving engine's config for
    #: its artifact, with the settings edge verified it under, written into the bundle
    serving: bool = False
    #: formats of the user's original file (``Origin.format``: "torch") the target converts
    #: itself when there is one (``targets.base.OriginTarget.for_origin``); it converts the
    #: reference ONNX otherwise
    origin_formats: tuple[str, ...] = ()
    #: ONNX operators its int8-dynamic quantizes; a model with none of them gets no
    #: int8-dynamic candidate (() = any model)
    dynamic_ops: tuple[str, ...] = ()

    def runs_on(self, arch: str) -> bool:
        """Whether its runtime runs on a device of this architecture."""
        return not self.archs or arch in self.archs

    def isa_need(self, precision: str) -> IsaNeed | None:
        """The instructions ``precision`` needs, None when it runs wherever the runtime runs."""
        return dict(self.needs_isa).get(precision)
