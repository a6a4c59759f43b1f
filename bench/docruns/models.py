"""The sessions of docs/commands/optimize.md, inspect.md and report.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import files
from .steps import Session, Show, Step, from_, head_tail, keep, nothing, on_page, upto

DOCS_DIR = Path("/tmp/edge-docs")

TINY = "extends: rpi4\nmemory:\n  model_budget_mb: 2\n"
ONE_MB = "extends: rpi4\nmemory:\n  model_budget_mb: 1\n"
ORT_ONLY = "extends: x86-64\nruntimes: [onnxruntime]\n"
OV_ORT = "extends: x86-64\nruntimes: [openvino, onnxruntime]\n"
#: The manifest notes of the pixel-8 bundle's nnapi candidate, one a line.
NNAPI_NOTES = ("python -c \"import json; m = json.load(open('p8.bundle/manifest.json')); "
               "c = next(c for c in m['candidates'] if c['candidate']['target'] == 'nnapi'); "
               "print(*c['artifact']['notes'], sep='\\n')\"")


def _optimize_files(work: Path) -> None:
    files.digits(work)
    files.digits(work, "digits.onnx", "digits_calib.npy", "digits_eval.npz")
    files.matmul(work / "big.onnx", 1024, 1024)
    files.normal(work / "big_calib.npy", 20, 1024)
    files.matmul(work / "huge.onnx", 2048, 1024)
    files.outlier_digits(work / "digits.onnx", work / "digits_outlier.onnx",
                         np.load(work / "digits_calib.npy"))
    calib = np.load(work / "digits_calib.npy")
    np.save(work / "calib_3d.npy", calib.reshape(len(calib), 8, 8))
    np.save(work / "three.npy", calib[:3])
    (work / "notbundle").mkdir()
    (work / "notbundle" / "notes.txt").write_text("not an edge bundle\n")
    files.detector(work)
    files.ctc_recognizer(work)
    files.cancelling(work)
    files.sparse_face_detector(work / "face_detection_full_range_sparse.tflite")
    files.faces192(work / "faces192.npy")
    files.write(work, {"tiny.yaml": TINY, "one-mb.yaml": ONE_MB, "ort-only.yaml": ORT_ONLY,
                       "ov-ort.yaml": OV_ORT, "my-pi.yaml": files.MY_PI})


def _judged(output: str) -> Show:
    """The int8 rows that keep fidelity, and how ``output`` was judged."""
    return keep(lambda _, line: "keeps fidelity" in line and "-int8 " in line
                or line.startswith(("outputs judged as:", f"  {output}: ")))


def _fp32_rows(lines: list[str]) -> list[str]:
    """The candidate table's header and its fp32 rows (each labelled exact or not)."""
    head = next(i for i, line in enumerate(lines) if line.startswith("candidate "))
    return keep(lambda i, line: i in (head, head + 1) or "fp32 exact" in line
                or "fp32 not exact" in line)(lines)


_O = "edge optimize sample:digits --profile"
_DET = "edge optimize det.onnx --profile ort-only.yaml --calib det.npy"
_OUTLIER = ("edge optimize digits_outlier.onnx --profile ort-only.yaml --calib digits_calib.npy "
            "--eval digits_eval.npz -o outlier.bundle")

