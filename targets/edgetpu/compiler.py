"""The Edge TPU Compiler (``edgetpu_compiler``): finding it, running it bounded, reading its log.

It is a closed-source x86-64 Linux binary from Coral's apt repository only (not on PyPI nor
Debian); edge uses it when it is on PATH and otherwise says how to get it (``HOW_TO_GET``).
``edgetpu_compiler -s -o OUT M.tflite`` writes ``OUT/M_edgetpu.tflite`` and ``M_edgetpu.log``
and prints a summary with, under ``-s``, one row per operator kind and status: "Mapped to Edge
TPU", or why not ("Operation not supported", "More than one subgraph is not supported", ...).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from targets.base import ConversionError

__all__ = ["COMPILER", "HOW_TO_GET", "MAPPED", "CompileLog", "compile_model", "find", "parse"]

COMPILER = "edgetpu_compiler"
MAPPED = "Mapped to Edge TPU"
#: How to install the compiler (coral.ai/docs/edgetpu/compiler, "System requirements").
HOW_TO_GET = (
    f"{COMPILER} is not on PATH (Coral's apt repository only, x86-64 Debian/Ubuntu; not on PyPI "
    "nor Debian): curl https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo apt-key add "
    "-; echo \"deb https://packages.cloud.google.com/apt coral-edgetpu-stable main\" | sudo tee "
    "/etc/apt/sources.list.d/coral-edgetpu.list; sudo apt-get update; sudo apt-get install "
    "edgetpu-compiler")
_ROW = re.compile(r"^([A-Z][A-Z0-9_]*)\s+(\d+)\s+(\S.*?)\s*$")
_VERSION = re.compile(r"Edge TPU Compiler version (\S+)")
_COUNT = re.compile(r"Number of operations that will run on (Edge TPU|CPU): (\d+)")
_TOTAL = re.compile(r"Total number of operations: (\d+)")
_SUBGRAPHS = re.compile(r"Number of Edge TPU subgraphs: (\d+)")


@dataclass(frozen=True, kw_only=True, slots=True)
class CompileLog:
    """What the compiler's summary says about one compiled model."""

    version: str
    rows: tuple[tuple[str, int, str], ...]  # (operator, count, status) as printed
    total: int | None = None
    subgraphs: int | None = None

    @property
    def on_tpu(self) -> int:
        """Operators mapped to the Edge TPU."""
        return sum(count for _, count, status in self.rows if status == MAPPED)

    @property
    def on_cpu(self) -> int:
        """Operators left to the CPU."""
        return sum(count for _, count, status in self.rows if status != MAPPED)

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """The distinct operators with any instance on the CPU, in the log's order."""
        return tuple(dict.fromkeys(op for op, _, status in self.rows if status != MAPPED))

    def reasons(self) -> tuple[str, ...]:
        """'OP x N: status' for every row not mapped to the Edge TPU."""
        return tuple(f"{op} x{count}: {status}" for op, count, status in self.rows
                     if status != MAPPED)


def find() -> str | None:
    """The compiler's path when it is on PATH, else None."""
    return shutil.which(COMPILER)


def parse(text: str) -> CompileLog:
    """Read the compiler's printed summary (``-s``) or its ``*_edgetpu.log`` file."""
    version = _VERSION.search(text)
    return CompileLog(version=version.group(1) if version else "unknown", rows=_rows(text),
                      total=_int(_TOTAL.search(text)), subgraphs=_int(_SUBGRAPHS.search(text)))


def _rows(text: str) -> tuple[tuple[str, int, str], ...]:
    """The operator table's rows: the lines after its ``Operator  Count  Status`` header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.split()[:3] == ["Operator", "Count", "Status"]), None)
    if start is None:
        return ()
    matches = (_ROW.match(line.strip()) for line in lines[start + 1:])
    return tuple((m.group(1), int(m.group(2)), m.group(3)) for m in matches if m)


def _int(match: re.Match[str] | None) -> int | None:
    return int(match.group(1)) if match else None


def compile_model(source: Path, out_dir: Path, *, timeout_s: float,
                  options: dict[str, str]) -> tuple[Path, CompileLog]:
    """Compile ``source`` into ``out_dir``: (the ``*_edgetpu.tflite``, its log); one
    ConversionError line when the compiler is absent, fails, or runs past ``timeout_s``."""
    compiler = find()
    if compiler is None:
        raise ConversionError(HOW_TO_GET)
    command = [compiler, "-s", "-o", str(out_dir), *_flags(options, timeout_s), str(source)]
    text = _bounded(command, timeout_s)
    compiled = out_dir / f"{source.stem}_edgetpu.tflite"
    if not compiled.is_file():
        raise ConversionError(f"{COMPILER} wrote no {compiled.name}: {_why(text)}")
    return compiled, parse(text)


def _flags(options: dict[str, str], timeout_s: float) -> list[str]:
    """The profile's options (``min_runtime_version`` -> ``-m``) and the compiler's own
    search timeout (``-t``, seconds: under edge's limit, so it stops first)."""
    flags = ["-t", str(max(1, int(timeout_s) - 10))]
    if options.get("min_runtime_version"):
        flags += ["-m", options["min_runtime_version"]]
    return flags


def _bounded(command: list[str], timeout_s: float) -> str:
    """Run the compiler in its own process group; its stdout and stderr together. Past the
    limit the group is killed; a non-zero exit is one line naming why."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
    except OSError as exc:
        raise ConversionError(f"cannot start {COMPILER}: {exc.strerror}") from None
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(child)
        raise ConversionError(f"{COMPILER} still running after its {timeout_s:.0f} s limit; "
                              "stopped") from None
    except BaseException:
        _kill(child)
        raise
    if child.returncode != 0:
        raise ConversionError(f"{COMPILER} failed (exit {child.returncode}): {_why(out)}")
    return out


def _kill(child: subprocess.Popen[str]) -> None:
    """Kill the compiler and everything it started; reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _why(text: str) -> str:
    """The compiler's line that says why: an error/invalid line, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"error|invalid|not quantized|unsupported",
                                                    line, re.IGNORECASE)]
    return ((errors or lines or ["(no output)"])[-1])[:300]
