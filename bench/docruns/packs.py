"""The session of docs/pack.md: a camera pack (three real text detectors and a classifier from
the zoo's wheels) planned for rock5b, jetson-orin-nano and rpi5 from estimates, and
bench/pack.py's pack of three real models planned, proven and switched on the embedded local
device (this host)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from .models import DOCS_DIR
from .steps import Session, Step, from_

ROOT = Path(__file__).resolve().parents[2]

#: PACK.yaml of the camera pack (the zoo's rapidocr-det twice at two sizes, ddddocr-det, and
#: rapidocr-cls).
CAMERA = {"name": "camera", "models": [
    {"model": "ch_PP-OCRv4_det_infer.onnx", "name": "det-320", "shape": {"x": [1, 3, 320, 320]},
     "rate": 10, "p99_ms": 200},
    {"model": "common_det.onnx", "name": "det-b", "rate": 10, "p99_ms": 200},
    {"model": "ch_PP-OCRv4_det_infer.onnx", "name": "det-480", "shape": {"x": [1, 3, 480, 480]},
     "rate": 10, "p99_ms": 200},
    {"model": "ch_ppocr_mobile_v2.0_cls_infer.onnx", "name": "cls",
     "shape": {"x": [1, 3, 48, 192]}, "rate": 20, "p99_ms": 50, "priority": 2}]}
def _files(work: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.zoo import entry, model

    for name in ("rapidocr-det", "ddddocr-det", "rapidocr-cls", "oww-embedding"):
        shutil.copy(model(entry(name)), work)
    (work / "camera.yaml").write_text(json.dumps(CAMERA, indent=1) + "\n")
    shutil.copy(ROOT / "bench" / "packs" / "trio.yaml", work)  # bench/pack.py's


PACK = Session(name="pack", docs=("docs/pack.md",), workdir=DOCS_DIR / "pack", files=_files,
               steps=[
    Step(command="edge pack plan camera.yaml --profile rock5b --dry-run", block=0),
    Step(command="edge pack plan camera.yaml --profile jetson-orin-nano --dry-run", block=1),
    Step(command="edge pack plan camera.yaml --profile rpi5 --dry-run", block=1, gap=True),
    Step(command="edge pack deploy trio.yaml --profile x86-64 --seconds 3", block=2,
         show=from_("pack trio on")),
    Step(command="edge releases", block=2, gap=True),
])
