"""An RKNN artifact run on this host in rknn-toolkit2's simulator, for edge's verification.

The toolkit simulates only a model it built in the same session (``init_runtime()`` with no
target refuses a loaded .rknn), so the runner starts one child in the toolchain's environment
(``child.py --serve``) that rebuilds the artifact from the conversion request written beside it
(the same ONNX model, platform, algorithm and calibration list), starts the simulator, and then
answers runs over pipes: one child per runner, alive for all of its runs. Every wait is bounded;
a child that fails, hangs or dies is killed and the run is one line naming what happened.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import struct
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO

import numpy as np

from edge.core.toolchain import ToolchainError, require_built
from edge.core.values import ModelInfo
from targets.rknn.convert import CHILD, TOOLCHAIN, request_file

__all__ = ["START_TIMEOUT_S", "RUN_TIMEOUT_S", "SimulatorRunner"]

START_TIMEOUT_S = 1200.0  # import the toolkit, rebuild (calibration included), start
RUN_TIMEOUT_S = 300.0  # one simulated run
_HEADER = struct.Struct(">cQ")
#: edge's interpreter settings that must not reach the toolchain's (as edge.core.toolchain)
_DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONEXECUTABLE")


class SimulatorError(RuntimeError):
    """The simulator child could not start or answer (one line)."""


class SimulatorRunner:
    """One artifact in rknn-toolkit2's simulator; outputs in the reference model's order."""

    def __init__(self, artifact: Path, model: ModelInfo, *,
                 start_timeout_s: float = START_TIMEOUT_S,
                 run_timeout_s: float = RUN_TIMEOUT_S) -> None:
        request = request_file(artifact)
        if not request.is_file():
            raise SimulatorError(f"{artifact.name}: its conversion request {request.name} is "
                                 "not beside it; the simulator rebuilds from it")
        self._model = model
        self._run_timeout_s = run_timeout_s
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - the child's stderr, closed below
        scratch = _relocated(request, model)
        try:
            self._child = _start(scratch[0], self._log)
            self._closer = weakref.finalize(self, _stop, self._child, self._log)
            kind, payload = self._reply(start_timeout_s, "start")  # the child has read them
        finally:
            for path in scratch:
                path.unlink(missing_ok=True)
        if kind != b"K":
            self.close()
            why = payload.decode(errors="replace")
            raise SimulatorError(f"rknn simulator did not start: {why}")

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One run of the simulated NPU; 4-D tensors NCHW as in the ONNX model."""
        inputs = [np.asarray(feeds[i.name]) for i in self._model.inputs]
        self._send(b"R", _packed(inputs))
        kind, payload = self._reply(self._run_timeout_s, "run")
        if kind != b"A":
            raise SimulatorError(f"rknn simulator: {payload.decode(errors='replace')}")
        return self._shaped(_arrays(payload))

    def close(self) -> None:
        """Stop the child (also done when the runner is collected, or at exit)."""
        self._closer()

    def _shaped(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """Outputs as the reference gives them: its count, and each its shape when static."""
        expected = self._model.outputs
        if len(outputs) != len(expected):
            raise SimulatorError(f"rknn simulator gave {len(outputs)} outputs, the model has "
                                 f"{len(expected)}")
        return [_as_reference(o, spec.shape).astype(_dtype(spec.dtype), copy=False)
                for o, spec in zip(outputs, expected, strict=True)]

    def _send(self, kind: bytes, payload: bytes) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        try:
            stdin.write(_HEADER.pack(kind, len(payload)) + payload)
            stdin.flush()
        except (OSError, ValueError):  # a dead child, or a closed runner
            raise SimulatorError(self._died()) from None

    def _reply(self, timeout_s: float, what: str) -> tuple[bytes, bytes]:
        """The child's next frame within ``timeout_s``, else it is stopped."""
        deadline = time.monotonic() + timeout_s
        try:
            head = self._read(_HEADER.size, deadline)
            kind, size = _HEADER.unpack(head)
            return kind, self._read(size, deadline)
        except TimeoutError:
            self.close()
            raise SimulatorError(f"rknn simulator {what}: no answer within {timeout_s:.0f} s; "
                                 "stopped") from None

    def _read(self, size: int, deadline: float) -> bytes:
        stdout = self._child.stdout
        assert stdout is not None
        chunks, left = [], size
        while left:
            if not select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError
            chunk = os.read(stdout.fileno(), min(left, 1 << 20))
            if not chunk:
                raise SimulatorError(self._died())
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> str:
        """Why the child went away: its exit status and the last line it printed."""
        self.close()
        return f"rknn simulator exited ({self._child.returncode}): {_last_line(self._log)}"


def _relocated(request: Path, model: ModelInfo) -> list[Path]:
    """The request as this run finds its files: the reference model where it is now, the
    artifact and its calibration list beside the request (a cached artifact may be reached by
    another path than the one that converted it, its model moved since); written beside it,
    first in the list of the files written (removed once the child started)."""
    spec = json.loads(request.read_text(encoding="utf-8"))
    here = request.parent
    spec["model"] = model.path
    spec["out"] = str(here / Path(spec["out"]).name)
    written = []
    if spec.get("dataset"):
        written.append(_relisted(here / "rknn_calib" / "dataset.txt"))
        spec["dataset"] = str(written[0])
    handle, name = tempfile.mkstemp(dir=here, prefix=".request-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(spec, out)
    return [Path(name), *written]


def _relisted(listing: Path) -> Path:
    """A copy of rknn's calibration list naming its .npy files where they are now."""
    lines = [" ".join(str(listing.parent / Path(f).name) for f in line.split())
             for line in listing.read_text(encoding="utf-8").splitlines() if line.strip()]
    handle, name = tempfile.mkstemp(dir=listing.parent, prefix=".dataset-", suffix=".txt")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return Path(name)


def _start(request: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The serving child in the toolchain's environment (built: edge toolchains install)."""
    try:
        env = require_built(TOOLCHAIN)
    except ToolchainError as exc:
        raise SimulatorError(str(exc)) from None
    child_env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    return subprocess.Popen([str(env.python), str(CHILD), "--serve", str(request)],
                            cwd=request.parent, env=child_env | {"PYTHONNOUSERSITE": "1"},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            start_new_session=True)


def _stop(child: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Close the child's input, give it a moment, then kill its process group."""
    with contextlib.suppress(OSError):
        if child.stdin is not None:
            child.stdin.close()
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    with contextlib.suppress(OSError):
        if child.stdout is not None:
            child.stdout.close()
    log.close()


def _last_line(log: IO[bytes]) -> str:
    """The last non-empty line of the child's stderr (what it said before dying)."""
    try:
        log.seek(max(0, log.seek(0, io.SEEK_END) - 4096))
        lines = [line.strip() for line in log.read().decode(errors="replace").splitlines()]
    except (OSError, ValueError):
        return "(its log is gone)"
    return next((line for line in reversed(lines) if line), "(no output)")


def _packed(arrays: list[np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, *[np.ascontiguousarray(a) for a in arrays])  # arr_0, arr_1, ...
    return buffer.getvalue()


def _arrays(payload: bytes) -> list[np.ndarray]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as data:
        return [data[f"arr_{n}"] for n in range(len(data.files))]


def _dtype(name: str) -> np.dtype:
    """The reference output's numpy dtype (float32 when its name is not one numpy knows)."""
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(np.float32)


def _as_reference(output: np.ndarray, shape: tuple[int | str, ...]) -> np.ndarray:
    """An output in the reference layout: NCHW as the ONNX model (an NHWC one is transposed
    back)."""
    dims = [d for d in shape if isinstance(d, int) and d > 0]
    if len(dims) < len(shape) or output.shape == tuple(dims):
        return output
    if output.ndim == 4 and output.shape == tuple(dims[i] for i in (0, 2, 3, 1)):
        return np.transpose(output, (0, 3, 1, 2))
    if output.size == int(np.prod(dims)):  # e.g. (1, 10, 1, 1) for (1, 10)
        return output.reshape(dims)
    raise SimulatorError(f"rknn simulator output of shape {output.shape}, the model's is "
                         f"{tuple(shape)}")
