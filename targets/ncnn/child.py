"""NCNN's Vulkan compute in a child process of its own, for verifying ``ncnn-vulkan`` here.

A Vulkan instance (Mesa's lavapipe links its own LLVM) in a process that has loaded TensorFlow
aborts that process at exit ("free(): invalid pointer"), whichever is torn down first. So edge
never creates one in its own process: this child probes the Vulkan device count, or holds one
net and answers run requests framed on stdin/stdout (an 8-byte length, then an ``.npz``).

    python -m targets.ncnn.child --count
    python -m targets.ncnn.child ARTIFACT THREADS     (then framed requests)
"""

from __future__ import annotations

import io
import os
import struct
import sys
from typing import Any, BinaryIO

import numpy as np

from targets.ncnn import agent

__all__ = ["read_frame", "write_frame"]

_LENGTH = struct.Struct("<Q")


def write_frame(stream: BinaryIO, arrays: list[np.ndarray]) -> None:
    """``arrays`` as one frame (their order kept)."""
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    payload = buffer.getvalue()
    stream.write(_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: BinaryIO) -> list[np.ndarray] | None:
    """The next frame's arrays, None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    with np.load(io.BytesIO(stream.read(size)), allow_pickle=False) as found:
        return [found[f"arr_{i}"] for i in range(len(found.files))]


def _serve(artifact: str, threads: int, ncnn: Any, out: BinaryIO) -> None:
    settings = agent.read_settings(artifact)
    net = agent.open_net(ncnn, artifact, settings, threads)
    while (feeds := read_frame(sys.stdin.buffer)) is not None:
        write_frame(out, [np.asarray(o) for o in agent.run_net(np, ncnn, net, settings, feeds)])


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # NCNN's C++ prints to stdout: only frames go to the parent
    import ncnn

    if argv[:1] == ["--count"]:
        out.write(str(ncnn.get_gpu_count()).encode())
        out.flush()
        return 0
    _serve(argv[0], int(argv[1]), ncnn, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
