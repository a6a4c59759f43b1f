"""TFLite for an NPU reached through an external delegate (NXP i.MX 8M Plus: the VeriSilicon
NPU through NXP's VX delegate, /usr/lib/libvx_delegate.so).

The artifact is the TFLite target's full-int8 model (its onnx2tf run, shared) named
``model_int8_npu.delegate.tflite`` with a companion JSON (``model_int8_npu.json``) naming the
delegate library and its options, from the profile's accelerator options (``{delegate:
/usr/lib/libvx_delegate.so}``; other keys are passed to the delegate as its options). The
device's agent (targets/tflite/agent.py) loads it with ``load_delegate(library, options)``,
reports the operators the delegate took and times it, and refuses a device without the library.
Here it is verified as the int8 model is: on LiteRT's CPU kernels (``Capabilities.host_runs``
"cpu"), the same int8 arithmetic the NPU is meant to reproduce; its speed shows only on the
device.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.values import BenchResult, Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, check_precision, workdir_lock
from targets.tflite.agent import DELEGATE_SUFFIX, SPEC_KEY
from targets.tflite.litert_runner import TFLiteRunner
from targets.tflite.target import TFLiteTarget

__all__ = ["DEFAULT_LIBRARY", "TFLiteDelegateTarget", "library_spec"]

DEFAULT_SETTINGS = ConvertSettings()
#: The library when the profile names none: NXP's VX delegate, where the i.MX BSP installs it.
DEFAULT_LIBRARY = "/usr/lib/libvx_delegate.so"
UNIT = "NPU (TFLite external delegate)"
BASE = "model_int8_npu"  # the artifact's name before its suffix; its JSON is BASE.json


def _caps() -> Capabilities:
    """TFLite's int8 path as an NPU's (the delegate's)."""
    base = TFLiteTarget.caps
    return Capabilities(
        runtime="tflite", precisions=("int8",), suffix=DELEGATE_SUFFIX, companions=(".json",),
        converts_with="tflite", modules=base.modules, extra=base.extra,
        converters=base.converters, recipe=1, accelerator=UNIT, host_runs="cpu")


def library_spec(options: dict[str, str]) -> dict[str, Any]:
    """The delegate library (the ``delegate`` option, else ``DEFAULT_LIBRARY``) and the options
    passed to it (every other option)."""
    library = options.get("delegate", DEFAULT_LIBRARY).strip()
    if not (library.startswith("/") and ".so" in Path(library).name):
        raise ConversionError(f"profile accelerator option delegate '{library}': give the "
                              "delegate library's absolute path on the device (a .so)")
    rest = {k: v for k, v in sorted(options.items()) if k != "delegate"}
    return {"library": library, "options": rest, "unit": "the NPU"}


class TFLiteDelegateTarget:
    """The full-int8 TFLite model for an NPU behind an external TFLite delegate."""

    name: ClassVar[str] = "tflite-delegate"
    caps: ClassVar[Capabilities] = _caps()

    def missing(self) -> str | None:
        """The TFLite target's converter and runtime (the delegate is on the device)."""
        return TFLiteTarget().missing()

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """TFLite's int8 model (its onnx2tf run, shared) with the JSON naming the delegate."""
        check_precision(self, precision)
        spec = library_spec(dict(settings.accelerator))
        source, notes = TFLiteTarget().convert(model, "int8", calib=calib, workdir=workdir,
                                               settings=settings)
        out = Path(workdir) / f"{BASE}{DELEGATE_SUFFIX}"
        with no_space_as(out), workdir_lock(Path(workdir)):
            _write(source, out, spec)
        return out, (*notes, *_notes(spec))

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """None: which operators a vendor's delegate takes shows only when it loads them."""
        return None

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: an external delegate offers no estimate without the device."""
        return None

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """The int8 model on LiteRT's CPU kernels: what the delegate's NPU is meant to match."""
        return TFLiteTarget().load(artifact, model, threads=threads)


def _write(source: Path, out: Path, spec: dict[str, Any]) -> None:
    """``out``'s JSON, then ``out`` (its presence means complete)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        out.unlink(missing_ok=True)
        tmp.write_text(json.dumps({SPEC_KEY: spec, "made_from": source.name}, indent=1))
        os.replace(tmp, out.with_name(BASE + ".json"))
        shutil.copyfile(source, tmp)
        os.replace(tmp, out)
    except OSError as exc:
        raise ConversionError(f"cannot write {out}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _notes(spec: dict[str, Any]) -> tuple[str, ...]:
    """Which delegate the device loads it with, and what verifying it here stands for."""
    options = ", ".join(f"{k}={v}" for k, v in spec["options"].items()) or "no options"
    return (f"for an NPU through the TFLite external delegate {spec['library']} ({options}): "
            "the device's agent loads it, reports the partitions it took and times it",
            "verified here on LiteRT's CPU int8 kernels (the NPU is meant to match them); "
            "its speed and any operators the delegate leaves to the CPU show only on the device")
