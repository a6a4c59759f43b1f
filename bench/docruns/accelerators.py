"""The sessions of the runtime and accelerator pages: docs/ncnn.md (the digits sample for a
ROCK 5B whose runtimes are NCNN's alone, CPU and Vulkan on lavapipe here; NCNN's rows of the
Raspberry Pi 4's plan), docs/executorch.md (the Pi 4's plan and an ExecuTorch-only optimize),
docs/accelerators/rknn.md (the digits sample for the ROCK 5B's NPU through rknn-toolkit2 in its
own environment, verified in its simulator: run with ``EDGE_TOOLCHAIN_DIR`` where that
environment is built, or the first conversion builds it) and docs/accelerators/edgetpu.md (the
Coral Dev Board's plan without the compiler)."""

from __future__ import annotations

from pathlib import Path

from . import files
from .models import DOCS_DIR
from .steps import Session, Show, Step, keep

ROCK5B_NCNN = "extends: rock5b\nid: rock5b-ncnn\nruntimes: [ncnn, ncnn-vulkan]\n"
RPI4_EXECUTORCH = "extends: rpi4\nid: rpi4-executorch\nruntimes: [executorch]\n"
#: The manifest record of the rknn-int8 artifact: its notes, fallbacks and toolchain.
RKNN_RECORD = ("python -c \"import json; m = json.load(open('digits.bundle/manifest.json')); "
               "a = next(c for c in m['candidates'] if c['candidate']['target'] == 'rknn' "
               "and c['candidate']['precision'] == 'int8')['artifact']; "
               "print(json.dumps({k: a[k] for k in ('notes', 'fallbacks', 'toolchain')}, "
               "indent=1))\"")


def _digits(work: Path) -> None:
    files.digits(work, "digits.onnx", "digits_calib.npy", "digits_eval.npz")
    files.write(work, {"rock5b-ncnn.yaml": ROCK5B_NCNN, "rpi4-executorch.yaml": RPI4_EXECUTORCH})


def _rows(prefix: str) -> Show:
    """The plan's header and its rows for the ``prefix`` runtimes."""
    return keep(lambda i, line: i < 2 or line.startswith(prefix))


NCNN = Session(name="ncnn", docs=("docs/ncnn.md",), workdir=DOCS_DIR / "ncnn", files=_digits,
               steps=[
    Step(command="edge optimize digits.onnx --profile rock5b-ncnn.yaml --calib "
                 "digits_calib.npy --eval digits_eval.npz --exhaustive -o digits-rock5b-ncnn",
         block=0),
    Step(command="edge optimize digits.onnx --profile rpi4 --dry-run", block=1,
         show=_rows("ncnn")),
])

EXECUTORCH = Session(name="executorch", docs=("docs/executorch.md",),
                     workdir=DOCS_DIR / "executorch", files=_digits, steps=[
    Step(command="edge optimize sample:digits --profile rpi4 --dry-run", block=0,
         show=_rows("executorch")),
    Step(command="edge optimize sample:digits --profile rpi4-executorch.yaml "
                 "-o digits-rpi4.bundle", block=0, gap=True),
])

RKNN = Session(name="rknn", docs=("docs/accelerators/rknn.md",),
               workdir=DOCS_DIR / "rknn", files=_digits, steps=[
    Step(command="edge optimize sample:digits --profile rock5b -o digits.bundle", block=0),
    Step(command=RKNN_RECORD, block=1),
    Step(command="edge optimize sample:digits --profile rock5b --dry-run", block=2,
         show=_rows("rknn")),
])

EDGETPU = Session(name="edgetpu", docs=("docs/accelerators/edgetpu.md",),
                  workdir=DOCS_DIR / "edgetpu", files=_digits, steps=[
    Step(command="edge optimize sample:digits --profile coral-dev-board --dry-run", block=0),
])
