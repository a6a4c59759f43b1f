"""OpenVINO on Intel's accelerators: the NPU (Intel AI Boost) and the integrated GPU (Arc).

An OpenVINO IR is device-neutral: a device compiles it when it loads it. So these targets share
the CPU target's conversion (its work directory: one IR per precision) and add what the device
needs to load it where it was meant to run: a copy named ``model_<p>_npu.npu.xml``
(``_gpu.gpu.xml``) with its weights (``model_<p>_npu.bin``) and a companion JSON naming the
device and its compile properties, from the profile's accelerator options (``{device: NPU}``,
``{device: GPU}``, or a priority list such as ``AUTO:NPU,GPU,CPU``). The agent
(targets/openvino/agent.py) reads the JSON, refuses a device OpenVINO does not see, compiles on
it and times it.

Verification here runs the same IR on this host's CPU plugin in the precision the device
computes (``Capabilities.host_runs`` "cpu"): f32 for an fp32 IR on the GPU (compiled with
INFERENCE_PRECISION_HINT=f32, whose default there is f16); f16 for everything else on either
unit. Where the CPU plugin computes f16 (ARM CPUs, x86 CPUs with f16 arithmetic such as
AVX512-FP16) it is asked to; elsewhere it computes f32 (asked for f16, the plugin gives f32, or
bf16 on an AVX512-BF16 CPU without f16, and edge then compiles again in f32), so only the fp16
weights (the IR's) and the rounding of the inputs and outputs to fp16 are emulated, not fp16
activations between layers.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision, workdir_lock
from targets.openvino.agent import SPEC_KEY, accelerator_spec, listed_devices, weights_of
from targets.openvino.target import OpenVINORunner, OpenVINOTarget, _core, cpu_config
from targets.openvino.target import computes as precision_of

__all__ = ["UNITS", "AcceleratorRunner", "OpenVINOGPUTarget", "OpenVINONPUTarget", "Unit",
           "device_spec"]

DEFAULT_SETTINGS = ConvertSettings()
#: Device families a profile's ``device`` option may list (OpenVINO's plugin names).
FAMILIES = ("NPU", "GPU", "CPU")
#: Prefixes of OpenVINO's virtual devices that take a priority list.
VIRTUAL = ("AUTO", "MULTI", "HETERO")


@dataclass(frozen=True, kw_only=True, slots=True)
class Unit:
    """One Intel accelerator as an OpenVINO target sees it."""

    target: str  # "openvino-npu"
    device: str  # the default OpenVINO device name: "NPU"
    words: str  # how reports name it: "Intel NPU"
    suffix: str  # its artifacts' suffix: ".npu.xml"
    precisions: tuple[str, ...]  # what it computes, first the one it computes best


NPU = Unit(target="openvino-npu", device="NPU", words="Intel NPU", suffix=".npu.xml",
           precisions=("int8", "fp16"))
GPU = Unit(target="openvino-gpu", device="GPU", words="Intel GPU", suffix=".gpu.xml",
           precisions=("fp16", "int8", "fp32"))
UNITS = (NPU, GPU)


def _caps(unit: Unit) -> Capabilities:
    """The CPU target's declaration, for ``unit``'s precisions and files."""
    base = OpenVINOTarget.caps
    return Capabilities(
        runtime="openvino", precisions=unit.precisions, suffix=unit.suffix,
        companions=(weights_suffix(unit), ".json"), converts_with="openvino", archs=("x86_64",),
        modules=base.modules, extra=base.extra, converters=base.converters, recipe=1,
        accelerator=unit.words, host_runs="cpu")


def weights_suffix(unit: Unit) -> str:
    """The weights' suffix for ``unit``'s IR (".npu.bin" beside ".npu.xml"): the name a plain
    ``read_model("model.npu.xml")`` looks for."""
    return unit.suffix.removesuffix(".xml") + ".bin"


def device_spec(unit: Unit, precision: str, options: dict[str, str]) -> dict[str, Any]:
    """What the device compiles ``precision``'s IR with: the profile's ``device`` option (else
    the unit's own), latency hint, and on a GPU the precision it computes (f16 unless fp32)."""
    device = options.get("device", unit.device).strip()
    _check_device(device, unit)
    computes = "f32" if precision == "fp32" else "f16"
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if device.split(".")[0] == "GPU":  # the GPU plugin computes f16 unless told otherwise
        config["INFERENCE_PRECISION_HINT"] = computes
    return {"device": device, "unit": unit.words, "computes": computes, "config": config}


def _check_device(device: str, unit: Unit) -> None:
    """ConversionError unless ``device`` is an OpenVINO device (or priority list) naming
    ``unit``'s family."""
    virtual = device.split(":", 1)[0] if ":" in device else None
    listed = listed_devices(device)
    if (virtual is not None and virtual not in VIRTUAL) or not listed \
            or any(d not in FAMILIES for d in listed):
        raise ConversionError(f"profile accelerator option device '{device}': give an OpenVINO "
                              f"device ({', '.join(FAMILIES)}) or a priority list such as "
                              "AUTO:NPU,GPU,CPU")
    if unit.device not in listed:
        raise ConversionError(f"profile accelerator option device '{device}' does not name "
                              f"the {unit.device} that {unit.target} targets")


class _UnitTarget:
    """An OpenVINO IR compiled on an Intel accelerator at load (see the module)."""

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """None: the device's plugin decides at compile time (the NPU compiler takes the whole
        graph or fails; the GPU plugin runs every OpenVINO op)."""
        return None

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: OpenVINO offers no estimate without the device."""
        return None

    name: ClassVar[str]
    unit: ClassVar[Unit]
    caps: ClassVar[Capabilities]

    def missing(self) -> str | None:
        """The CPU target's packages (the unit's plugin and driver are on the device)."""
        return OpenVINOTarget().missing()

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """The CPU target's IR for ``precision`` (its run, shared), copied under the unit's
        suffix with the companion JSON naming the device."""
        check_precision(self, precision)
        spec = device_spec(self.unit, precision, dict(settings.accelerator))
        ir, notes = OpenVINOTarget().convert(model, precision, calib=calib, workdir=workdir,
                                             settings=settings)
        base = f"{ir.stem}_{self.unit.device.lower()}"  # companions: base + .npu.bin, .json
        out = ir.with_name(base + self.unit.suffix)
        with no_space_as(out), workdir_lock(Path(workdir)):
            _write(ir, out, base, spec)
        return out, (*notes, *_notes(self.unit, spec))

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> AcceleratorRunner:
        """The IR on this host's CPU plugin computing as the unit does (see the module)."""
        spec = accelerator_spec(str(artifact))
        if spec is None:
            raise FileNotFoundError(f"{artifact}: its companion .json naming the device is "
                                    "not beside it")
        ir = _core().read_model(str(artifact), weights_of(str(artifact)))
        return AcceleratorRunner(_cpu_compiled(ir, threads, spec["computes"]), model,
                                 round_io=spec["computes"] == "f16")


