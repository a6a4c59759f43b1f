"""The sessions of docs/tutorial.md and docs/data.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from . import files
from .steps import Ctx, Session, Step, from_, head_tail, nothing, only, upto

TUTORIAL_DIR = Path("/tmp/edge-docs-run")
#: The tutorial's `export EDGE_CACHE_DIR=$PWD/cache`, shared by every session (made afresh by
#: the tutorial, which runs first: later sessions reuse its conversions).
CACHE = TUTORIAL_DIR / "cache"


def previous_release(ctx: Ctx) -> str:
    """``edge rollback --to`` with the first 4 digits of the newest release kept that is not
    the current one (after a rollback: the release rolled back from)."""
    edge = ctx.work / "device" / ".edge"
    current = (edge / "current").resolve().name
    kept = sorted((p for p in (edge / "releases").iterdir() if p.name != current),
                  key=lambda p: p.stat().st_mtime)
    return f"edge rollback --to {(kept[-1].name if kept else current)[:4]}"


def _tutorial_files(work: Path) -> None:
    files.digits(work)


def _data_files(work: Path) -> None:
    shutil.copy(files.SAMPLES / "digits.onnx", work / "digits.onnx")
    shutil.copy(files.SAMPLES / "digits_eval.npz", work / "digits_eval.npz")
    calib = np.load(files.SAMPLES / "digits_calib.npy")
    held = np.load(files.SAMPLES / "digits_eval.npz")
    np.save(work / "calib_3d.npy", calib.reshape(len(calib), 8, 8))
    np.save(work / "three.npy", calib[:3])
    np.savez(work / "calib_labels.npz", input=held["input"][:100], labels=held["labels"][:100])
    files.matmul(work / "big.onnx", 1024, 10, seed=0)
    rng = np.random.default_rng(0)
    rng.standard_normal((1024, 10))  # the weights above: the calibration draws after them
    np.save(work / "big_calib.npy", rng.standard_normal((20, 1024)).astype(np.float32))


# A second release: another faithful candidate of the first deploy's bundle, as asked.
_DEPLOY_OTHER = "edge deploy digits-rpi4.bundle --candidate original --runs 20"
_RUN_SPLIT = ("EDGE_CLOUD_TOKEN=s3cret edge run-split digits-split --url http://127.0.0.1:8765 "
              "--input calib.npy --runs 20")
_OPTIMIZE = "edge optimize model.onnx --profile rpi4 --calib calib.npy --eval eval.npz"

TUTORIAL = Session(name="tutorial", docs=("docs/tutorial.md",), workdir=TUTORIAL_DIR,
                   files=_tutorial_files, steps=[
    Step(command="edge deploy sample:digits --profile rpi4", block=0),
    Step(command="edge inspect model.onnx --profile rpi4", block=1),
    Step(command="edge optimize model.onnx --profile rpi4 --dry-run", block=2),
    Step(command=f"{_OPTIMIZE} -o model-rpi4.bundle"),
    Step(command=f"{_OPTIMIZE} --max-drop 0.1 --min-cosine 0.9999 --exhaustive -o strict.bundle",
         block=3),
    Step(command="edge report model-rpi4.bundle -o report.html", block=4),
    Step(command="edge deploy model-rpi4.bundle --host pi@raspberrypi.local --identity "
                 "~/.ssh/id_ed25519 --dry-run", block=5),
    Step(command="edge bench model-rpi4.bundle --runs 50"),
    Step(command="edge bench model-rpi4.bundle --runs 50 --baseline last", block=6),
    Step(command=_DEPLOY_OTHER, block=7, show=only("release", "sent", "health", "previous",
                                                    "reason")),
    Step(command="edge releases", block=7),
    Step(command="edge rollback", block=7),
    Step(command=previous_release, block=7),
    Step(command="edge partition model.onnx --profile rpi4 --cloud cloud-t4 --bandwidth 10 "
                 "--rtt 20 -o digits-split", block=8),
    Step(command="edge report digits-split -o split.html", block=8),
    Step(command="EDGE_CLOUD_TOKEN=s3cret edge serve-cloud digits-split --port 8765 &", block=9,
         background="serving"),
    Step(command=_RUN_SPLIT, block=10, show=head_tail(3, 2)),
])

DATA = Session(name="data", docs=("docs/data.md",), workdir=Path("/tmp/edge-docs-data"),
               files=_data_files, steps=[
    Step(command="edge optimize digits.onnx --profile rpi4 --calib calib_3d.npy", block=0),
    Step(command="edge optimize big.onnx --profile x86-64", block=1),
    Step(command="edge optimize big.onnx --profile x86-64 --calib big_calib.npy -o big.bundle",
         block=1, show=nothing),
    Step(command="python -c \"import json; print(json.load(open('big.bundle/manifest.json'))"
                 "['source']['inputs'])\"", block=1),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib three.npy", block=2),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib calib_labels.npz -o b2.bundle",
         block=3, show=upto("onnxruntime-int8 ")),
    Step(command="edge optimize digits.onnx --profile rpi4 -o b3.bundle", block=4),
    Step(command="edge optimize digits.onnx --profile rpi4 --eval digits_eval.npz -o b4.bundle",
         block=5, show=upto("onnxruntime-fp32 ")),
    Step(command="edge optimize sample:digits --profile rpi4 --max-drop 0 --min-cosine 1 "
                 "-o b5.bundle", block=6, show=from_("candidate ", "chosen:")),
])
