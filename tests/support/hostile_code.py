"""Hostile corpus cases of issue 27 (hostile_code); see tests/support/hostile.py.

Model files that run code when a framework loads them: pickles whose unpickling calls exec or
os.system, a whole pickled module whose class writes a file, Keras H5 files with a Lambda
layer (one behind an HDF5 user block that starts like a zip), SavedModels whose signature
writes, reads or lists files, whose checkpoint restore op writes one (SaveV2), or whose main op
runs a dataset graph held in a string (DatasetFromGraph); TorchScript calling torch.from_file
or torch.save, in forward or in the ``__setstate__`` that loading runs, spelled plainly or
through getattr and parentheses (issue 39: judged on the compiled graph), and TorchScript whose
loading never ends or asks for 64 GB (a bounded child's limits). Each writes ``code-ran`` (or
``code-ran.*``) in the working directory when it runs (the corpus requires that directory to
stay empty); none may run without
``--trust-model-code``. The TensorFlow files are built once (a child process,
tests/support/model_code_build.py) into a cache keyed by VERSION and copied into each case.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from edge.core.bounded import DEADLINE_ENV
from tests.support.hostile import Case

#: Bump when the built files change.
VERSION = "4"
MARKER = "code-ran"
CACHE = Path.home() / ".cache" / "edge-test" / f"hostile-code-{VERSION}"

_EXEC = f"open({MARKER!r}, 'w').write('x')"
#: ``exec(...)`` and ``os.system("touch code-ran")`` as raw pickles (protocol 2), and an
#: ``os.system`` call by the INST opcode of protocol 0.
PICKLE_EXEC = b"\x80\x02cbuiltins\nexec\nq\x00X" + len(_EXEC).to_bytes(4, "little") + \
    _EXEC.encode() + b"q\x01\x85q\x02Rq\x03."
PICKLE_SYSTEM = b"\x80\x02cos\nsystem\nq\x00X\x0e\x00\x00\x00touch code-ranq\x01\x85q\x02Rq\x03."
PICKLE_INST = b"(S'touch code-ran'\nios\nsystem\n."


def built(name: str) -> Path:
    """A file or folder of tests/support/model_code_build.py, built once into CACHE."""
    if not CACHE.is_dir():
        _build()
    return CACHE / name


def _build() -> None:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE.parent))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-m", "tests.support.model_code_build", str(work / "out")],
                   cwd=work, env=env, check=True, capture_output=True, timeout=600)
    try:
        os.rename(work / "out", CACHE)
    except OSError:  # another process built it first
        pass
    shutil.rmtree(work, ignore_errors=True)


def _copy(name: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        source = built(name)
        if source.is_dir():
            shutil.copytree(source, path)
        else:
            shutil.copy(source, path)
    return make


def _torch(builder: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        getattr(importlib.import_module("tests.support.model_code_torch"), builder)(path)
    return make


def _respelled(spelling: str, builder: str = "scripted_respelled") -> Callable[[Path], None]:
    def make(path: Path) -> None:
        getattr(importlib.import_module("tests.support.model_code_torch"), builder)(
            spelling)(path)
    return make


#: Spellings of torch.save in hand-edited TorchScript code (model_code_torch.RESPELLINGS).
SPELLINGS = ("getattr-save", "getattr-ops", "paren-save", "paren-ops", "paren-getattr",
             "getattr-paren-ops", "ops-getattr-save")
#: The deadline the corpus gives a model's first run (its cases have 30 s each).
DEADLINE_S = "4"


@contextlib.contextmanager
def environment(name: str, value: str) -> Iterator[Mapping[str, str]]:
    """``name`` set to ``value`` while a case runs (restored afterwards)."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield {}
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def short_deadline(folder: Path) -> contextlib.AbstractContextManager[Mapping[str, str]]:
    """A model's first run gets DEADLINE_S seconds (edge.core.bounded) while the case runs."""
    return environment(DEADLINE_ENV, DEADLINE_S)


def deadline_for(name: str) -> contextlib.AbstractContextManager[Mapping[str, str]]:
    """The short deadline for a file in SLOW_TO_LOAD; edge's own for the rest, so that on a
    slow or busy machine (a test at nice 19 beside an exclusive one) the limit a case is about,
    such as memory, is the one met (CI: a 64 GB forward met the 4 s deadline first)."""
    return environment(DEADLINE_ENV, DEADLINE_S) if name in SLOW_TO_LOAD else \
        contextlib.nullcontext({})


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


#: SavedModels whose signature waits for a second worker or another task (issue 39: the load
#: hung).
WAITING = ("collective-reduce", "collective-gather", "collective-bcast", "recv")

