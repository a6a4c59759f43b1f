"""TFLite (LiteRT): one onnx2tf run per workdir makes the fp32, fp16, int8, int8-dynamic files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.errors import first_line
from edge.core.values import Dataset, ModelInfo, TensorSpec
from targets.base import (
    ConversionError,
    ConvertSettings,
    check_precision,
    missing_modules,
    workdir_lock,
)

DEFAULT_SETTINGS = ConvertSettings()

__all__ = ["TFLiteRunner", "TFLiteTarget"]

#: variant -> the onnx2tf output file kept from its run (the ONNX copy is named model.onnx).
#: Every precision is a variant; "int8-io" is the full-int8 model with int8 I/O, which this
#: target does not offer but the NNAPI target builds on.
FILES: dict[str, str] = {
    "fp32": "model_float32.tflite",
    "fp16": "model_float16.tflite",
    "int8": "model_integer_quant.tflite",  # int8 weights+activations, float32 I/O
    "int8-dynamic": "model_dynamic_range_quant.tflite",  # int8 weights, float activations
    "int8-io": "model_full_integer_quant.tflite",  # int8 weights+activations, int8 I/O
}
#: Variants that need calibration samples (onnx2tf writes them only in its -oiqt run).
_QUANTIZED = ("int8", "int8-dynamic", "int8-io")
MARKER = "onnx2tf.done.json"  # written last, only after a successful run
LOG = "onnx2tf.log"
#: onnx2tf downloads this for 4-D 3-channel inputs unless it is in its working directory.
SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
_CONVERTER_MODULES = ("onnx2tf", "tensorflow", "tf_keras", "onnx_graphsurgeon", "onnxsim",
                      "sng4onnx")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOISE = re.compile(r"^([IWE]\d{4} |WARNING: All log messages|[\s\u2500-\u257f]*$)")
_ERROR = re.compile(r"(Error|Exception|ERROR|error:|Killed|failed)")
_OUTPUT_NUMBER = re.compile(
    r"^(?:output_(\d+)|Identity(?:_(\d+))?|(?:Stateful)?PartitionedCall(?::(\d+))?)$")


class TFLiteTarget:
    """LiteRT on the device CPU; onnx2tf converts, TFLite's converter quantizes."""

    name: ClassVar[str] = "tflite"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="tflite", precisions=("fp32", "fp16", "int8", "int8-dynamic"), suffix=".tflite",
        converts_in_background=True,  # onnx2tf is a child process: optimize starts it early
        modules=(*_CONVERTER_MODULES, "ai_edge_litert"), extra="tflite",
        converters=("onnx2tf", "tensorflow", "tf-keras", "onnx-graphsurgeon", "onnxsim",
                    "sng4onnx", "ai-edge-litert", "onnx"), recipe=1)
    timeout_s: ClassVar[float] = 3600.0

    def missing(self) -> str | None:
        """Name the first converter or runtime package that is not importable."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Run onnx2tf once for ``workdir`` (or reuse its run); return this precision's file."""
        check_precision(self, precision)
        file, run = self.variant(model, precision, calib=calib, workdir=workdir)
        return file, _notes(precision, model, run)

    def variant(self, model: ModelInfo, name: str, *, calib: Dataset,
                workdir: Path) -> tuple[Path, dict[str, Any]]:
        """The file of one ``FILES`` variant and the record of the onnx2tf run that wrote it."""
        run = _ensure_converted(model, calib, Path(workdir), self.timeout_s)
        if name not in run["files"]:
            raise ConversionError(f"onnx2tf wrote no {name} model: "
                                  f"{run['missing'].get(name, 'unknown reason')}")
        return Path(workdir) / run["files"][name], run

    def load(self, artifact: Path, model: ModelInfo, *, threads: int) -> TFLiteRunner:
        """A LiteRT interpreter with ``threads`` threads, wrapped to speak the ONNX layout."""
        return TFLiteRunner(_interpreter(Path(artifact), threads), model)


# ---------------------------------------------------------------- conversion (cached run)


