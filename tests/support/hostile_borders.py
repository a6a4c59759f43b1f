"""Hostile corpus cases of issue 39 (hostile_borders); see tests/support/hostile.py.

``toolchain``: a vendor toolchain's folder (Vela's, ``EDGE_TOOLCHAIN_DIR`` the case's
``toolchains``) holding a record that is not the one edge writes (a JSON list, text, a FIFO,
3 GB, a link out of the cache, a folder, NaN seconds, 100,000 brackets deep, fields of the wrong
types) or an environment folder that is a link: the Corstone-300's only runtime needs it, so
``optimize`` (and ``--dry-run``) must say in one line that it is not built and how to build it.
Before, a list or a FIFO gave exit 4 or a hang, and a record taken as unbuilt made edge build
the environment from the network unasked.

``loop``: ONNX models whose Loop never ends in practice (a condition that stays true, no trip
count; a trip count of 2**62) × optimize/deploy/partition: one line naming the deadline of a
model's run (``EDGE_MODEL_DEADLINE_S``, 4 s here), where edge waited for ever and a Ctrl-C or
SIGTERM could not stop it (ONNX Runtime held the main thread).

``arg``: a TorchScript forward's int and float arguments given with ``--arg`` as NaN, an
infinity, a float past its range or an int past int64: one line that names ``--arg`` (it blamed
the conversion, or the --shape example inputs).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from edge.core.toolchain import RECORD
from targets import declared_toolchains
from tests.support.hostile import Case
from tests.support.hostile_code import environment, short_deadline

#: The toolchain the Corstone-300's only runtime (ethos-u) needs.
TOOLCHAIN = "ethos-u-vela"
#: A record as edge writes one, but for an environment that is not there.
_PLAUSIBLE = {"name": TOOLCHAIN, "requirements": [], "python": "3.11.7", "installed": {},
              "seconds": 7.9, "built_at": "2026-11-29T00:02:22Z"}


def _environment(folder: Path) -> Path:
    toolchain = declared_toolchains()[TOOLCHAIN]
    return folder / "toolchains" / toolchain.dirname


def _record(folder: Path) -> Path:
    env = _environment(folder)
    env.mkdir(parents=True)
    return env / RECORD


def _plausible(**changed: object) -> str:
    key = declared_toolchains()[TOOLCHAIN].key
    return json.dumps(_PLAUSIBLE | {"key": key} | changed)


def _text(text: str) -> Callable[[Path], None]:
    return lambda folder: _record(folder).write_text(text)


def _fifo(folder: Path) -> None:
    os.mkfifo(_record(folder))


def _huge(folder: Path) -> None:
    with open(_record(folder), "wb") as handle:
        handle.truncate(3 << 30)  # sparse: 3 GB to read, nothing on disk


def _linked_record(folder: Path) -> None:
    outside = folder / "elsewhere.json"
    outside.write_text(_plausible())
    _record(folder).symlink_to(outside)


def _folder(folder: Path) -> None:
    _record(folder).mkdir()


def _linked_environment(folder: Path) -> None:
    """The environment folder a link to a complete-looking environment outside the cache."""
    outside = folder / "elsewhere"
    (outside / "bin").mkdir(parents=True)
    (outside / "bin" / "python").symlink_to("/usr/bin/python3")
    (outside / RECORD).write_text(_plausible())
    env = _environment(folder)
    env.parent.mkdir(parents=True)
    env.symlink_to(outside, target_is_directory=True)


RECORDS: dict[str, Callable[[Path], None]] = {
    "list": _text("[]"),
    "text": _text("not json"),
    "fifo": _fifo,
    "3gb": _huge,
    "link": _linked_record,
    "folder": _folder,
    "nan-seconds": _text(_plausible(seconds=float("nan"))),
    "deep": _text("[" * 100_000),
    "wrong-types": _text(_plausible(installed=["numpy"], seconds="7.9")),
    "linked-environment": _linked_environment,
}

#: The one line every record gives.
NOT_BUILT = (f"error: nothing for this profile's runtimes can be made here: ethos-u: its "
             f"toolchain {TOOLCHAIN} is not built: run edge toolchains install {TOOLCHAIN}")


def toolchains_in(folder: Path) -> contextlib.AbstractContextManager[Mapping[str, str]]:
    """``EDGE_TOOLCHAIN_DIR`` is the case's ``toolchains`` while the case runs."""
    return environment("EDGE_TOOLCHAIN_DIR", str(folder / "toolchains"))


def _toolchain_cases() -> Iterator[Case]:
    optimize = ("optimize", "sample:digits", "--profile", "corstone-300", "-o", "{d}/out")
    for name, make in RECORDS.items():
        for command, extra in (("optimize", ()), ("dry-run", ("--dry-run",))):
            yield Case(name=f"toolchain {name} {command}", argv=(*optimize, *extra), make=make,
                       around=toolchains_in, says=NOT_BUILT)


#: --arg values a forward(x, k: int, s: float) cannot take (the other argument is fine).
ARGS = ("s=nan", "s=-nan", "s=inf", "s=-inf", "s=1e400", "k=99999999999999999999",
        "k=9223372036854775808", "k=-9223372036854775809")


def _scripted_args(path: Path) -> None:
    import importlib

    importlib.import_module("tests.support.model_code_torch").scripted_args(path)


def _arg_cases() -> Iterator[Case]:
    commands = {"inspect": ("inspect", "{d}/m.pt"),
                "optimize": ("optimize", "{d}/m.pt", "--profile", "x86-64", "-o", "{d}/out")}
    for value in ARGS:
        other = "s=1.5" if value.startswith("k=") else "k=2"
        for command, argv in commands.items():
            yield Case(name=f"arg {value} {command}",
                       argv=(*argv, "--shape", "x=1,4", "--arg", value, "--arg", other),
                       make=lambda d: _scripted_args(d / "m.pt"), says=f"error: --arg {value}:")


def _looping(trips: int | None) -> Callable[[Path], None]:
    """x[1, 4] -> y: a Loop carrying x, its condition always true, ``trips`` its trip count
    (None: none)."""
    def make(path: Path) -> None:
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["y_in"], ["y_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [1, 4])])
        nodes = [helper.make_node("Constant", [], ["cond"], value=helper.make_tensor(
            "c", TensorProto.BOOL, [], [True]))]
        if trips is not None:
            nodes.append(helper.make_node("Constant", [], ["trips"], value=helper.make_tensor(
                "t", TensorProto.INT64, [], [trips])))
        nodes.append(helper.make_node("Loop", ["trips" if trips else "", "cond", "x"], ["y"],
                                      body=body))
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, path)
    return make


LOOPS = {"forever": _looping(None), "2-pow-62": _looping(1 << 62)}


def _loop_cases() -> Iterator[Case]:
    commands = {"optimize": ("optimize", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out"),
                "deploy": ("deploy", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out"),
                "partition": ("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud",
                              "cloud-c7i", "-o", "{d}/out")}
    for name, make in LOOPS.items():
        for command, argv in commands.items():
            yield Case(name=f"loop {name} {command}", argv=argv,
                       make=lambda d, make=make: make(d / "m.onnx"), around=short_deadline,
                       says="the deadline of a model's first run")


def cases() -> Iterator[Case]:
    yield from _toolchain_cases()
    yield from _arg_cases()
    yield from _loop_cases()
