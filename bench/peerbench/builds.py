"""Each peer's artifact from its one-command defaults, and edge optimize run as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import BIN, CACHE, CNN_RECIPE, ONNX2TF_SAMPLE, PROFILE, ROOT
from .models import build_cnn, build_digits
from .zoomodels import ZOO, build_zoo

# ====================================================================== peers' defaults


PEERS = ("ort-static", "ort-dynamic", "nncf", "onnx2tf")


def build_peers(onnx_path: Path, calib_path: Path, work: Path) -> dict[str, dict[str, Any]]:
    """Each peer's artifact from its one-command defaults (cached by model and data hash)."""
    key = _digest(onnx_path, calib_path)
    work = work / key
    records = {}
    for name in PEERS:
        records[name] = _cached_build(name, onnx_path, np.load(calib_path), work / name)
    return records


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def _cached_build(name: str, src: Path, calib: np.ndarray, work: Path) -> dict[str, Any]:
    record_file = work / "record.json"
    if record_file.is_file():
        return json.loads(record_file.read_text())
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = time.perf_counter()
    try:
        record = {"file": str(_BUILDERS[name](src, calib, work))}
    except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, others go on
        record = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
    record["build_s"] = round(time.perf_counter() - start, 1)
    record_file.write_text(json.dumps(record))
    return record


def calib_reader(name: str, calib: np.ndarray) -> Any:
    """A CalibrationDataReader over the calibration samples, one at a time."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter({name: calib[i:i + 1]} for i in range(len(calib)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    return Reader()


def _ort_static(src: Path, calib: np.ndarray, work: Path) -> Path:
    """ORT docs: quant_pre_process, then quantize_static(model, out, reader) with defaults."""
    from onnxruntime.quantization import quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(work / "pre.onnx"))
    quantize_static(str(work / "pre.onnx"), str(work / "static.onnx"),
                    calib_reader(input_name(src), calib))
    return work / "static.onnx"


def _ort_dynamic(src: Path, calib: np.ndarray, work: Path) -> Path:
    """quantize_dynamic(model, out) with defaults (every op it supports, Conv included)."""
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(str(src), str(work / "dynamic.onnx"))
    return work / "dynamic.onnx"


def _nncf(src: Path, calib: np.ndarray, work: Path) -> Path:
    """nncf.quantize(ov.convert_model(src), nncf.Dataset(calib)) with defaults, saved as IR."""
    import nncf
    import openvino as ov

    quantized = nncf.quantize(ov.convert_model(str(src)),
                              nncf.Dataset([calib[i:i + 1] for i in range(len(calib))]))
    ov.save_model(quantized, str(work / "nncf.xml"), compress_to_fp16=False)
    return work / "nncf.xml"


def _onnx2tf(src: Path, calib: np.ndarray, work: Path) -> Path:
    """``onnx2tf -i model.onnx -o out`` (defaults) -> out/model_float32.tflite."""
    shutil.copyfile(src, work / "model.onnx")
    # offline, onnx2tf downloads this for 3-channel inputs unless it is in its cwd
    np.save(work / ONNX2TF_SAMPLE, np.zeros((20, 128, 128, 3), np.float32))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    with open(work / "onnx2tf.log", "wb") as log:
        # python -m onnx2tf: the console script's own code, present without the script
        subprocess.run([sys.executable, "-m", "onnx2tf", "-i", "model.onnx", "-o", "out"], cwd=work,
                       env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900, check=False)
    out = work / "out" / "model_float32.tflite"
    if not out.is_file():
        tail = (work / "onnx2tf.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"onnx2tf wrote no model_float32.tflite: {' | '.join(tail)}")
    return out


_BUILDERS = {"ort-static": _ort_static, "ort-dynamic": _ort_dynamic, "nncf": _nncf,
             "onnx2tf": _onnx2tf}


def input_name(path: Path) -> str:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph.input[0].name


def prepare(model: str) -> dict[str, Any]:
    """Child process: build the model and data, then every peer's artifact."""
    work = CACHE / (CNN_RECIPE if model == "cnn" else model)
    files: dict[str, Any]
    if model in ZOO:
        files = build_zoo(model, work)
    else:
        files = build_cnn(work) if model == "cnn" else build_digits(work)
        files.update(source=files["onnx"], metrics=[], shapes=[])
    files["peers"] = build_peers(Path(files["onnx"]), Path(files["calib"]), work / "peers")
    return files


# ====================================================================== edge


def edge_flags(files: dict[str, Any], extra: list[str]) -> list[str]:
    """The model's ``--shape`` and ``--metric`` flags, then ``extra`` (e.g. ``--prune``)."""
    return ([a for s in files["shapes"] for a in ("--shape", s)]
            + [a for m in files["metrics"] for a in ("--metric", m)] + extra)


def run_edge(files: dict[str, Any], out: Path, extra: list[str],
             threads: int, profile: Path | None = None,
             runtimes: tuple[str, ...] = ()) -> dict[str, Any]:
    """``edge optimize`` on the original file, as a user runs it, on a profile of this host at
    the thread count every row is timed at (edge measures and chooses at its profile's
    threads; ``profile`` instead when given; ``runtimes`` replacing the profile's list when
    given); its manifest and wall time."""
    env = dict(os.environ, EDGE_CACHE_DIR=str(CACHE / "edge"))
    cmd = [str(BIN / "edge"), "optimize", files["source"], "--profile",
           str(profile or _profile(out.parent, threads, runtimes)), "--calib",
           files["calib"], "--eval", files["eval"], "-o", str(out), "--json",
           *edge_flags(files, extra)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1) or not (out / "manifest.json").is_file():
        sys.exit(f"edge optimize failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {"manifest": manifest, "seconds": round(seconds, 1),
            "command": " ".join(cmd[1:]).replace(str(ROOT) + "/", "")}


def _profile(folder: Path, threads: int, runtimes: tuple[str, ...] = ()) -> Path:
    """``PROFILE`` with ``compute.threads`` set to ``threads`` (and its ``runtimes`` list
    replaced by ``runtimes`` when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{PROFILE}-{threads}t" + "".join(f"-{r}" for r in runtimes)
    path = folder / f"{name}.yaml"
    listed = f"runtimes: [{', '.join(runtimes)}]\n" if runtimes else ""
    path.write_text(f"extends: {PROFILE}\nid: {name}\ncompute: {{threads: {threads}}}\n"
                    + listed)
    return path


def inspect(onnx_path: str) -> dict[str, Any]:
    """``edge inspect --json``: params and MACs."""
    proc = subprocess.run([str(BIN / "edge"), "inspect", onnx_path, "--json"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