def _ensure_converted(model: ModelInfo, calib: Dataset, workdir: Path,
                      timeout: float) -> dict[str, Any]:
    """The marker of a completed run in ``workdir``, running onnx2tf first if there is none."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConversionError(f"cannot use workdir {workdir}: {exc}") from None
    with workdir_lock(workdir):
        done = _read_marker(workdir, model)
        return done if done is not None else _run_onnx2tf(model, calib, workdir, timeout)



def _read_marker(workdir: Path, model: ModelInfo) -> dict[str, Any] | None:
    """A previous run's record if it finished for this model and its files are all there.

    A record that accounts for fewer variants than ``FILES`` (written before a variant was
    added) is stale: the run is repeated so that every variant is either kept or explained.
    """
    try:
        run = json.loads((workdir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if run.get("model_sha256") != model.sha256:
        return None
    if not all((workdir / f).is_file() for f in run.get("files", {}).values()):
        return None
    if not set(FILES) <= {*run.get("files", {}), *run.get("missing", {})}:
        return None
    return run


def _run_onnx2tf(model: ModelInfo, calib: Dataset, workdir: Path,
                 timeout: float) -> dict[str, Any]:
    """Convert in a scratch dir, move the artifacts in, then write the marker."""
    _clear(workdir)
    scratch = Path(tempfile.mkdtemp(prefix=".onnx2tf-", dir=workdir))
    try:
        flags, run = _prepare(model, calib, scratch)
        log = workdir / LOG
        argv = [sys.executable, "-m", "onnx2tf", "-i", "model.onnx", "-o", "out", *flags]
        code, seconds, peak_mb, timed_out = _spawn(argv, scratch, log, timeout)
        out = scratch / "out"
        if timed_out:
            raise ConversionError(f"onnx2tf timed out after {timeout:.0f} s (log: {log})")
        if not (out / FILES["fp32"]).is_file():
            raise ConversionError(f"onnx2tf failed (exit {code}): {_reason(log)} (log: {log})")
        for precision, name in FILES.items():
            if (out / name).is_file():
                os.replace(out / name, workdir / name)
                run["files"][precision] = name
            else:
                run["missing"].setdefault(precision, f"{_reason(log)} (log: {log})")
        run.update(exit_code=code, seconds=round(seconds, 2), peak_rss_mb=round(peak_mb, 1),
                   argv=argv[3:])
        _write_json(workdir / MARKER, run)
        return run
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _clear(workdir: Path) -> None:
    """Drop the marker, artifacts and scratch dirs of an earlier, unfinished or stale run."""
    (workdir / MARKER).unlink(missing_ok=True)
    for name in FILES.values():
        (workdir / name).unlink(missing_ok=True)
    for stale in workdir.glob(".onnx2tf-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _prepare(model: ModelInfo, calib: Dataset, scratch: Path) -> tuple[list[str], dict[str, Any]]:
    """Write onnx2tf's inputs into ``scratch``; return its flags and the run record so far."""
    from importlib.metadata import version

    _copy_model(Path(model.path), scratch / "model.onnx")
    rng = np.random.default_rng(0)  # stands in for the MS-COCO sample onnx2tf would download
    np.save(scratch / SAMPLE, rng.random((20, 128, 128, 3), dtype=np.float32))
    flags = _shape_flags(model, calib)
    quant, why_not = _calibration_flags(model, calib, scratch)
    run: dict[str, Any] = {
        "model_sha256": model.sha256, "onnx2tf": version("onnx2tf"), "files": {},
        "missing": {} if why_not is None else dict.fromkeys(_QUANTIZED, why_not),
        "calibration_samples": len(calib), "fixed_shapes": flags[1::2],
    }
    return flags + quant, run


def _copy_model(src: Path, dst: Path) -> None:
    """Copy the model (onnx2tf rewrites its input in place); inline any external data."""
    import onnx

    if not src.is_file():
        raise ConversionError(f"model file {src} does not exist")
    try:
        proto = onnx.load(str(src), load_external_data=False)
        external = any(t.data_location == onnx.TensorProto.EXTERNAL
                       for t in proto.graph.initializer)
    except Exception:  # not parseable here: let onnx2tf report it in its log
        external = False
    if external:
        onnx.save(onnx.load(str(src)), str(dst))
    else:
        shutil.copyfile(src, dst)


def _shape_flags(model: ModelInfo, calib: Dataset) -> list[str]:
    """``-ois`` pins symbolic input dims to the calibration samples' shapes (else to 1)."""
    flags: list[str] = []
    for spec in model.inputs:
        if all(isinstance(d, int) and d > 0 for d in spec.shape):
            continue
        sample = calib.feeds[0].get(spec.name) if len(calib) else None
        shape = np.shape(sample) if sample is not None else spec.static_shape
        flags += ["-ois", f"{spec.name}:{','.join(str(int(d)) for d in shape)}"]
    return flags


