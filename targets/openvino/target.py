"""OpenVINO: IR artifacts (.xml + .bin) at fp32, fp16 weights, bf16 compute, NNCF
post-training int8, or int8 weights whose matrix products the CPU plugin quantizes at run time
(int8-dynamic)."""

from __future__ import annotations

import functools
import json
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities, IsaNeed
from edge.core.errors import first_line
from edge.core.files import free_bytes, no_space, no_space_as
from edge.core.values import Dataset, ModelInfo
from targets.base import (
    ConversionError,
    ConvertSettings,
    check_precision,
    missing_modules,
    workdir_lock,
)
from targets.openvino.agent import DYNAMIC_OPTION, OPENVINO_COMPUTES
from targets.openvino.nodes import node_outputs
from targets.openvino.quantize import (
    MATRIX_OPS,
    compress,
    is_transformer_like,
    quantize,
)
from targets.openvino.serving import CONFIG, serving_files

DEFAULT_SETTINGS = ConvertSettings()

__all__ = ["BF16", "BF16_ISA", "COMPUTES", "OpenVINORunner", "OpenVINOTarget",
           "is_transformer_like", "load_with_hint", "plain_precision"]

#: precision -> IR file; its weights sit beside it with the same stem and a .bin suffix.
FILES: dict[str, str] = {"fp32": "model_fp32.xml", "fp16": "model_fp16.xml",
                         "bf16": "model_bf16.xml", "int8": "model_int8.xml",
                         "int8-dynamic": "model_int8_dynamic.xml"}
WEIGHTS = ".bin"
RECORD = ".json"  # conversion record (source sha256, notes), written before the .xml
HINTS = ("f32", "bf16", "f16")  # INFERENCE_PRECISION_HINT values load_with_hint accepts
#: Where an IR records the precision it was made to compute in (absent: f32); every load
#: compiles it so, here and on the device (its agent module reads the same key).
COMPUTES = OPENVINO_COMPUTES
#: x86's bf16 instructions, the only bf16 OpenVINO's CPU plugin computes.
BF16_ISA = frozenset({"avx512_bf16", "amx_bf16"})
BF16 = IsaNeed(arch="x86_64", isa=BF16_ISA, names="AVX512-BF16 or AMX",
               computed_by="OpenVINO's CPU plugin")
#: The x86 instructions the CPU plugin's dynamic quantization of matrix products runs on
#: (u8 x s8 dot products; elsewhere it decompresses the weights and computes float).
DYNAMIC = IsaNeed(arch="x86_64", isa=frozenset({"avx_vnni", "avx512_vnni", "amx_int8"}),
                  names="AVX-VNNI, AVX512-VNNI or AMX", computed_by="OpenVINO's CPU plugin")
_DEPENDENCIES = ("openvino", "nncf")
#: How an op is marked in an IR to compute in its own precision (OpenVINO's
#: DisableFP16Compression, read back as the rt_info key PRECISE_KEY): no bf16 on AMX/AVX512-BF16
#: CPUs, no f16 on GPUs, whatever the load's INFERENCE_PRECISION_HINT -- for matrix products:
#: on a Xeon with AMX (OpenVINO 2026.4, bench/results/openvino_plain_load.json) a plain
#: compile_model computes a marked MLP in f32 but a marked CNN's convolutions still in bf16, so
#: the fp32 IR's load line names the hint, and a bf16 host verifies the plain load. OpenVINO's
#: CPU plugin does
#: not read INFERENCE_PRECISION_HINT from the IR's rt_info "runtime_options" (it reads only the
#: KV-cache and dynamic-quantization options there: intel_cpu Config::applyRtInfo).
PRECISE = "precise"
PRECISE_KEY = "DisablePrecisionConversion_0"
_UNMARKED = frozenset({"Parameter", "Result", "Const"})  # IR layer types left as they are


