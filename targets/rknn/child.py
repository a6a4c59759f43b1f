"""rknn-toolkit2 inside the toolchain's environment (never edge's). Standard library, numpy and
rknn.api only.

``python child.py REQUEST.json``: one conversion. It writes the .rknn and, beside it, the
operators the compiler placed on the CPU (``<out>.ops.json``, from the build's layer table).
On failure the last line on stderr says which step failed, and the exit status is 1.

``python child.py --serve REQUEST.json``: the same build, then the toolkit's simulator
(``init_runtime()`` with no target: it runs only a model built in this session, never a loaded
.rknn), answering runs over stdin/stdout until stdin closes. Frames: one kind byte, an 8-byte
big-endian length, the payload: ``R`` inputs (npz, arr_0... in input order) -> ``A`` outputs
(npz, in output order) or ``E`` one line; the first frame the child sends is ``K`` (ready, JSON)
or ``E``. Everything the toolkit prints goes to stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import struct
import sys
import tempfile

#: One row of the build's "Network Layer Information Table": ID, OpType, DataType, Target.
_ROW = re.compile(r"RKNN: \[[^\]]*\]\s+\d+\s+(\S+)\s+\S+\s+(CPU|NPU|GPU)\s")
#: Layer-table rows that are not operators of the model (they always say CPU).
_BOOKENDS = ("InputOperator", "OutputOperator")
_HEADER = struct.Struct(">cQ")


class StepFailed(Exception):
    """An rknn.api call returned non-zero."""


def _check(step: str, status: int) -> None:
    if status != 0:
        raise StepFailed(f"rknn-toolkit2 {step} failed (returned {status}); its log is above")


def built(request: dict, log_path: str):
    """An RKNN object with the request's model built (its layer table logged to ``log_path``)."""
    from rknn.api import RKNN

    rknn = RKNN(verbose=True, verbose_file=None)
    _check("config", rknn.config(target_platform=request["platform"],
                                 quantized_algorithm=request["algorithm"]))
    _check("load_onnx", rknn.load_onnx(model=request["model"], inputs=request["inputs"],
                                       input_size_list=request["shapes"]))
    quantize = request["precision"] == "int8"
    with _stdout_to(log_path):  # the native compiler prints the layer table on fd 1
        status = rknn.build(do_quantization=quantize, dataset=request["dataset"])
    _check("build", status)
    return rknn


@contextlib.contextmanager
def _stdout_to(path: str):
    """File descriptor 1 into ``path`` for the block (native code writes there directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def cpu_ops(log_path: str) -> list[str]:
    """The operator types of the layer table's rows on the CPU, in order, each once."""
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        rows = [m.groups() for m in map(_ROW.search, handle) if m]
    return list(dict.fromkeys(op for op, unit in rows if unit != "NPU" and op not in _BOOKENDS))


def convert(request: dict) -> None:
    """Config, load the ONNX model, build (quantizing for int8), export; the CPU ops beside."""
    with tempfile.TemporaryDirectory() as scratch:
        log_path = os.path.join(scratch, "build.log")
        rknn = built(request, log_path)
        try:
            _check("export_rknn", rknn.export_rknn(request["out"]))
        finally:
            rknn.release()
        with open(request["out"] + ".ops.json", "w", encoding="utf-8") as handle:
            json.dump({"cpu": cpu_ops(log_path)}, handle)


# ---------------------------------------------------------------- the simulator, served


def _send(pipe, kind: bytes, payload: bytes) -> None:
    pipe.write(_HEADER.pack(kind, len(payload)) + payload)
    pipe.flush()


def _receive(pipe) -> tuple[bytes, bytes] | None:
    """The next frame, or None at the end of input."""
    head = pipe.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    kind, size = _HEADER.unpack(head)
    return kind, pipe.read(size)


def _arrays(np, payload: bytes) -> list:
    with np.load(io.BytesIO(payload), allow_pickle=False) as data:
        return [data[f"arr_{n}"] for n in range(len(data.files))]


def _packed(np, arrays: list) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, *[np.ascontiguousarray(a) for a in arrays])  # arr_0, arr_1, ...
    return buffer.getvalue()


def _infer(np, rknn, inputs: list) -> list:
    """One simulator run; 4-D inputs are NCHW as in the ONNX model."""
    layout = "nchw" if any(a.ndim == 4 for a in inputs) else None
    outputs = rknn.inference(inputs=inputs, data_format=layout)
    if outputs is None:
        raise StepFailed("rknn-toolkit2 inference returned nothing; its log is on stderr")
    return [np.asarray(o) for o in outputs]


def serve(request: dict, inbox, outbox) -> None:
    """Build, start the simulator, answer ``R`` frames until the input ends."""
    import numpy as np

    with tempfile.TemporaryDirectory() as scratch:
        rknn = built(request, os.path.join(scratch, "build.log"))
    try:
        _check("init_runtime (simulator)", rknn.init_runtime())
        _send(outbox, b"K", json.dumps({"simulator": True}).encode())
        while (frame := _receive(inbox)) is not None:
            try:
                outputs = _infer(np, rknn, _arrays(np, frame[1]))
            except Exception as exc:  # noqa: BLE001 - one line back to edge
                _send(outbox, b"E", _line(exc).encode())
                continue
            _send(outbox, b"A", _packed(np, outputs))
    finally:
        rknn.release()


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no message'}"


def main(argv: list[str]) -> int:
    serving = argv[1:2] == ["--serve"]
    with open(argv[-1], encoding="utf-8") as handle:
        request = json.load(handle)
    if not serving:
        try:
            convert(request)
        except Exception as exc:  # noqa: BLE001 - reported as one line to edge
            print(_line(exc), file=sys.stderr)
            return 1
        return 0
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the toolkit's prints go to stderr, never into the frames
    try:
        serve(request, sys.stdin.buffer, outbox)
    except Exception as exc:  # noqa: BLE001 - reported as one frame to edge
        _send(outbox, b"E", _line(exc).encode())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