def _calibration_flags(model: ModelInfo, calib: Dataset,
                       scratch: Path) -> tuple[list[str], str | None]:
    """``-oiqt`` with one NHWC ``-cind`` file per input, or the reason int8 is impossible."""
    if not len(calib):
        return [], "no calibration samples"
    flags = ["-oiqt", "-qt", "per-channel"]
    for i, spec in enumerate(model.inputs):
        if not np.issubdtype(np.dtype(spec.dtype), np.floating):
            return [], f"input '{spec.name}' is {spec.dtype}; full-integer int8 needs float inputs"
        file = f"calib_{i}.npy"
        np.save(scratch / file, _stack(calib, spec))
        flags += ["-cind", _sanitize(spec.name), file, "[0.0]", "[1.0]"]  # no normalization
    return flags, None


def _stack(calib: Dataset, spec: TensorSpec) -> np.ndarray:
    """All samples of one input, concatenated on the batch axis, in onnx2tf's layout."""
    try:
        data = np.concatenate([np.asarray(f[spec.name], dtype=np.float32) for f in calib.feeds])
    except KeyError:
        raise ConversionError(f"calibration samples lack input '{spec.name}'") from None
    except ValueError as exc:
        raise ConversionError(f"calibration samples of '{spec.name}' differ in shape: "
                              f"{first_line(exc)}") from None
    return np.ascontiguousarray(data.transpose(_channels_last(data.ndim)))


def _sanitize(name: str) -> str:
    """The input name onnx2tf gives the Keras input (it renames ':' and a leading '/')."""
    return re.sub(r"^/", "wa/", name.replace(":", "__"))


def _spawn(argv: list[str], cwd: Path, log: Path,
           timeout: float) -> tuple[int, float, float, bool]:
    """Run ``argv`` with its output in ``log``; return (exit code, seconds, peak MB, timed out)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    expired = threading.Event()
    start = time.perf_counter()
    with open(log, "wb") as handle:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        timer = threading.Timer(timeout, _expire, (expired, proc))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # rusage of this child and its children
        except BaseException:
            _kill(proc)
            proc.wait()
            raise
        finally:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024, expired.is_set()


def _expire(expired: threading.Event, proc: subprocess.Popen[bytes]) -> None:
    """The converter ran out of time: say so, then kill its process group."""
    expired.set()
    _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group we started (onnx2tf and its onnxsim children)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reason(log: Path) -> str:
    """The last meaningful line of an onnx2tf log, preferring an error line."""
    try:
        text = _ANSI.sub("", log.read_text(errors="replace"))
    except OSError:
        return "no log"
    lines = [ln.strip() for ln in text.splitlines() if not _NOISE.match(ln)]
    errors = [ln for ln in lines if _ERROR.search(ln)]
    chosen = (errors or lines or ["no output"])[-1]
    return chosen[:200]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (temp file in the same dir, then rename)."""
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _notes(precision: str, model: ModelInfo, run: dict[str, Any]) -> tuple[str, ...]:
    """What the artifact is, how its I/O looks, and what the shared run cost."""
    kind = {
        "fp32": "float32 weights and compute",
        "fp16": "float16 weights, dequantized to float32 at load; float32 compute",
        "int8": "full-integer quantized: int8 weights (per-channel) and int8 activations",
        "int8-dynamic": "dynamic-range quantized: int8 weights (tensors of 1024+ elements), "
                        "float32 activations quantized at run time",
    }[precision]
    notes = [f"onnx2tf {run['onnx2tf']}: {run['files'][precision]}, {kind}",
             "I/O float32" + (": the model quantizes its inputs and dequantizes its outputs"
                              if precision == "int8" else "")]
    if precision == "int8":
        notes.append(f"calibrated on {run['calibration_samples']} samples, as given "
                     "(mean 0, std 1)")
    if any(len(s.shape) in (3, 4, 5) for s in model.inputs):
        notes.append("onnx2tf made channels-first inputs channels-last; the runner transposes")
    if run.get("fixed_shapes"):
        notes.append(f"symbolic input dims fixed: {' '.join(run['fixed_shapes'])}")
    notes.append(f"one onnx2tf run for all precisions: {run['seconds']:.0f} s, "
                 f"peak {run['peak_rss_mb']:.0f} MB RSS")
    return tuple(notes)