class OpenVINOTarget:
    """OpenVINO on the device CPU; NNCF quantizes int8."""

    name: ClassVar[str] = "openvino"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="openvino", precisions=("fp32", "fp16", "bf16", "int8", "int8-dynamic"),
        suffix=".xml",
        companions=(WEIGHTS,),  # the IR's weights travel with its .xml
        keeps_float=True, layer_plan="layers", archs=("x86_64", "aarch64"), modules=_DEPENDENCIES,
        extra="openvino", converters=("openvino", "nncf", "onnx"),
        recipe=2,  # 2: the fp32 IR's ops are marked precise
        formats=("openvino",), needs_isa=(("bf16", BF16), ("int8-dynamic", DYNAMIC)),
        node_outputs=True, dynamic_ops=MATRIX_OPS,
        serving=True)

    def missing(self) -> str | None:
        """Name openvino (every precision) or nncf (int8) if not importable."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Write ``precision``'s IR into ``workdir`` (or reuse a complete one); return it."""
        check_precision(self, precision)
        workdir = Path(workdir)
        out = workdir / FILES[precision]
        with no_space_as(out), workdir_lock(workdir):  # a full disk: one line naming out
            notes = _reusable(out, model)
            if notes is None:
                notes = _convert(model, precision, calib, settings, out)
        return out, notes

    def node_outputs(self, artifact: Path, model: ModelInfo,
                     feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Every f32 node output of the IR by its ONNX tensor names (``targets.openvino.nodes``)."""
        return node_outputs(_complete(Path(artifact)), feeds)

    def serving_files(self, artifact: Path, precision: str) -> dict[str, Path]:
        """A ready OpenVINO Model Server config for ``artifact`` and the IR laid out for it:
        bundle-relative name -> file (``targets.openvino.serving``)."""
        return serving_files(Path(artifact), precision)

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> OpenVINORunner:
        """A CPU compiled model computing in the precision the IR records (``COMPUTES``);
        refused where OpenVINO would compute another one on this CPU (verifying it here would
        verify what the device does not run). On a CPU where a plain load computes less
        (bf16 on AVX512-BF16/AMX, f16 on ARM), the plain load: what is verified then covers a
        user's own ``compile_model(xml, "CPU")`` and a serving engine too, not only edge's
        loader. Not for int8-dynamic: the CPU plugin quantizes activations at run time only when
        it computes f32 (a plain load there computes bf16 from decompressed weights), so it is
        loaded with the hint, as the device agent and the serving config load it."""
        ir = _core().read_model(str(_complete(Path(artifact))))
        hint = _recorded_hint(ir)
        if hint == "f32" and plain_precision() != "f32" and not ir.has_rt_info(DYNAMIC_OPTION):
            return _compiled(ir, model, threads, None)
        runner = _compiled(ir, model, threads, hint)
        got = computes(runner.compiled_model)
        if got != hint:
            raise RuntimeError(f"{Path(artifact).name} was made to compute in {hint}, but "
                               f"OpenVINO computes {got} on this host's CPU")
        return runner


def plain_precision() -> str:
    """What a load without a precision hint computes on this host's CPU ('f32', 'bf16' on
    AVX512-BF16/AMX, 'f16' on ARM CPUs with fp16 arithmetic): the CPU plugin's default
    INFERENCE_PRECISION_HINT, which its optimization capabilities alone do not tell (an ARM
    CPU's f16 is not 'BF16')."""
    return str(_core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name())


def _recorded_hint(ir: Any) -> str:
    return str(ir.get_rt_info(COMPUTES).astype(str)) if ir.has_rt_info(COMPUTES) else "f32"


def load_with_hint(artifact: Path, model: ModelInfo, *, threads: int,
                   hint: str) -> OpenVINORunner:
    """A CPU compiled model with INFERENCE_PRECISION_HINT ``hint`` (f32, bf16 or f16)."""
    if hint not in HINTS:
        raise ValueError(f"precision hint '{hint}': choose one of {', '.join(HINTS)}")
    return _compiled(str(_complete(Path(artifact))), model, threads, hint)


def _compiled(ir: Any, model: ModelInfo, threads: int, hint: str | None) -> OpenVINORunner:
    """``ir`` (a path or a read model) compiled for the CPU with ``threads`` and ``hint``
    (None: OpenVINO's default, as a plain load gets)."""
    return OpenVINORunner(_core().compile_model(ir, "CPU", cpu_config(threads, hint)), model)


def cpu_config(threads: int, hint: str | None) -> dict[str, Any]:
    """The CPU plugin's compile properties: ``threads``, latency, and the precision ``hint``
    (None: OpenVINO's default)."""
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": max(int(threads), 0),
                              "PERFORMANCE_HINT": "LATENCY"}
    if hint is not None:
        config["INFERENCE_PRECISION_HINT"] = hint
    return config


