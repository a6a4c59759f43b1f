#!/usr/bin/env python
"""How clearly per-layer and per-node timings find the heavy layer: the speed claims that the
tests (tests/edge/test_layers.py, tests/partition/test_cost_device.py) leave out because a noisy,
shared machine can bend them; the tests keep only the ranking.

    python bench/layers.py [--repeats 5] [--runs 20] [--out FILE]

Two models from those tests, each measured ``--repeats`` times, the repeats interleaved:

* the heavy model of test_layers (a tiny conv, a wide fully connected layer with ~100x the work
  of everything else, a tiny head) per layer with ``targets.layers.measure_layers`` on this
  host: onnxruntime, OpenVINO fp32 IR, LiteRT fp32 and int8 (prefix timings). Reported: the
  heavy layer's share of the total and its ratio to the next layer (the tests asserted > 40 %
  and > 2x until they moved here);
* the profile model of test_agent_profile (big_matmul, bias_add, row_sum, tiny_relu) per node
  with ``partition.cost`` on this host and ON the embedded local device by the agent. Reported:
  big_matmul's share (asserted > 50 %), its ratio to tiny_relu (asserted > 5x, then 2x after a
  4.8x outlier in CI) and device / host for big_matmul (asserted within 3x).

Prints a table and writes JSON (default bench/results/layers.json) with the load at the start,
the runtime versions and, under "provenance" (bench/provenance.py), the command, git commit and
machine (CPU model and flags, cores, memory, kernel, Python).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402  (bench/ is this script's directory)

from devices.transport import LocalTransport  # noqa: E402
from edge.core.model import inspect_model  # noqa: E402
from edge.core.values import Dataset  # noqa: E402
from partition.cost import measure_costs, measure_costs_on_device  # noqa: E402
from targets import get_target  # noqa: E402
from targets.layers import LayerProfile, measure_layers  # noqa: E402
from tests.support.heavy import HEAVY, heavy_matmul_model, wide_fc_model  # noqa: E402


def layer_files(work: Path) -> dict[str, Path]:
    """The heavy model as .onnx, OpenVINO fp32 IR and LiteRT fp32 / int8."""
    import numpy as np

    info = inspect_model(wide_fc_model(work / "heavy.onnx"))
    calib = Dataset(feeds=tuple({"input": x} for x in np.random.default_rng(1)
                                .standard_normal((16, 1, 1, 16, 16)).astype(np.float32)))
    ir, _ = get_target("openvino").convert(info, "fp32", calib=Dataset(feeds=()),
                                           workdir=work / "ov")
    tflite = get_target("tflite")
    return {"onnxruntime": Path(info.path), "openvino-fp32": ir,
            **{f"tflite-{p}": tflite.convert(info, p, calib=calib, workdir=work / "tf")[0]
               for p in ("fp32", "int8")}}


def layer_numbers(profile: LayerProfile) -> dict[str, Any]:
    top, second = profile.layers[:2]
    return {"top": top.name, "heavy_first": top.name.startswith(HEAVY) or
            top.op == "FULLY_CONNECTED", "share": top.ms / profile.total_ms,
            "ratio_to_next": top.ms / second.ms if second.ms > 0 else None,
            "total_ms": profile.total_ms}


def node_numbers(host: dict[str, float], device: dict[str, float]) -> dict[str, Any]:
    def one(costs: dict[str, float]) -> dict[str, Any]:
        return {"heavy_first": max(costs, key=costs.__getitem__) == "big_matmul",
                "share": costs["big_matmul"] / sum(costs.values()),
                "ratio_to_tiny": (costs["big_matmul"] / costs["tiny_relu"]
                                  if costs["tiny_relu"] > 0 else None)}
    return {"host": one(host), "device": one(device),
            "device_over_host": device["big_matmul"] / host["big_matmul"]}


def summary(values: list[float | None]) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(known), "min": min(known), "max": max(known)}


def runtime() -> dict[str, Any]:
    """The load when the run started and the runtime versions (commit and machine: provenance)."""
    from importlib.metadata import version

    return {"loadavg_at_start": os.getloadavg(),
            "versions": {p: version(p) for p in ("onnxruntime", "openvino", "ai-edge-litert",
                                                  "onnx2tf", "numpy")}}


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The samples of every job; the temporary models are removed at the end."""
    with tempfile.TemporaryDirectory(prefix="edge-bench-layers-") as tmp:
        return measure(Path(tmp), args)


def measure(work: Path, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every job ``args.repeats`` times, interleaved, on models written under ``work``."""
    files = layer_files(work)
    nodes_model = heavy_matmul_model(work / "profile.onnx")
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        name: (lambda f=f: layer_numbers(measure_layers(f, runs=args.runs)))
        for name, f in files.items()}
    with LocalTransport(work / "device") as device:
        jobs["per-node (partition.cost)"] = lambda: node_numbers(
            measure_costs(nodes_model, threads=1, runs=args.runs),
            measure_costs_on_device(nodes_model, device, threads=1, runs=args.runs))
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
        for index in range(args.repeats):  # repeats interleaved, order reversed every other
            for name in (list(jobs) if index % 2 == 0 else list(jobs)[::-1]):
                samples[name].append(jobs[name]())
                print(f"[{index + 1}/{args.repeats}] {name}: {samples[name][-1]}",
                      file=sys.stderr)
    return samples


def report(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, runs in samples.items():
        if "host" in runs[0]:
            out[name] = {side: {key: summary([r[side][key] for r in runs])
                                for key in ("share", "ratio_to_tiny")}
                         | {"heavy_first": all(r[side]["heavy_first"] for r in runs)}
                         for side in ("host", "device")}
            out[name]["device_over_host"] = summary([r["device_over_host"] for r in runs])
        else:
            out[name] = {key: summary([r[key] for r in runs])
                         for key in ("share", "ratio_to_next", "total_ms")}
            out[name]["heavy_first"] = all(r["heavy_first"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "layers.json")
    args = parser.parse_args(argv)
    started, host = time.time(), runtime()
    samples = run(args)
    document = {"runtime": host, "repeats": args.repeats, "runs": args.runs,
                "results": report(samples), "samples": samples,
                "seconds": round(time.time() - started, 1),
                "provenance": provenance.record("bench/layers.py", argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    for name, numbers in document["results"].items():
        print(name, json.dumps(numbers))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