# ---------------------------------------------------------------- runtime


def _interpreter(path: Path, threads: int) -> Any:
    """ai_edge_litert's Interpreter, else tflite_runtime's, else TensorFlow's."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        try:
            from tflite_runtime.interpreter import Interpreter
        except ImportError:
            import tensorflow as tf

            Interpreter = tf.lite.Interpreter
    return Interpreter(model_path=str(path), num_threads=threads if threads > 0 else None)


@dataclass(frozen=True, slots=True)
class _Binding:
    """One ONNX tensor bound to a TFLite tensor: index, layout change, quantization."""

    spec: TensorSpec
    index: int
    perm: tuple[int, ...] | None  # ONNX layout -> TFLite layout
    dtype: np.dtype[Any]
    scale: float
    zero_point: int


class TFLiteRunner:
    """Runs a .tflite with the ONNX model's input names, output order and layouts."""

    def __init__(self, interpreter: Any, model: ModelInfo) -> None:
        interpreter.allocate_tensors()
        self._interp = interpreter
        ins, outs = _signature_aliases(interpreter)
        self._inputs = _bind(model.inputs, interpreter.get_input_details(), ins, numbered=False)
        self._outputs = _bind(model.outputs, interpreter.get_output_details(), outs,
                              numbered=True)
        self._shapes = {d["index"]: tuple(d["shape"]) for d in interpreter.get_input_details()}

    @property
    def interpreter(self) -> Any:
        """The wrapped interpreter."""
        return self._interp

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the ONNX model's order and layout."""
        for binding in self._inputs:
            self._set(binding, feeds[binding.spec.name])
        self._interp.invoke()
        return [_from_tflite(self._interp.get_tensor(b.index), b) for b in self._outputs]

    def _set(self, binding: _Binding, value: np.ndarray) -> None:
        data = _to_tflite(np.asarray(value), binding)
        if data.shape != self._shapes[binding.index]:
            self._interp.resize_tensor_input(binding.index, list(data.shape))
            self._interp.allocate_tensors()
            self._shapes[binding.index] = data.shape
        self._interp.set_tensor(binding.index, data)


def _to_tflite(value: np.ndarray, binding: _Binding) -> np.ndarray:
    """ONNX layout and dtype -> the TFLite tensor's (quantizing int inputs)."""
    if binding.perm is not None:
        value = value.transpose(binding.perm)
    if binding.scale:
        info = np.iinfo(binding.dtype)
        value = np.round(value.astype(np.float32) / binding.scale) + binding.zero_point
        value = np.clip(value, info.min, info.max)
    return np.ascontiguousarray(value, dtype=binding.dtype)


def _from_tflite(value: np.ndarray, binding: _Binding) -> np.ndarray:
    """TFLite layout and dtype -> the ONNX output's (dequantizing int outputs)."""
    if binding.scale:
        value = (value.astype(np.float32) - binding.zero_point) * binding.scale
    if binding.perm is not None:
        value = value.transpose(np.argsort(binding.perm))
    return np.ascontiguousarray(value, dtype=np.dtype(binding.spec.dtype))


def _signature_aliases(interpreter: Any) -> tuple[dict[int, str], dict[int, str]]:
    """Tensor index -> signature name, for inputs and outputs of the one serving signature."""
    try:
        keys = list(interpreter.get_signature_list())
        if "serving_default" in keys:
            key = "serving_default"
        elif len(keys) == 1:
            key = keys[0]
        else:
            return {}, {}
        runner = interpreter.get_signature_runner(key)
        return ({d["index"]: n for n, d in runner.get_input_details().items()},
                {d["index"]: n for n, d in runner.get_output_details().items()})
    except (AttributeError, ValueError, IndexError):  # old runtimes or no signatures
        return {}, {}


