"""One onnx2tf run per work directory, in a child process: it writes the fp32, fp16, int8,
int8-dynamic and int8-io .tflite files at once (not the int16-activation ones no candidate
uses: targets.tflite.onnx2tf_child).

A finished run leaves a marker (``MARKER``) that later calls reuse; a failed one leaves a
failure record (``FAILED``) under a key of the model, the calibration set, the timeout and the
converters' versions, so the other precisions and later runs fail fast with the same reason
instead of converting again. While onnx2tf runs, the ``edge.targets`` logger says so every
``HEARTBEAT_S`` seconds (the CLI shows these lines even when stderr is not a terminal).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge.core import cancel
from edge.core.cache import cache_key, earlier_run, this_run
from edge.core.data import dataset_digest
from edge.core.errors import first_line
from edge.core.values import Dataset, ModelInfo, TensorSpec
from targets.base import ConversionError, workdir_lock
from targets.tflite.litert_runner import channels_last, kept_layout, sanitize

__all__ = ["FAILED", "FILES", "LOG", "MARKER", "ensure_converted"]

#: variant -> the onnx2tf output file kept from its run (the ONNX copy is named model.onnx).
#: Every precision is a variant; "int8-io" is the full-int8 model with int8 I/O, which the
#: TFLite target does not offer but the NNAPI target builds on.
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
FAILED = "onnx2tf.failed.json"  # a failed run's reason, under its key
LOG = "onnx2tf.log"
#: onnx2tf downloads this for 4-D 3-channel inputs unless it is in its working directory.
SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
#: Distributions whose versions key a remembered failure (an upgrade tries again).
CONVERTERS = ("onnx2tf", "tensorflow", "tf-keras", "onnx-graphsurgeon", "onnxsim", "sng4onnx",
              "onnx", "numpy")
RECIPE = 3  # 2: TensorFlow-family inputs keep their layout (-kat); 3: -odrqt for integer inputs
#: ONNX ops onnx2tf writes as Select-TF (Flex) ops, which LiteRT's builtin interpreter cannot
#: load (GELU's Erf in attention blocks: FlexErf), and its -rtpo name for writing them with
#: builtin ops instead (its approximations: verified like every candidate). A model without
#: them converts as before, with the same cache keys.
PSEUDO_OPS = {"Erf": "Erf", "Gelu": "GeLU", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan",
              "MatMulInteger": "MatMulInteger"}
HEARTBEAT_S = 30.0
#: onnx2tf's command line less its int16-activation variants (two calibration passes fewer).
CHILD = "targets.tflite.onnx2tf_child"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOISE = re.compile(r"^([IWE]\d{4} |WARNING: All log messages|[\s\u2500-\u257f]*$)")
_ERROR = re.compile(r"(Error|Exception|ERROR|error:|Killed|failed)")
log = logging.getLogger("edge.targets")


def ensure_converted(model: ModelInfo, calib: Dataset, workdir: Path,
                     timeout: float) -> dict[str, Any]:
    """The record of a completed run in ``workdir``, running onnx2tf first if there is none;
    a remembered failure raises its ConversionError again without running."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConversionError(f"cannot use workdir {workdir}: {exc}") from None
    with workdir_lock(workdir):
        done = read_marker(workdir, model)
        if done is not None:
            return done
        key = failure_key(model, calib, timeout)
        _raise_remembered(workdir, key)
        try:
            return _run_onnx2tf(model, calib, workdir, timeout)
        except _RunFailed as failed:
            _write_json(workdir / FAILED, {"key": key, "reason": str(failed),
                                           "model_sha256": model.sha256, "at": time.time(),
                                           "run": this_run()})
            raise ConversionError(str(failed)) from None


class _RunFailed(Exception):
    """onnx2tf ran and failed (or timed out): remembered, unlike an interrupted run."""


def failure_key(model: ModelInfo, calib: Dataset, timeout: float) -> str:
    """What a remembered failure is valid for: model, samples, timeout, converter versions
    (and the ops written with builtins, where there are any)."""
    pseudo = pseudo_ops(model)
    return cache_key(model.sha256, dataset_digest(calib), round(timeout),
                     *([",".join(pseudo)] if pseudo else []), recipe=RECIPE,
                     converters=CONVERTERS)


def pseudo_ops(model: ModelInfo) -> list[str]:
    """onnx2tf's -rtpo names of the model's ops it would otherwise write as Flex ops."""
    return [name for op, name in PSEUDO_OPS.items() if model.ops.get(op)]


