#!/usr/bin/env python
"""TensorRT engines built, checked and timed on a machine with an NVIDIA GPU, by edge's own
device loader (targets/tensorrt/agent.py), from the ONNX artifacts edge made on its host.

    python bench/tensorrt_device.py make [--dir DIR]     # on edge's host: the artifacts
    python bench/tensorrt_device.py [--dir DIR] [--runs N] [--out FILE]   # on the GPU machine

``make`` converts the digits sample and the bench MobileNetV2 (bench/peerbench, cached under
bench/.cache) with edge's TensorRT target (fp32, fp16, int8 Q/DQ) into DIR (default
bench/.cache/tensorrt: ``<model>/model_<precision>.trt.onnx`` and its ``.npz`` companion of
build settings and reference outputs). Copy DIR into the GPU machine's checkout at the same path.

The default command needs only the standard library, numpy and TensorRT (the CUDA runtime it
ships): for each artifact it builds the engine (timed), loads it again from the cache in the
artifact's folder (timed: no rebuild), checks every output against the reference outputs edge
computed on its host, and times runs (inputs in, inference, outputs out). It writes
bench/results/tensorrt_device.json with the commit, the machine, the GPU and TensorRT's version,
or, when TensorRT or the GPU is missing, the same file saying exactly why (exit status 3).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import provenance  # noqa: E402 - bench/ on the path first


def _as_on_a_device() -> Any:
    """targets/tensorrt/agent.py imported as the agent zipapp imports it (``edge_agent`` and
    its ``runtime_tensorrt``): the standard library and numpy only, no edge host packages."""
    spec = importlib.util.spec_from_file_location(
        "edge_agent", ROOT / "devices" / "agent" / "__init__.py",
        submodule_search_locations=[str(ROOT / "devices" / "agent")])
    assert spec is not None and spec.loader is not None
    sys.modules["edge_agent"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["edge_agent"])
    spec = importlib.util.spec_from_file_location("edge_agent.runtime_tensorrt",
                                                  ROOT / "targets" / "tensorrt" / "agent.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agent = _as_on_a_device()
AgentError = sys.modules["edge_agent.errors"].AgentError
DEFAULT_DIR = ROOT / "bench" / ".cache" / "tensorrt"
DEFAULT_OUT = ROOT / "bench" / "results" / "tensorrt_device.json"
MODELS = ("digits", "cnn")
PRECISIONS = ("fp32", "fp16", "int8")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=("run", "make"), default="run")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.mode == "make":
        return make(args.dir)
    report: dict[str, Any] = {"provenance": provenance.record("bench/tensorrt_device.py", argv)}
    try:
        np, trt, cuda = _stack()
        report |= {"tensorrt": trt.__version__, "gpu": cuda.gpu_name(), "status": "ran",
                   "results": [_bench(np, trt, cuda, f, args.runs) for f in _artifacts(args.dir)]}
    except AgentError as exc:
        report |= {"status": "unavailable", "reason": str(exc)}
    _write(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "provenance"}, indent=1))
    return 0 if report["status"] == "ran" else 3


def _stack() -> tuple[Any, Any, Any]:
    import numpy as np

    return np, agent.tensorrt_module(), agent.Cuda.open()


def _artifacts(folder: Path) -> list[Path]:
    found = sorted(folder.glob(f"*/model_*{agent.SUFFIXES[0]}"))
    if not found:
        raise AgentError(f"no artifacts under {folder}: run `python bench/tensorrt_device.py "
                         "make` on edge's host and copy that folder here", status=2)
    return found


def _bench(np: Any, trt: Any, cuda: Any, path: Path, runs: int) -> dict[str, Any]:
    """Build (timed), reload from the cache (timed), check against the reference, time."""
    row: dict[str, Any] = {"model": path.parent.name, "file": path.name,
                           "size_bytes": path.stat().st_size}
    try:
        settings, samples = agent.read_companion(np, str(path))
        _drop_engines(path)
        row["precision"], row["build"] = settings["precision"], settings["build"]
        row["build_s"], _ = _timed(agent.cached_engine, trt, cuda, str(path), settings)
        row["cached_load_s"], engine = _timed(agent.cached_engine, trt, cuda, str(path),
                                              settings)
        session = agent.Session(np, trt, cuda, engine)
        row["agreement"] = agent.check_outputs(np, session, settings, samples)
        row["thresholds"] = dict(zip(settings["outputs"], settings["thresholds"], strict=True))
        row["host_agreement"] = dict(zip(settings["outputs"], settings["host_agreement"],
                                          strict=True))
        row |= _timing(session.run_once, runs)
        row["status"] = "verified"
    except AgentError as exc:
        row |= {"status": "failed", "reason": str(exc)}
    return row


def _drop_engines(path: Path) -> None:
    """Start from no cached engine, so the first load is a build."""
    stem = str(path)[:-len(agent.SUFFIXES[0])]
    for old in Path(stem).parent.glob(Path(stem).name + ".*" + agent.ENGINE_SUFFIX):
        old.unlink()


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn(*args)
    return round(time.perf_counter() - start, 3), value


def _timing(run: Any, runs: int) -> dict[str, Any]:
    """Median, p10 and p90 ms of ``runs`` runs after 20 warm-up runs."""
    for _ in range(20):
        run()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return {"runs": runs, "p50_ms": round(statistics.median(samples), 4),
            "p10_ms": round(samples[len(samples) // 10], 4),
            "p90_ms": round(samples[(len(samples) * 9) // 10], 4)}


def _write(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(report, indent=1, default=str) + "\n")
    os.replace(partial, out)


# ---------------------------------------------------------------- make (edge's host)


def make(folder: Path) -> int:
    """The artifacts of both models at every precision, with their companions."""
    from edge.core.data import load_dataset
    from edge.core.model import inspect_model
    from targets.tensorrt import TensorRTTarget, companion_of

    for old in (folder, folder.parent / "tensorrt-work"):  # never a stale recipe or file
        shutil.rmtree(old, ignore_errors=True)
    for name, (onnx_path, calib_path) in _sources().items():
        model = inspect_model(onnx_path)
        calib = load_dataset(calib_path, model)
        out = folder / name
        for precision in PRECISIONS:
            path, notes = TensorRTTarget().convert(model, precision, calib=calib,
                                                   workdir=folder.parent / "tensorrt-work" / name)
            _copy(path, out / f"model_{precision}{agent.SUFFIXES[0]}")
            _copy(companion_of(path), out / f"model_{precision}{agent.COMPANION}")
            print(f"{name} {precision}: {out / path.name} ({notes[0][:70]}...)")
    return 0


def _sources() -> dict[str, tuple[str, str]]:
    from peerbench.common import CACHE, CNN_RECIPE
    from peerbench.models import build_cnn

    samples = ROOT / "edge" / "samples"
    cnn = build_cnn(CACHE / CNN_RECIPE)
    return {"digits": (str(samples / "digits.onnx"), str(samples / "digits_calib.npy")),
            "cnn": (cnn["onnx"], cnn["calib"])}


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())


if __name__ == "__main__":
    sys.exit(main())