def _bind(specs: Sequence[TensorSpec], details: list[dict[str, Any]], aliases: dict[int, str],
          *, numbered: bool) -> list[_Binding]:
    """Pair ONNX tensors with TFLite tensors: by name, by output number, else by order."""
    if len(specs) != len(details):
        raise ValueError(f"the .tflite has {len(details)} tensors where the ONNX model has "
                         f"{len(specs)}: {[d['name'] for d in details]}")
    strategies = [_by_name(specs, details, aliases)]
    if numbered:
        strategies.append(_by_number(details, aliases))
    strategies.append(list(range(len(details))))
    for order in strategies:
        if order is not None and all(_layouts(s.shape, _tfl_shape(details[i]))
                                     for s, i in zip(specs, order, strict=True)):
            return [_binding(s, details[i]) for s, i in zip(specs, order, strict=True)]
    raise ValueError("the .tflite tensor shapes do not match the ONNX model: "
                     f"{[tuple(d['shape']) for d in details]} vs {[s.shape for s in specs]}")


def _by_name(specs: Sequence[TensorSpec], details: list[dict[str, Any]],
             aliases: dict[int, str]) -> list[int] | None:
    """Detail positions whose tensor or signature name is each ONNX name, if all are found."""
    names = [{_plain(d["name"]), aliases.get(d["index"], "")} for d in details]
    order = [next((i for i, n in enumerate(names) if {s.name, _sanitize(s.name)} & n), -1)
             for s in specs]
    return order if -1 not in order and len(set(order)) == len(order) else None


def _by_number(details: list[dict[str, Any]], aliases: dict[int, str]) -> list[int] | None:
    """Order by the output number in 'output_N', 'Identity_N' or 'PartitionedCall:N'."""
    numbers = []
    for d in details:
        match = (_OUTPUT_NUMBER.match(aliases.get(d["index"], ""))
                 or _OUTPUT_NUMBER.match(d["name"]))
        if match is None:
            return None
        numbers.append(int(next((g for g in match.groups() if g is not None), 0)))
    if sorted(numbers) != list(range(len(details))):
        return None
    return [numbers.index(k) for k in range(len(details))]


def _plain(name: str) -> str:
    """A TFLite tensor name without the 'serving_default_' prefix and ':N' suffix."""
    return re.sub(r":\d+$", "", name.removeprefix("serving_default_"))


def _binding(spec: TensorSpec, detail: dict[str, Any]) -> _Binding:
    perm = _layouts(spec.shape, _tfl_shape(detail))[0]
    dtype = np.dtype(detail["dtype"])
    scale, zero_point = detail.get("quantization", (0.0, 0))
    quantized = (np.issubdtype(dtype, np.integer) and bool(scale)
                 and np.issubdtype(np.dtype(spec.dtype), np.floating))
    return _Binding(spec=spec, index=int(detail["index"]), perm=perm, dtype=dtype,
                    scale=float(scale) if quantized else 0.0,
                    zero_point=int(zero_point) if quantized else 0)


def _tfl_shape(detail: dict[str, Any]) -> tuple[int, ...]:
    shape = detail.get("shape_signature")
    return tuple(int(d) for d in (shape if shape is not None and len(shape) else detail["shape"]))


def _channels_last(rank: int) -> tuple[int, ...]:
    """The permutation NC... -> N...C for rank 3 to 5; identity otherwise."""
    if rank not in (3, 4, 5):
        return tuple(range(rank))
    return (0, *range(2, rank), 1)


def _layouts(onnx_shape: tuple[int | str, ...],
             tfl_shape: tuple[int, ...]) -> list[tuple[int, ...] | None]:
    """Permutations (None: none) that turn the ONNX shape into the TFLite one, preferred first.

    onnx2tf's convention is channels-last, so it wins when both fit (e.g. [1, 8, 8, 8]).
    An ONNX shape of unknown rank fits anything unchanged.
    """
    if not onnx_shape:
        return [None]
    if len(onnx_shape) != len(tfl_shape):
        return []
    fits: list[tuple[int, ...] | None] = []
    perm = _channels_last(len(onnx_shape))
    if perm != tuple(range(len(perm))) and _dims_fit([onnx_shape[p] for p in perm], tfl_shape):
        fits.append(perm)
    if _dims_fit(list(onnx_shape), tfl_shape):
        fits.append(None)
    return fits


def _dims_fit(onnx_dims: list[int | str], tfl_dims: tuple[int, ...]) -> bool:
    """Dims agree, symbolic ONNX dims and -1 TFLite dims matching anything."""
    return all(not isinstance(a, int) or a <= 0 or b < 0 or a == b
               for a, b in zip(onnx_dims, tfl_dims, strict=True))