def _raise_remembered(workdir: Path, key: str) -> None:
    """Raise the remembered ConversionError of an earlier run with this key, if any."""
    try:
        failed = json.loads((workdir / FAILED).read_text())
    except (OSError, ValueError):
        return
    if not isinstance(failed, dict) or failed.get("key") != key or not failed.get("reason"):
        return
    when = earlier_run(failed)
    if when is None:  # this run's own onnx2tf run, which serves every precision
        raise ConversionError(f"{failed['reason']} [onnx2tf converts every precision in one "
                              "run, and that run failed in this command]")
    raise ConversionError(f"{failed['reason']} [remembered from {when}; same model, samples "
                          f"and converters: delete {workdir / FAILED} to try again]")


def read_marker(workdir: Path, model: ModelInfo) -> dict[str, Any] | None:
    """A previous run's record if it finished for this model and its files are all there.

    A record that accounts for fewer variants than ``FILES`` (written before a variant was
    added) or comes from an older recipe is stale: the run is repeated.
    """
    try:
        run = json.loads((workdir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if run.get("model_sha256") != model.sha256 or run.get("recipe", 1) != RECIPE \
            or run.get("pseudo_ops", []) != pseudo_ops(model):
        return None
    if not all((workdir / f).is_file() for f in run.get("files", {}).values()):
        return None
    if not set(FILES) <= {*run.get("files", {}), *run.get("missing", {})}:
        return None
    return run


def _run_onnx2tf(model: ModelInfo, calib: Dataset, workdir: Path,
                 timeout: float) -> dict[str, Any]:
    """Convert in a scratch dir, move the artifacts in, then write the marker."""
    clear(workdir)
    scratch = Path(tempfile.mkdtemp(prefix=".onnx2tf-", dir=workdir))
    try:
        flags, run = prepare(model, calib, scratch)
        logfile = workdir / LOG
        argv = [sys.executable, "-m", CHILD, "-i", "model.onnx", "-o", "out", *flags]
        with _heartbeat(Path(model.path).name, logfile):
            code, seconds, peak_mb, timed_out = spawn(argv, scratch, logfile, timeout)
        _check_run(scratch / "out", code, timed_out, timeout, logfile)
        _keep_files(scratch / "out", workdir, run, logfile)
        run.update(exit_code=code, seconds=round(seconds, 2), peak_rss_mb=round(peak_mb, 1),
                   argv=argv[3:])
        _write_json(workdir / MARKER, run)
        return run
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_run(out: Path, code: int, timed_out: bool, timeout: float, logfile: Path) -> None:
    """Raise _RunFailed when the run timed out or wrote no fp32 model."""
    if timed_out:
        raise _RunFailed(f"onnx2tf timed out after {timeout:.0f} s (log: {logfile})")
    if code < 0 and not (out / FILES["fp32"]).is_file():  # killed: not the model's failure
        raise ConversionError(f"onnx2tf was stopped by signal {-code} (log: {logfile}); "
                              "not remembered: the next run converts again")
    if not (out / FILES["fp32"]).is_file():
        raise _RunFailed(f"onnx2tf failed (exit {code}): {reason(logfile)} (log: {logfile})")


def _keep_files(out: Path, workdir: Path, run: dict[str, Any], logfile: Path) -> None:
    """Move every variant onnx2tf wrote into ``workdir``; explain each one it did not."""
    for precision, name in FILES.items():
        if (out / name).is_file():
            os.replace(out / name, workdir / name)
            run["files"][precision] = name
        else:
            run["missing"].setdefault(precision, f"{reason(logfile)} (log: {logfile})")


def clear(workdir: Path) -> None:
    """Drop the marker, failure, artifacts and scratch dirs of an earlier or stale run."""
    (workdir / MARKER).unlink(missing_ok=True)
    (workdir / FAILED).unlink(missing_ok=True)
    for name in FILES.values():
        (workdir / name).unlink(missing_ok=True)
    for stale in workdir.glob(".onnx2tf-*"):
        shutil.rmtree(stale, ignore_errors=True)


def prepare(model: ModelInfo, calib: Dataset, scratch: Path) -> tuple[list[str], dict[str, Any]]:
    """Write onnx2tf's inputs into ``scratch``; return its flags and the run record so far."""
    _copy_model(Path(model.path), scratch / "model.onnx")
    rng = np.random.default_rng(0)  # stands in for the MS-COCO sample onnx2tf would download
    np.save(scratch / SAMPLE, rng.random((20, 128, 128, 3), dtype=np.float32))
    kept = kept_layout(model)
    flags = _shape_flags(model, calib)
    quant, missing = _calibration_flags(model, calib, scratch, kept)
    pseudo = pseudo_ops(model)
    run: dict[str, Any] = {
        "model_sha256": model.sha256, "onnx2tf": version("onnx2tf"), "files": {},
        "missing": missing,
        "calibration_samples": len(calib), "fixed_shapes": flags[1::2], "recipe": RECIPE,
        "kept_layout": list(kept), **({"pseudo_ops": pseudo} if pseudo else {}),
    }
    return (flags + (["-kat", *kept] if kept else []) + (["-rtpo", *pseudo] if pseudo else [])
            + quant), run


def _copy_model(src: Path, dst: Path) -> None:
    """Copy the model (onnx2tf rewrites its input in place); inline any external data."""
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


def _calibration_flags(model: ModelInfo, calib: Dataset, scratch: Path,
                       kept: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``-oiqt`` with one ``-cind`` file per input in the artifact's layout; with an integer
    input, ``-odrqt`` (dynamic-range int8 needs no calibration); and why each variant the
    flags leave out is missing."""
    if not len(calib):
        return [], dict.fromkeys(_QUANTIZED, "no calibration samples")
    integer = next((s for s in model.inputs
                    if not np.issubdtype(np.dtype(s.dtype), np.floating)), None)
    if integer is not None:
        why = (f"input '{integer.name}' is {integer.dtype}: full-integer int8 calibrates and "
               "quantizes float inputs only; use the int8-dynamic candidate (int8 weights, "
               "inputs as given) or fp16")
        return ["-odrqt"], dict.fromkeys(("int8", "int8-io"), why)
    flags = ["-oiqt", "-qt", "per-channel"]
    for i, spec in enumerate(model.inputs):
        file = f"calib_{i}.npy"
        np.save(scratch / file, _stack(calib, spec, keep=spec.name in kept))
        flags += ["-cind", sanitize(spec.name), file, "[0.0]", "[1.0]"]  # no normalization
    return flags, {}


def _stack(calib: Dataset, spec: TensorSpec, *, keep: bool) -> np.ndarray:
    """All samples of one input, concatenated on the batch axis, in the artifact's layout."""
    try:
        data = np.concatenate([np.asarray(f[spec.name], dtype=np.float32) for f in calib.feeds])
    except KeyError:
        raise ConversionError(f"calibration samples lack input '{spec.name}'") from None
    except ValueError as exc:
        raise ConversionError(f"calibration samples of '{spec.name}' differ in shape: "
                              f"{first_line(exc)}") from None
    return np.ascontiguousarray(data if keep else data.transpose(channels_last(data.ndim)))


# ---------------------------------------------------------------- the child process


@contextlib.contextmanager
def _heartbeat(name: str, logfile: Path) -> Iterator[None]:
    """Log that onnx2tf starts, then every HEARTBEAT_S seconds that it still runs."""
    log.info("onnx2tf: converting %s to TFLite, one run for every precision (log: %s)",
             name, logfile, extra={"heartbeat": True})
    stop, start = threading.Event(), time.monotonic()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            log.info("onnx2tf: still converting %s after %.0f s (log: %s)", name,
                     time.monotonic() - start, logfile, extra={"heartbeat": True})

    thread = threading.Thread(target=beat, name="onnx2tf-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def spawn(argv: list[str], cwd: Path, logfile: Path,
          timeout: float) -> tuple[int, float, float, bool]:
    """Run ``argv`` with its output in ``logfile``; return (exit code, seconds, peak MB,
    timed out)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    expired = threading.Event()
    start = time.perf_counter()
    with open(logfile, "wb") as handle:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        timer = threading.Timer(timeout, _expire, (expired, proc))
        timer.start()
        try:
            status, usage = _reap(proc.pid)
        except BaseException:
            _kill(proc)
            proc.wait()
            raise
        finally:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024, expired.is_set()


def _reap(pid: int) -> tuple[int, Any]:
    """The child's wait status and rusage (it and its children), polled every 0.1 s: in the
    main thread a blocking wait4 is not interrupted by a Ctrl-C the kernel hands to another
    thread (ORT's or OpenVINO's pools); in a background conversion the main thread's Ctrl-C
    reaches it as ``edge.core.cancel``'s stop request."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage
        cancel.check()  # the command is being interrupted: the caller kills the converter
        time.sleep(0.1)


def _expire(expired: threading.Event, proc: subprocess.Popen[bytes]) -> None:
    """The converter ran out of time: say so, then kill its process group."""
    expired.set()
    _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group we started (onnx2tf and its onnxsim children)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def reason(logfile: Path) -> str:
    """The last meaningful line of an onnx2tf log, preferring an error line."""
    try:
        text = _ANSI.sub("", logfile.read_text(errors="replace"))
    except OSError:
        return "no log"
    lines = [ln.strip() for ln in text.splitlines() if not _NOISE.match(ln)]
    errors = [ln for ln in lines if _ERROR.search(ln)]
    chosen = (errors or lines or ["no output"])[-1]
    return chosen[:240]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (temp file in the same dir, then rename)."""
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