OPTIMIZE = Session(name="optimize", docs=("docs/commands/optimize.md",),
                   workdir=DOCS_DIR / "optimize", files=_optimize_files, steps=[
    Step(command=f"{_O} rpi4 --dry-run", block=0),
    Step(command=f"{_O} pixel-8 --dry-run", block=0, gap=True),
    Step(command=f"{_O} jetson-nano --dry-run", block=0, gap=True),
    Step(command="edge optimize big.onnx --profile tiny.yaml --dry-run", block=0, gap=True),
    Step(command=f"{_O} rpi4 -o demo.bundle", block=1, tty=True),
    Step(command="ls demo.bundle demo.bundle/artifacts", block=2),
    Step(command=f"{_O} x86-64 -o d.bundle", block=3, tty=True),
    Step(command=f"{_O} pixel-8 -o p8.bundle", block=4),
    Step(command=NNAPI_NOTES, block=5),
    Step(command=f"{_O} x86-64 --latency-budget 0.04 -o lb.bundle", block=6,
         show=from_("candidate ")),
    Step(command=f"{_O} rpi4 --latency-budget 5 --json -o lb-rpi4.bundle 2>/dev/null | tail -4",
         block=7),
    Step(command="edge optimize ctc.onnx --profile ort-only.yaml --calib lines.npy -o ctc.bundle",
         block=8, show=_judged("logits")),
    Step(command=f"{_DET} -o det.bundle", block=9, show=_judged("out")),
    Step(command=f"{_DET} --metric out=yolo -o det-yolo.bundle", block=9),
    Step(command="edge optimize det.onnx --profile ort-only.yaml --metric scroes=probs", block=10),
    Step(command="edge optimize cancel.onnx --profile ov-ort.yaml --calib x.npy -o cancel.bundle",
         block=11, show=_fp32_rows),
    Step(command=_OUTLIER, block=12, tty=True),
    Step(command="edge optimize huge.onnx --profile one-mb.yaml -o huge.bundle", block=13),
    Step(command="echo $?", block=13),
    Step(command="edge optimize big.onnx --profile x86-64 -o big.bundle", block=14),
    Step(command="edge optimize big.onnx --profile x86-64 --calib big_calib.npy -o big.bundle",
         block=14, show=upto("verified on")),
    Step(command="edge optimize face_detection_full_range_sparse.tflite --profile x86-64 "
                 "--calib faces192.npy -o sparse.bundle", block=15),
    Step(command="edge optimize model.onnx --profile rpi4 --calib calib.npy --eval eval.npz "
                 "-o rpi4.bundle", block=16, show=from_("chosen:")),
    Step(command=f"{_O} my-pi.yaml --min-cosine 1 --metric logits=values -o strict.bundle",
         block=17,
         show=from_("candidate ")),
    Step(command="echo $?", block=17),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib calib_3d.npy", block=18),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib three.npy", block=18),
    Step(command="edge optimize digits.onnx --profile rpi4 -o notbundle", block=18),
    Step(command=f"{_O} rpi4 --dry-run | tail -1", block=19),
    Step(command=f"{_O} rpi4 --time-budget 1 -o tb.bundle", block=19, show=from_("candidate ")),
])


def _inspect_files(work: Path) -> None:
    files.matmul(work / "big.onnx", 1024, 1024)
    files.face_detector(work / "face_detection_short_range.tflite")
    files.torchscript_mlp(work / "mlp_ts.pt")
    files.trunk(work)
    files.not_models(work)
    files.write(work, {"tiny.yaml": TINY})


_I = "edge inspect"
INSPECT = Session(name="inspect", docs=("docs/commands/inspect.md",),
                  workdir=DOCS_DIR / "inspect", files=_inspect_files, steps=[
    Step(command=f"{_I} sample:digits --profile rpi4", block=0),
    Step(command=f"{_I} face_detection_short_range.tflite --profile rpi4", block=1),
    Step(command=f"{_I} big.onnx --profile tiny.yaml", block=2),
    Step(command="echo $?", block=2),
    Step(command=f"{_I} trunk.onnx", block=3, show=head_tail(3, 0)),
    Step(command=f"{_I} trunk.onnx --shape input=1,1,320,320", block=3, show=head_tail(2, 0)),
    Step(command=f"{_I} big.onnx --shape x=4,1024", block=4, show=upto("input ")),
    Step(command=f"{_I} big.onnx --shape x=4,512", block=4),
    Step(command=f"{_I} mlp_ts.pt", block=4, gap=True),
    Step(command=f"{_I} mlp_ts.pt --shape y=1,32", block=4),
    Step(command=f"{_I} mlp_ts.pt --shape x=1,32", block=4),
    *(Step(command=f"{_I} {name}", block=5)
      for name in ("bad.onnx", "model.tflite", "model.bin", "emptydir")),
])

_R = on_page("docs/commands/report.md")
REPORT = Session(name="report", docs=("docs/commands/report.md",),
                 workdir=DOCS_DIR / "report", files=lambda work: None, steps=[
    _R(command=f"{_O} rpi4 -o digits-rpi4.bundle", block=0, show=nothing),
    _R(command="edge report digits-rpi4.bundle -o digits-report.html", block=0),
    _R(command="edge partition sample:digits --profile rpi4 --cloud cloud-t4 -o digits-split",
       block=0, show=nothing),
    _R(command="edge report digits-split -o split-report.html", block=0),
])
