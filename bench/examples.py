#!/usr/bin/env python
"""Run the terminal sessions shown in docs/tutorial.md and docs/data.md; record their output.

    python bench/examples.py [--out bench/results/examples.json] [--update-docs | --docs-only]

Each session runs its commands with bash in a fresh scratch directory (the tutorial's is
/tmp/edge-docs-run, as the page says) with its own ``EDGE_LOCAL_DEVICE`` (``device/``) and the
tutorial's fresh ``EDGE_CACHE_DIR`` (``/tmp/edge-docs-run/cache``: the data page's session reuses
its conversions),
this checkout's ``.venv/bin`` first on PATH, stdout and stderr merged as a terminal shows them.
Every command's output, exit status and wall time go into the JSON with the git sha and the
machine ("provenance"). ``--update-docs`` then rewrites the pages' console blocks from it (each
trimmed as the page trims it, ``...`` marking cut lines). tests/test_doc_figures.py checks that
every command and output line shown in those blocks is in the JSON. Takes a few minutes (the
first onnx2tf conversion dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import provenance

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "edge" / "samples"
CUT = "..."
Show = Callable[[list[str]], list[str]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One command of a session; ``block`` is the page's console block that shows it."""

    command: str | Callable[[Path], str]
    block: int | None = None  # None: run (setup) but not shown
    show: Show | None = None  # which output lines the page shows (default: all)
    background: str | None = None  # run in the background until a line containing this


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    doc: str
    workdir: Path
    files: Callable[[Path], None]
    steps: list[Step] = field(default_factory=list)


# ---------------------------------------------------------------- what the pages show