def _cpu_compiled(ir: Any, threads: int, computes: str) -> Any:
    """``ir`` compiled on the CPU plugin asking for ``computes`` (f16 may come back f32); in f32
    where the plugin gives another precision for f16 (bf16 on an AVX512-BF16 CPU without f16):
    bf16 keeps 3 fewer mantissa bits than the unit's f16, so it would reject what the unit
    computes well. Anything but ``computes`` or f32 after that is refused (RuntimeError)."""
    compiled = _core().compile_model(ir, "CPU", cpu_config(threads, computes))
    if precision_of(compiled) in (computes, "f32"):
        return compiled
    compiled = _core().compile_model(ir, "CPU", cpu_config(threads, "f32"))
    if (got := precision_of(compiled)) != "f32":
        raise RuntimeError(f"OpenVINO computes {got} on this host's CPU when asked for "
                           f"{computes} or f32; cannot emulate the unit here")
    return compiled


def _write(ir: Path, out: Path, base: str, spec: dict[str, Any]) -> None:
    """``out``'s JSON and weights (``base`` .json, .npu.bin), then ``out`` itself (its presence
    means complete)."""
    record = {SPEC_KEY: spec, "made_from": ir.name}
    weights = out.name.removesuffix(".xml") + ".bin"
    parts = [(ir.with_suffix(".bin"), out.with_name(weights)), (ir, out)]
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        out.unlink(missing_ok=True)
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, out.with_name(base + ".json"))
        for src, dst in parts:
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
    except OSError as exc:
        raise ConversionError(f"cannot write {out}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _notes(unit: Unit, spec: dict[str, Any]) -> tuple[str, ...]:
    """Where the IR runs and what verifying it here stands for."""
    emulated = ("verified here on the CPU plugin in f32, as the unit computes"
                if spec["computes"] == "f32" else
                "verified here on the CPU plugin: f16 compute where the CPU plugin has it, "
                "else fp16 weights and fp16-rounded inputs and outputs with f32 in between "
                "(the unit's fp16 activations are not emulated)")
    return (f"for the {unit.words}: the device compiles it with "
            f"{spec['device']} {json.dumps(spec['config'], sort_keys=True)}", emulated,
            f"{unit.words} speed shows only on the device")


class AcceleratorRunner(OpenVINORunner):
    """An OpenVINO CPU runner that rounds inputs and outputs to fp16 when the unit computes
    f16 and the CPU plugin does not (it turned the f16 hint into f32)."""

    def __init__(self, compiled: Any, model: ModelInfo, *, round_io: bool) -> None:
        super().__init__(compiled, model)
        got = precision_of(compiled)
        self.computes = got
        self._round = round_io and got != "f16"

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the ONNX model's order, fp16-rounded where the unit's are."""
        if not self._round:
            return super().run(feeds)
        feeds = {k: _fp16(v) for k, v in feeds.items()}
        return [_fp16(out) for out in super().run(feeds)]


def _fp16(values: np.ndarray) -> np.ndarray:
    """Float values rounded through fp16 (other types unchanged)."""
    values = np.asarray(values)
    if values.dtype.kind != "f":
        return values
    return values.astype(np.float16).astype(values.dtype)


class OpenVINONPUTarget(_UnitTarget):
    """OpenVINO on Intel's NPU (AI Boost): int8 or fp16 IR compiled on the NPU at load."""

    name: ClassVar[str] = NPU.target
    unit: ClassVar[Unit] = NPU
    caps: ClassVar[Capabilities] = _caps(NPU)


class OpenVINOGPUTarget(_UnitTarget):
    """OpenVINO on Intel's integrated GPU: fp16, int8 or fp32 IR compiled on the GPU."""

    name: ClassVar[str] = GPU.target
    unit: ClassVar[Unit] = GPU
    caps: ClassVar[Capabilities] = _caps(GPU)