def computes(compiled: Any) -> str:
    """The precision a compiled model computes in ('f32', 'f16', 'bf16')."""
    return str(compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())


def _complete(artifact: Path) -> Path:
    """``artifact``, once its weights are known to sit beside it."""
    weights = artifact.with_suffix(WEIGHTS)
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing: an OpenVINO IR needs its {WEIGHTS} "
                                f"beside the {artifact.suffix}")
    return artifact


# ---------------------------------------------------------------- conversion



def _reusable(out: Path, model: ModelInfo) -> tuple[str, ...] | None:
    """The notes of a complete earlier conversion of this model to ``out``, else None."""
    try:
        record = json.loads(out.with_suffix(RECORD).read_text())
    except (OSError, ValueError):
        return None
    complete = out.is_file() and out.with_suffix(WEIGHTS).is_file()
    notes = record.get("notes") if isinstance(record, dict) else None
    if not complete or record.get("source_sha256") != model.sha256 or not isinstance(notes, list):
        return None
    return tuple(str(n) for n in notes)


def _convert(model: ModelInfo, precision: str, calib: Dataset, settings: ConvertSettings,
             out: Path) -> tuple[str, ...]:
    """Convert (and for int8 quantize), then write the IR atomically; return the notes."""
    start = time.perf_counter()
    ov_model, made_from = _read_for(precision, model, out)
    if precision == "int8":
        ov_model, notes = quantize(ov_model, model, calib, settings, out.with_suffix(".log"))
    elif precision == "int8-dynamic":
        ov_model, notes = compress(ov_model, model, settings, out.with_suffix(".log"))
    else:
        notes = _float_notes(precision)
    notes += (f"{made_from} in {time.perf_counter() - start:.1f} s "
              f"(openvino {version('openvino')})",)
    ov_model.set_rt_info(model.sha256, ["edge", "source_sha256"])
    if precision == "bf16":
        ov_model.set_rt_info("bf16", COMPUTES)
    notes += (f"{LOAD_LINES[precision].format(xml=out.name)}; serve the chosen IR: ovms "
              f"--config_path {CONFIG} (in the bundle)",)
    _save(ov_model, out, compress_to_fp16=precision == "fp16", precise=precision == "fp32",
          record={"source_sha256": model.sha256, "precision": precision, "notes": notes},
          size=model.size_bytes + (1 << 16))
    return notes


def _read_for(precision: str, model: ModelInfo, out: Path) -> tuple[Any, str]:
    """The model to save as ``out`` and how it was made: for bf16 the complete fp32 IR beside
    it when there is one (bf16's IR is that IR, recorded to compute in bf16), else the source
    converted."""
    fp32 = out.with_name(FILES["fp32"])
    if precision == "bf16" and _reusable(fp32, model) is not None:
        return _unmarked(_core().read_model(str(fp32))), f"made from {fp32.name}"
    return _read_source(model), "converted"


def _unmarked(ov_model: Any) -> Any:
    """``ov_model`` with no op marked precise (the fp32 IR's marks would keep bf16 away)."""
    for op in ov_model.get_ordered_ops():
        rt_info = op.get_rt_info()
        if PRECISE_KEY in rt_info:
            del rt_info[PRECISE_KEY]
    return ov_model