def _only(*prefixes: str) -> Show:
    """The lines starting with one of ``prefixes``, ``...`` where lines were cut."""
    def show(lines: list[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            if line.startswith(prefixes):
                out.append(line)
            elif not out or out[-1] != CUT:
                out.append(CUT)
        return out
    return show


def _head_tail(head: int, tail: int) -> Show:
    def show(lines: list[str]) -> list[str]:
        return lines if len(lines) <= head + tail else [*lines[:head], CUT, *lines[-tail:]]
    return show


def _from(marker: str, upto: str | None = None) -> Show:
    """``...`` then the lines from the first containing ``marker`` (to one containing ``upto``)."""
    def show(lines: list[str]) -> list[str]:
        start = next(i for i, line in enumerate(lines) if marker in line)
        end = len(lines)
        if upto is not None:
            end = next(i for i, line in enumerate(lines) if upto in line and i >= start) + 1
        return [CUT, *lines[start:end]] + ([CUT] if end < len(lines) else [])
    return show


def _upto(marker: str) -> Show:
    def show(lines: list[str]) -> list[str]:
        end = next(i for i, line in enumerate(lines) if marker in line) + 1
        return lines[:end] + ([CUT] if end < len(lines) else [])
    return show


def _nothing(lines: list[str]) -> list[str]:
    return [CUT] if lines else []


def _previous_release(work: Path) -> str:
    """``edge rollback --to`` with the first 4 digits of the release rolled back to."""
    current = (work / "device" / ".edge" / "current").resolve().name
    return f"edge rollback --to {current[:4]}"


# ---------------------------------------------------------------- the sessions' files


def _tutorial_files(work: Path) -> None:
    shutil.copy(SAMPLES / "digits.onnx", work / "model.onnx")
    shutil.copy(SAMPLES / "digits_calib.npy", work / "calib.npy")
    shutil.copy(SAMPLES / "digits_eval.npz", work / "eval.npz")


def _data_files(work: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shutil.copy(SAMPLES / "digits.onnx", work / "digits.onnx")
    shutil.copy(SAMPLES / "digits_eval.npz", work / "digits_eval.npz")
    calib = np.load(SAMPLES / "digits_calib.npy")
    held = np.load(SAMPLES / "digits_eval.npz")
    np.save(work / "calib_3d.npy", calib.reshape(len(calib), 8, 8))
    np.save(work / "three.npy", calib[:3])
    np.savez(work / "calib_labels.npz", input=held["input"][:100], labels=held["labels"][:100])
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((1024, 10)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, work / "big.onnx")
    np.save(work / "big_calib.npy", rng.standard_normal((20, 1024)).astype(np.float32))


# A second release, deterministically another artifact: only onnxruntime-fp32 is exact.
_DEPLOY_EXACT = ("edge deploy sample:digits --profile rpi4 --max-drop 0 --min-cosine 1 "
                 "-o exact.bundle --runs 20")
_RUN_SPLIT = ("EDGE_CLOUD_TOKEN=s3cret edge run-split digits-split --url http://127.0.0.1:8765 "
              "--input calib.npy --runs 20")
_OPTIMIZE = "edge optimize model.onnx --profile rpi4 --calib calib.npy --eval eval.npz"

TUTORIAL = Session(doc="docs/tutorial.md", workdir=Path("/tmp/edge-docs-run"),
                   files=_tutorial_files, steps=[
    Step(command="edge deploy sample:digits --profile rpi4", block=0),
    Step(command="edge inspect model.onnx --profile rpi4", block=1),
    Step(command="edge optimize model.onnx --profile rpi4 --dry-run", block=2),
    Step(command=f"{_OPTIMIZE} -o model-rpi4.bundle"),
    Step(command=f"{_OPTIMIZE} --max-drop 0.1 --min-cosine 0.9999 -o strict.bundle", block=3),
    Step(command="edge report model-rpi4.bundle -o report.html", block=4),
    Step(command="edge deploy model-rpi4.bundle --host pi@raspberrypi.local --identity "
                 "~/.ssh/id_ed25519 --dry-run", block=5),
    Step(command="edge bench model-rpi4.bundle --runs 50"),
    Step(command="edge bench model-rpi4.bundle --runs 50 --baseline last --max-regression 25",
         block=6),
    Step(command=_DEPLOY_EXACT, block=7, show=_only("release", "sent", "health", "previous")),
    Step(command="edge releases", block=7),
    Step(command="edge rollback", block=7),
    Step(command=_previous_release, block=7),
    Step(command="edge partition model.onnx --profile rpi4 --cloud cloud-t4 --bandwidth 10 "
                 "--rtt 20 -o digits-split", block=8),
    Step(command="edge report digits-split -o split.html", block=8),
    Step(command="EDGE_CLOUD_TOKEN=s3cret edge serve-cloud digits-split --port 8765 &", block=9,
         background="serving"),
    Step(command=_RUN_SPLIT, block=10, show=_head_tail(3, 2)),
])

DATA = Session(doc="docs/data.md", workdir=Path("/tmp/edge-docs-data"), files=_data_files,
               steps=[
    Step(command="edge optimize digits.onnx --profile rpi4 --calib calib_3d.npy", block=0),
    Step(command="edge optimize big.onnx --profile x86-64", block=1),
    Step(command="edge optimize big.onnx --profile x86-64 --calib big_calib.npy -o big.bundle",
         block=1, show=_nothing),
    Step(command="python -c \"import json; print(json.load(open('big.bundle/manifest.json'))"
                 "['source']['inputs'])\"", block=1),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib three.npy", block=2),
    Step(command="edge optimize digits.onnx --profile rpi4 --calib calib_labels.npz -o b2.bundle",
         block=3, show=_upto("onnxruntime-int8 ")),
    Step(command="edge optimize digits.onnx --profile rpi4 -o b3.bundle", block=4),
    Step(command="edge optimize digits.onnx --profile rpi4 --eval digits_eval.npz -o b4.bundle",
         block=5, show=_upto("onnxruntime-fp32 ")),
    Step(command="edge optimize sample:digits --profile rpi4 --max-drop 0 --min-cosine 1 "
                 "-o b5.bundle", block=6, show=_from("candidate ", "chosen:")),
])


# ---------------------------------------------------------------- running


def run_session(session: Session, cache: Path) -> dict[str, Any]:
    """Every step of ``session`` in a fresh work dir; the recorded steps."""
    work = session.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    session.files(work)
    env = dict(os.environ, EDGE_CACHE_DIR=str(cache), EDGE_LOCAL_DEVICE=str(work / "device"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1")
    env.pop("EDGE_CLOUD_TOKEN", None)
    background: list[subprocess.Popen[str]] = []
    steps = []
    try:
        for step in session.steps:
            command = step.command(work) if callable(step.command) else step.command
            print(f"[{session.doc}] $ {command}", file=sys.stderr, flush=True)
            runner = _start if step.background else _run
            record = runner(command, step, work, env, background)
            steps.append({"command": command, "block": step.block, **record})
    finally:
        for proc in background:
            proc.kill()
            proc.wait()
    return {"doc": session.doc, "workdir": str(work), "steps": steps}


def _run(command: str, step: Step, work: Path, env: dict[str, str],
         background: list[subprocess.Popen[str]]) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800,
                          check=False)
    return {"status": done.returncode, "seconds": round(time.perf_counter() - started, 1),
            "output": done.stdout.rstrip("\n")}


def _start(command: str, step: Step, work: Path, env: dict[str, str],
           background: list[subprocess.Popen[str]]) -> dict[str, Any]:
    """A ``cmd &`` step: started, its output read until the ``background`` marker line."""
    started = time.perf_counter()
    proc = subprocess.Popen(["bash", "-c", command.removesuffix("&").strip()], cwd=work,
                            env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    background.append(proc)
    assert proc.stdout is not None and step.background is not None
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if step.background in line:
            break
    return {"status": None, "seconds": round(time.perf_counter() - started, 1),
            "output": "\n".join(lines)}


# ---------------------------------------------------------------- the pages


CONSOLE = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)


def console_blocks(text: str) -> list[re.Match[str]]:
    """The ```console blocks of a page."""
    return list(CONSOLE.finditer(text))


def update_docs(doc: dict[str, Any], session: Session) -> None:
    """Rewrite ``session.doc``'s console blocks from the recorded steps."""
    path = ROOT / session.doc
    text = path.read_text()
    blocks = console_blocks(text)
    shown: dict[int, list[str]] = {}
    for step, recorded in zip(session.steps, doc["steps"], strict=True):
        if step.block is None:
            continue
        lines = recorded["output"].splitlines() if recorded["output"] else []
        body = (step.show or (lambda x: x))([line.rstrip() for line in lines])
        shown.setdefault(step.block, []).extend([f"$ {recorded['command']}", *body])
    for index in sorted(shown, reverse=True):
        block = blocks[index]
        text = text[:block.start(1)] + "\n".join(shown[index]) + "\n" + text[block.end(1):]
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "examples.json")
    parser.add_argument("--update-docs", action="store_true", help="rewrite the console blocks")
    parser.add_argument("--docs-only", action="store_true",
                        help="run nothing: rewrite the console blocks from the --out JSON")
    args = parser.parse_args(argv)
    if args.docs_only:
        sessions = json.loads(args.out.read_text())["sessions"]
    else:
        cache = TUTORIAL.workdir / "cache"  # the tutorial's `export EDGE_CACHE_DIR=$PWD/cache`
        sessions = {name: run_session(s, cache) for name, s in (("tutorial", TUTORIAL),
                                                                 ("data", DATA))}
        doc = {"sessions": sessions, "provenance": provenance.record("bench/examples.py", argv)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"json: {args.out}")
    if args.update_docs or args.docs_only:
        update_docs(sessions["tutorial"], TUTORIAL)
        update_docs(sessions["data"], DATA)
        print(f"rewrote the console blocks of {TUTORIAL.doc} and {DATA.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
