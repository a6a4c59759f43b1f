"""Hostile corpus cases of issue 27 (hostile_home); see tests/support/hostile.py.

Nothing is written outside edge's folders: each case runs its command in a child process
(``isolated``) whose ``$HOME`` is the case's empty ``home/`` folder, so a framework that writes
under the user's home (ONNX Runtime's telemetry device id and event database, OpenVINO's client
id, Keras's ``keras.json``, matplotlib's font cache) changes the case's folder and fails it.
Each command gets far enough to create an ONNX Runtime session before it refuses its input, or
describes a model it cannot run with a warning. (The Keras intake's child, tens of seconds, is
tests/test_offline.py's.)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from tests.support.hostile import (
    Case,
    _bad_data,
    _custom_domain_model,
    _shape_mismatch_model,
    tiny_model,
)

#: Variables that would send a framework's files elsewhere than ``$HOME`` (or turn its
#: telemetry off) in the test process: the child gets none of them, only ``$HOME``.
CLEARED = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "KERAS_HOME", "MPLCONFIGDIR",
           "ORT_DISABLE_TELEMETRY", "CI")

OPTIMIZE = ("optimize", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out")
PARTITION = ("partition", "{d}/m.onnx", "--profile", "rpi4", "--cloud", "cloud-c7i",
             "-o", "{d}/out")
DEPLOY = ("deploy", "{d}/m.onnx", "--profile", "x86-64", "-o", "{d}/out")

#: Models ONNX Runtime refuses at load: ``inspect`` describes them (exit 0, a warning).
UNRUNNABLE: Mapping[str, Callable[[Path], None]] = {
    "custom-domain": _custom_domain_model,
    "shape-mismatch": _shape_mismatch_model,
    "opset-99": lambda p: _tiny(p, opset=99),
}


def _tiny(path: Path, **kw: int) -> None:
    tiny_model(path, **kw)  # type: ignore[arg-type]


@contextlib.contextmanager
def _home(folder: Path) -> Iterator[Mapping[str, str]]:
    """``$HOME`` is ``folder/home`` (made empty by the case) for the command's child."""
    saved = {name: os.environ.get(name) for name in ("HOME", *CLEARED)}
    for name in CLEARED:
        os.environ.pop(name, None)
    os.environ["HOME"] = str(folder / "home")
    try:
        yield {}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _case(name: str, argv: tuple[str, ...], make: Callable[[Path], object],
          status: tuple[int, ...] = (2,)) -> Case:
    def made(folder: Path) -> None:
        (folder / "home").mkdir()
        make(folder)
    return Case(name=f"home {name}", argv=argv, make=made, status=status, around=_home,
                isolated=True)


def cases() -> Iterator[Case]:
    yield from _unrunnable_cases()
    yield from _late_data_cases()
    yield from _late_flag_cases()


def _unrunnable_cases() -> Iterator[Case]:
    commands = {"inspect": ("inspect", "{d}/m.onnx"), "optimize": OPTIMIZE,
                "partition": PARTITION, "deploy": DEPLOY}
    for kind, make in UNRUNNABLE.items():
        for command, argv in commands.items():
            status = (0,) if command == "inspect" else (2,)
            yield _case(f"{kind} model {command}", argv, _model_maker(make), status)


def _model_maker(make: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda folder: make(folder / "m.onnx")


#: Data refused after the model's session was made.
LATE_DATA = ("nan.npy", "inf.npy", "all-nan.npy", "wrong-shape.npy", "labels-nan.npz",
             "labels-count.npz")


def _late_data_cases() -> Iterator[Case]:
    makers = _bad_data()
    for kind in LATE_DATA:
        name = f"d.{kind.rsplit('.', 1)[-1]}"
        for flag in ("--calib", "--eval"):
            yield _case(f"{kind} data {flag}", (*OPTIMIZE, flag, f"{{d}}/{name}"),
                        _data_maker(makers[kind], name))


def _data_maker(make: Callable[[Path], None], name: str) -> Callable[[Path], None]:
    def made(folder: Path) -> None:
        tiny_model(folder / "m.onnx")
        make(folder / name)
    return made


#: Flag values refused after the model's session was made.
LATE_FLAGS = (("--metric", "y=nosuch"), ("--metric", "nosuch=values"),
              ("--metric", "no_module_q:f"), ("--shape", "nosuch=1,4"))


def _late_flag_cases() -> Iterator[Case]:
    for flag, value in LATE_FLAGS:
        for command, argv in (("optimize", OPTIMIZE), ("deploy", DEPLOY)):
            yield _case(f"{command} {flag} {value!r}", (*argv, flag, value),
                        lambda d: tiny_model(d / "m.onnx"))