def _read_source(model: ModelInfo) -> Any:
    """The source model as an OpenVINO model (ONNX, or anything else convert_model reads)."""
    import openvino as ov

    path = Path(model.path)
    if not path.is_file():
        raise ConversionError(f"model file {path} does not exist")
    if path.suffix.lower() == ".onnx" and not _onnx_frontend().supported(str(path)):
        raise ConversionError(f"openvino cannot read {path.name}: not a valid ONNX model")
    try:
        return ov.convert_model(model.path)
    except Exception as exc:  # OpenVINO's frontends raise several types; report one line
        raise ConversionError(f"openvino cannot read {Path(model.path).name}: "
                              f"{first_line(exc)}") from None


def _onnx_frontend() -> Any:
    """OpenVINO's ONNX frontend: it checks an .onnx file without other frontends' noise."""
    from openvino.frontend import FrontEndManager

    return FrontEndManager().load_by_framework("onnx")


def _float_notes(precision: str) -> tuple[str, ...]:
    """What an fp32, bf16 or fp16 IR is and how it computes."""
    if precision == "fp32":
        return ("OpenVINO IR, fp32 weights and f32 compute as edge loads it "
                "(INFERENCE_PRECISION_HINT=f32); its ops are marked precise, which keeps "
                "matrix products f32 in a plain load, but OpenVINO 2026.4 still computes "
                "convolutions in bf16 there on AVX512-BF16/AMX CPUs "
                "(bench/results/openvino_plain_load.json): load it with the hint; the bf16 "
                "candidate is the bf16 one",)
    if precision == "bf16":
        return ("OpenVINO IR, fp32 weights, recorded to compute in bf16: every load, here and "
                "on the device, sets INFERENCE_PRECISION_HINT=bf16 (half fp32's memory "
                "traffic on AVX512-BF16/AMX CPUs; an 8-bit mantissa, hence verified)",)
    return ("OpenVINO IR, fp16 weights (half the file); weights are decompressed at load and "
            "compute follows the load's precision hint (f32 here), so no CPU speed-up",)


#: precision -> how a user's application loads that IR to compute what edge verified.
LOAD_LINES: dict[str, str] = {
    "fp32": "load: core.compile_model('{xml}', 'CPU', {{'INFERENCE_PRECISION_HINT': 'f32'}}) "
            "as verified (a plain load computes convolutions in bf16 on AVX512-BF16/AMX CPUs; "
            "the IR's precise marks keep only matrix products f32 there)",
    "fp16": "load: core.compile_model('{xml}', 'CPU', {{'INFERENCE_PRECISION_HINT': 'f32'}}) "
            "as verified (a plain load computes bf16 on AVX512-BF16/AMX CPUs, f16 on ARM CPUs)",
    "bf16": "load: core.compile_model('{xml}', 'CPU', {{'INFERENCE_PRECISION_HINT': 'bf16'}}) "
            "as verified, on an AVX512-BF16/AMX CPU (bf16 is also the plain load's default there)",
    "int8": "load: core.compile_model('{xml}', 'CPU', {{'INFERENCE_PRECISION_HINT': 'f32'}}) "
            "as verified (a plain load computes the float ops in bf16 on AVX512-BF16/AMX CPUs, "
            "f16 on ARM CPUs)",
    "int8-dynamic": "load: core.compile_model('{xml}', 'CPU', {{'INFERENCE_PRECISION_HINT': "
                    "'f32'}}) as verified (the IR records DYNAMIC_QUANTIZATION_GROUP_SIZE, which "
                    "every compile reads; a plain load on an AVX512-BF16/AMX CPU computes bf16 "
                    "from the decompressed weights instead, without the run-time quantization)",
}


