"""A first figure for the i.MX 93's NPU against its CPU, each labelled by where it comes from.

    python bench/accelerators.py [--models digits cnn fer oww hand] [--out FILE]

For each model, ``edge optimize`` for the i.MX 93 profile (profiles/imx93.yaml: Ethos-U65-256
beside 2x Cortex-A55) makes and verifies the ethos-u-int8 candidate (Vela 5.2.0) and the CPU
candidates. Per model the results hold:

- the NPU: Vela's per-inference estimate for the profile's configuration (a vendor estimate,
  ``BenchResult.source`` "estimate"), with its cycles, SRAM use and NPU/CPU operator split;
- the NPU's estimate is given also when fidelity rejected its int8 artifact (what the unit would
  give if it held; the status says so);
- the CPU candidate (what edge chose for the Cortex-A55s, else tflite-int8) as edge measured it on
  THIS host (``source`` as edge labels it; this host is not a Cortex-A55: it only informs);
- a roofline bound for the Cortex-A55s: 2 x MACs / the profile's int8 peak GOPS (an estimate
  from the profile's datasheet figures; a real A55 is slower than its peak).

No i.MX 93 was at hand: nothing here is measured on the device. Models: the digits sample, the
bench MobileNetV2 (bench/peerbench/models.py) and three trained zoo models (fer, oww, hand,
bench/peerbench/zoomodels.py). Writes bench/results/accelerators.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.provenance import record  # noqa: E402

OUT = ROOT / "bench" / "results" / "accelerators.json"
PROFILE = "imx93"
MODELS = ("digits", "cnn", "fer", "oww", "hand")
NPU, CPU = ("ethos-u", "int8"), ("tflite", "int8")


def model_files(model: str, work: Path) -> dict[str, Any]:
    """The model, calibration and held-out files, and optimize's extra flags."""
    if model == "digits":
        return {"onnx": "sample:digits", "flags": []}
    if model == "cnn":
        from peerbench.models import build_cnn

        files = build_cnn(work / "cnn")
        return {"onnx": files["onnx"], "flags": ["--calib", files["calib"], "--eval",
                                                 files["eval"]]}
    from peerbench.zoomodels import entry

    from tests.support import zoo

    found = entry(model)
    calib, held = zoo.write_data(found, work / model)
    flags = ["--calib", str(calib), "--eval", str(held)]
    flags += [a for s in found.shapes for a in ("--shape", s)]
    flags += [a for s in found.metrics for a in ("--metric", s)]
    return {"onnx": str(zoo.model(found)), "flags": flags}


def optimize(files: dict[str, Any], out: Path) -> dict[str, Any]:
    """``edge optimize --profile imx93 --json`` in a child process; its report and seconds."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "edge", "optimize", files["onnx"], "--profile",
                           PROFILE, "-o", str(out), "--json", *files["flags"]],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"edge optimize failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:]}")
    return {"report": json.loads(done.stdout), "seconds": round(time.monotonic() - started, 1)}


def candidate(report: dict[str, Any], target: str, precision: str) -> dict[str, Any] | None:
    """A candidate of the report, None when it is not there."""
    return next((c for c in report["candidates"]
                 if (c["candidate"]["target"], c["candidate"]["precision"]) ==
                 (target, precision)), None)


def cpu_candidate(report: dict[str, Any]) -> dict[str, Any] | None:
    """What edge would run on the Cortex-A55s: the chosen candidate when it is a CPU one, else
    the CPU's tflite-int8."""
    chosen = next((c for c in report["candidates"] if c["status"] == "chosen"), None)
    if chosen is not None and chosen["candidate"]["target"] not in (NPU[0], "original"):
        return chosen
    return candidate(report, *CPU)


def figure(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """A candidate's status, fidelity and timing, labelled by where the timing comes from."""
    if found is None:
        return None
    bench = found.get("bench") or {}
    fid = found.get("fidelity") or {}
    return {"candidate": found["candidate"], "status": found["status"],
            "reason": found["reason"],
            "accuracy": fid.get("accuracy"), "cosine": fid.get("cosine"),
            "p50_ms": bench.get("p50_ms"), "source": bench.get("source"),
            "where": bench.get("where"), "metrics": bench.get("metrics", {}),
            "fallbacks": (found.get("artifact") or {}).get("fallbacks", [])}


def roofline(report: dict[str, Any]) -> dict[str, Any]:
    """The Cortex-A55s' lower bound from the profile's int8 peak (an estimate)."""
    from edge.core.profile import load_profile

    peak = load_profile(PROFILE).compute.peak_gops["int8"]
    macs = report["source"]["macs"]
    return {"p50_ms": 2.0 * macs / (peak * 1e9) * 1e3, "source": "estimate",
            "where": f"roofline: 2 x {macs} MACs / {peak} int8 GOPS (profile peak, 2x "
                     "Cortex-A55 @ 1.7 GHz with SDOT); a real A55 is slower"}


def one(model: str, work: Path) -> dict[str, Any]:
    """The NPU's estimate beside the CPU candidate's figures for one model."""
    run = optimize(model_files(model, work), work / f"{model}.bundle")
    report = run["report"]
    npu, cpu = figure(candidate(report, *NPU)), figure(cpu_candidate(report))
    ratio = None
    if npu and cpu and npu["p50_ms"] and cpu["p50_ms"]:
        ratio = round(cpu["p50_ms"] / npu["p50_ms"], 2)
    return {"macs": report["source"]["macs"], "params": report["source"]["params"],
            "chosen": report["chosen"], "optimize_seconds": run["seconds"],
            "npu": npu, "cpu_on_this_host": cpu, "cpu_roofline": roofline(report),
            "cpu_host_over_npu_estimate": ratio,
            "note": "the NPU figure is Vela's estimate and the CPU figure this host's timing: "
                    "their ratio compares an estimate with a different machine's measurement"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-accelerators-") as tmp:
        models = {m: one(m, Path(tmp)) for m in args.models}
    doc = {"profile": PROFILE, "npu": "Arm Ethos-U65-256 (i.MX 93), Vela 5.2.0",
           "cpu": "2x Cortex-A55 @ 1.7 GHz (the profile); timings from this host",
           "models": models, "provenance": record("bench/accelerators.py", argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, row in models.items():
        npu, cpu = row["npu"] or {}, row["cpu_on_this_host"] or {}
        print(f"{name}: NPU {npu.get('p50_ms')} ms ({npu.get('source')}), CPU here "
              f"{cpu.get('p50_ms')} ms ({cpu.get('source')}), A55 roofline "
              f"{row['cpu_roofline']['p50_ms']:.3f} ms (estimate)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