#: name (its suffix is the file's) -> writes the file or folder at the path given.
FILES: dict[str, Callable[[Path], None]] = {
    "pickle-exec.pt": _bytes(PICKLE_EXEC),
    "pickle-exec.pth": _bytes(PICKLE_EXEC),
    "pickle-system.pt": _bytes(PICKLE_SYSTEM),
    "pickle-inst.pt": _bytes(PICKLE_INST),
    "torch-zip-exec.pt": _torch("zip_payload"),
    "torch-legacy-exec.pt": _torch("legacy_payload"),
    "torch-module.pt": _torch("module"),
    "script-from-file.pt": _torch("scripted_from_file"),
    "script-save.pt": _torch("scripted_save"),
    **{f"script-{s}.pt": _respelled(s) for s in SPELLINGS},
    **{f"script-setstate-{s}.pt": _respelled(s, "scripted_setstate_respelled")
       for s in SPELLINGS if s != "getattr-save"},
    **{f"script-from-file-{s}.pt": _respelled(s, "scripted_from_file_respelled")
       for s in SPELLINGS},
    "script-setstate-save.pt": _torch("scripted_setstate_save"),
    "script-setstate-loop.pt": _torch("scripted_setstate_loop"),
    "script-setstate-memory.pt": _torch("scripted_setstate_memory"),
    "script-forward-loop.pt": _torch("scripted_forward_loop"),
    "script-forward-memory.pt": _torch("scripted_forward_memory"),
    "lambda.h5": _copy("lambda.h5"),
    "lambda.hdf5": _copy("lambda.h5"),
    "nested-lambda.h5": _copy("nested-lambda.h5"),
    "polyglot.h5": _copy("polyglot.h5"),
    "writefile.savedmodel": _copy("writefile.savedmodel"),
    "readfile.savedmodel": _copy("readfile.savedmodel"),
    "matchingfiles.savedmodel": _copy("matchingfiles.savedmodel"),
    "nested-writefile.savedmodel": _copy("nested-writefile.savedmodel"),
    "save-op.savedmodel": _copy("save-op.savedmodel"),
    "saver-savev2.savedmodel": _copy("saver-savev2.savedmodel"),
    "dataset-from-graph.savedmodel": _copy("dataset-from-graph.savedmodel"),
    **{f"{name}.savedmodel": _copy(f"{name}.savedmodel") for name in WAITING},
    "while-forever.savedmodel": _copy("while-forever.savedmodel"),
}

#: Files whose loading or first run never ends: their cases run with a short deadline.
SLOW_TO_LOAD = ("script-setstate-loop.pt", "script-forward-loop.pt", "while-forever.savedmodel")
#: Files refused for a limit of their first run (edge.core.bounded), not for their code.
LIMITED = {"script-setstate-loop.pt": "the deadline of a model's first run",
           "script-setstate-memory.pt": "the memory limit of a model's first run",
           "script-forward-loop.pt": "the deadline of a model's first run",
           "script-forward-memory.pt": "the memory limit of a model's first run",
           "while-forever.savedmodel": "the deadline of a model's first run"}
#: Of those, the files whose code passes every check: only running forward meets the limit.
RUN_LIMITED = ("script-forward-loop.pt", "script-forward-memory.pt", "while-forever.savedmodel")

#: Each command that reads a model; ``{m}`` is the model, then --shape for a PyTorch one.
COMMANDS = {
    "inspect": ("inspect", "{m}"),
    "optimize": ("optimize", "{m}", "--profile", "x86-64", "-o", "{d}/out"),
    "deploy": ("deploy", "{m}", "--profile", "x86-64", "-o", "{d}/out"),
    "partition": ("partition", "{m}", "--profile", "rpi4", "--cloud", "cloud-c7i",
                  "-o", "{d}/out"),
}


def argv(command: str, model: str) -> tuple[str, ...]:
    """The command line of ``command`` on ``model`` (a path), with --shape for PyTorch."""
    shape = ("--shape", "x=1,4") if model.endswith((".pt", ".pth")) else ()
    return (*(a.replace("{m}", model) for a in COMMANDS[command]), *shape)


def cases() -> Iterator[Case]:
    for name, make in FILES.items():
        target = "m.savedmodel" if name.endswith(".savedmodel") else \
            f"m.{name.rsplit('.', 1)[-1]}"
        for command in COMMANDS:
            yield Case(name=f"code {name} {command}", argv=argv(command, f"{{d}}/{target}"),
                       make=lambda d, make=make, target=target: make(d / target),
                       **({"around": short_deadline} if name in SLOW_TO_LOAD else {}))