def mark_precise(xml: Path) -> None:
    """Mark every computing op of the IR ``xml`` precise (``PRECISE``), then check that
    OpenVINO reads every mark back."""
    tree = ET.parse(xml)
    layers = [layer for layer in tree.getroot().iter("layer")
              if layer.get("type") not in _UNMARKED]
    for layer in layers:
        rt_info = layer.find("rt_info")
        if rt_info is None:
            rt_info = ET.Element("rt_info")
            layer.insert(1 if layer.find("data") is not None else 0, rt_info)
        if not any(a.get("name") == PRECISE for a in rt_info.iter("attribute")):
            ET.SubElement(rt_info, "attribute", name=PRECISE, version="0")
    tree.write(xml, encoding="utf-8", xml_declaration=True)
    read = _core().read_model(str(xml))
    unmarked = [op.get_friendly_name() for op in read.get_ordered_ops()
                if op.get_type_name() not in ("Parameter", "Result", "Constant")
                and PRECISE_KEY not in op.get_rt_info()]
    if unmarked:
        raise ConversionError(f"OpenVINO did not read the precise mark of {len(unmarked)} "
                              f"op(s) of {xml.name} (first: {unmarked[0]}); load it with "
                              "INFERENCE_PRECISION_HINT=f32")


def _save(ov_model: Any, out: Path, *, compress_to_fp16: bool, precise: bool,
          record: dict[str, Any], size: int) -> None:
    """Write .xml + .bin + record under temporary names, then rename (.xml last); ``size``:
    about what the IR takes (its source model's bytes and a margin), for a full disk's line."""
    import openvino as ov

    for stale in out.parent.glob(f".{out.stem}.*.partial.*"):  # a killed run's (we hold the lock)
        stale.unlink(missing_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.partial.xml")
    parts = [(tmp.with_suffix(WEIGHTS), out.with_suffix(WEIGHTS)),
             (tmp.with_suffix(RECORD), out.with_suffix(RECORD)), (tmp, out)]
    try:
        out.unlink(missing_ok=True)  # no .xml until its .bin and record are in place
        ov.save_model(ov_model, str(tmp), compress_to_fp16=compress_to_fp16)
        if precise:
            mark_precise(tmp)
        tmp.with_suffix(RECORD).write_text(json.dumps(record, indent=1))
        for src, dst in parts:
            os.replace(src, dst)
    except (OSError, RuntimeError) as exc:
        if free_bytes(out.parent) < size:  # OpenVINO's writer says only "iostream error"
            raise no_space(out, size) from None
        raise ConversionError(f"cannot write {out}: {first_line(exc)}") from None
    finally:
        for src, _ in parts:
            src.unlink(missing_ok=True)


# ---------------------------------------------------------------- runtime


@functools.cache
def _core() -> Any:
    """One openvino Core per process."""
    import openvino as ov

    return ov.Core()


class OpenVINORunner:
    """Runs a compiled model with the ONNX model's input names and output order."""

    def __init__(self, compiled: Any, model: ModelInfo) -> None:
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._inputs = _pair([s.name for s in model.inputs], compiled.inputs)
        self._outputs = _pair([s.name for s in model.outputs], compiled.outputs)
        self._in_dtypes = [p.get_element_type().to_dtype() for p in compiled.inputs]
        self._out_dtypes = [np.dtype(s.dtype) for s in model.outputs]

    @property
    def compiled_model(self) -> Any:
        """The wrapped openvino CompiledModel."""
        return self._compiled

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the ONNX model's order."""
        self._request.infer({i: np.asarray(feeds[name], dtype=self._in_dtypes[i])
                             for name, i in self._inputs})
        return [np.array(self._request.get_output_tensor(i).data, dtype=dtype)
                for (_, i), dtype in zip(self._outputs, self._out_dtypes, strict=True)]


def _pair(names: list[str], ports: Sequence[Any]) -> list[tuple[str, int]]:
    """Pair ONNX tensor names with port indices: by tensor name, else by order."""
    if len(names) != len(ports):
        raise ValueError(f"the IR has {len(ports)} tensors where the ONNX model has "
                         f"{len(names)}: {[p.get_any_name() for p in ports]}")
    found = [next((i for i, p in enumerate(ports) if name in p.get_names()), -1)
             for name in names]
    if -1 not in found and len(set(found)) == len(found):
        return list(zip(names, found, strict=True))
    return list(zip(names, range(len(ports)), strict=True))

