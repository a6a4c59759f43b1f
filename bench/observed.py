#!/usr/bin/env python
"""What really ran (issue 43): the digits sample's artifacts benchmarked by ``edge bench`` on the
embedded local device (this host, through edge's agent), and what each runtime said ran each
layer: unit, precision and share of the MACs, read from the runtime at the load the agent timed.

    python bench/observed.py [--update-docs]

Rows: OpenVINO's own converter's fp32 IR compiled plainly (as OpenVINO's samples do) and edge's
fp32 IR (the f32 hint it records); ONNX Runtime fp32 and int8; LiteRT int8 (its XNNPACK
delegate); LiteRT int8 made for an NPU behind an external delegate that takes nothing (a null
delegate built here with the C compiler: the artifact fell back, and ``edge bench`` says so with
exit 1 unless --allow-fallback); NCNN on Vulkan (Mesa's lavapipe on this host). Writes
bench/results/observed.json (with provenance) and, with ``--update-docs``, the table in
docs/accelerators/README.md between its markers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import provenance  # noqa: E402

from edge.core.data import load_dataset  # noqa: E402
from edge.core.model import inspect_model  # noqa: E402
from edge.core.values import Dataset, ModelInfo  # noqa: E402
from targets import get_target  # noqa: E402
from targets.base import ConvertSettings  # noqa: E402
from tests.support.null_delegate import build_null_delegate  # noqa: E402

SAMPLE = ROOT / "edge" / "samples"
OUT = ROOT / "bench" / "results" / "observed.json"
DOC = ROOT / "docs" / "accelerators" / "README.md"
BEGIN, END = "<!-- observed:begin -->", "<!-- observed:end -->"
RUNS = "50"


def artifacts(work: Path) -> dict[str, tuple[Path, str]]:
    """Each row's artifact file and how it was made."""
    model = inspect_model(SAMPLE / "digits.onnx")
    calib = load_dataset(SAMPLE / "digits_calib.npy", model)
    made = {"openvino-ovc": (_ovc_ir(work), "OpenVINO's converter (its fp32 IR, no hint "
                                            "recorded: edge's agent loads it with f32)")}
    for name, target, precision in (("openvino-fp32", "openvino", "fp32"),
                                    ("onnxruntime-fp32", "onnxruntime", "fp32"),
                                    ("onnxruntime-int8", "onnxruntime", "int8"),
                                    ("tflite-int8", "tflite", "int8"),
                                    ("ncnn-vulkan-fp32", "ncnn-vulkan", "fp32")):
        made[name] = (_converted(model, target, precision, calib, work / name), f"edge {name}")
    made["tflite-delegate-int8"] = (_null_delegate(model, calib, work), "edge tflite-delegate-"
                                    "int8, its companion naming a delegate that takes nothing")
    return made


def _ovc_ir(work: Path) -> Path:
    import openvino as ov

    path = work / "ovc" / "digits.xml"
    path.parent.mkdir(parents=True)
    ov.save_model(ov.Core().read_model(str(SAMPLE / "digits.onnx")), str(path),
                  compress_to_fp16=False)
    return path


def _converted(model: ModelInfo, target: str, precision: str, calib: Dataset, work: Path,
               settings: ConvertSettings | None = None) -> Path:
    extra = {"settings": settings} if settings else {}
    path, _ = get_target(target).convert(model, precision, calib=calib, workdir=work, **extra)
    return Path(path)


def _null_delegate(model: ModelInfo, calib: Dataset, work: Path) -> Path:
    """The int8 TFLite for a delegate NPU, released with a null delegate as its library."""
    library = build_null_delegate(work / "null")
    settings = ConvertSettings(accelerator=(("delegate", str(library)),))
    made = _converted(model, "tflite-delegate", "int8", calib, work / "delegate", settings)
    release = work / "release"
    release.mkdir()
    shutil.copy(made, release / "model.delegate.tflite")
    shutil.copy(made.with_name(made.name[:-len(".delegate.tflite")] + ".json"),
                release / "model.json")
    return release / "model.delegate.tflite"


def benched(path: Path) -> dict[str, Any]:
    """``edge bench`` of one file on the embedded local device: exit status, the observed
    record and its error line."""
    done = subprocess.run([sys.executable, "-m", "edge", "bench", str(path), "--runs", RUNS,
                           "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    said = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    observed = json.loads(done.stdout)["bench"].get("observed") if done.stdout.strip() else None
    return {"exit": done.returncode, "observed": observed, "error": said[0] if said else None}


def plain_compile(path: Path) -> dict[str, Any]:
    """The IR compiled as OpenVINO's own samples compile it (``compile_model(xml, "CPU")``, no
    hint), observed the way edge's agent observes its loads."""
    import openvino as ov

    from edge.core.values import Observed
    from targets.openvino import agent

    seen = agent.openvino_observed(ov.Core().compile_model(str(path), "CPU"))
    observed = Observed.from_json(dict(seen, runtime="openvino")).to_json()
    return {"exit": None, "observed": observed, "error": None}


def row(name: str, how: str, run: dict[str, Any]) -> dict[str, Any]:
    from edge.core.values import Observed

    seen = Observed.from_json(run["observed"]) if run["observed"] else None
    return {"artifact": name, "made_by": how, "exit": run["exit"], "error": run["error"],
            "ran": seen.line() if seen else "no observation",
            "shares": seen.table() if seen else [], "fell_back": seen.fell_back() if seen else None,
            "layers": len(seen.layers) if seen else 0, "observed": run["observed"]}


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["What each runtime said ran the digits sample's layers, `edge bench` on the "
             "embedded local device (this host, through edge's agent; bench/observed.py, "
             "bench/results/observed.json):", "",
             "| artifact | made by | ran (unit, precision, share of the MACs) | edge bench |",
             "|---|---|---|---|"]
    for r in rows:
        verdict = ("not edge bench" if r["exit"] is None else "exit 0" if r["exit"] == 0
                   else f"exit {r['exit']}: {r['error'] or ''}")
        lines.append(f"| {r['artifact']} | {r['made_by']} | "
                     f"{r['ran'].removeprefix('ran: ')} | {verdict.replace('|', '/')} |")
    return lines


def update_docs(lines: list[str]) -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-observed-") as tmp:
        made = artifacts(Path(tmp))
        rows = [row(name, how, benched(path)) for name, (path, how) in made.items()]
        rows.insert(1, row("openvino-ovc, plain compile", "the same IR compiled as OpenVINO's "
                           "samples do (no hint)", plain_compile(made["openvino-ovc"][0])))
    OUT.write_text(json.dumps({"provenance": provenance.record("bench/observed.py", argv),
                               "runs": int(RUNS), "rows": rows}, indent=1) + "\n")
    lines = table(rows)
    print("\n".join(lines))
    if args.update_docs:
        update_docs(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
