"""KServe v2 on the wire, once for the split client and the cloud tail: the datatype tables,
tensors as little-endian raw bytes and back, the ``Server-Timing`` duration, and one reply.

Standard library and numpy only: the device-side client imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CONTENTS", "DTYPE_TO_KSERVE", "KSERVE_TO_NP", "NP_TO_KSERVE", "ORT_TO_KSERVE",
           "Reply", "from_raw", "raw_bytes", "server_ms"]

#: KServe v2 datatype -> numpy dtype (the tensor types a tail may carry; no BYTES)
KSERVE_TO_NP: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
}
#: numpy dtype name -> KServe datatype
NP_TO_KSERVE = {dtype.name: name for name, dtype in KSERVE_TO_NP.items()}
#: numpy dtype -> KServe datatype (no ``dtype.name`` lookup)
DTYPE_TO_KSERVE = {dtype: name for name, dtype in KSERVE_TO_NP.items()}
#: ONNX Runtime type string -> KServe datatype
ORT_TO_KSERVE = {f"tensor({t})": name for t, name in (
    ("bool", "BOOL"), ("uint8", "UINT8"), ("uint16", "UINT16"), ("uint32", "UINT32"),
    ("uint64", "UINT64"), ("int8", "INT8"), ("int16", "INT16"), ("int32", "INT32"),
    ("int64", "INT64"), ("float16", "FP16"), ("float", "FP32"), ("double", "FP64"))}
#: gRPC ``InferTensorContents`` field per KServe datatype (FP16 travels raw only)
CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
            "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
            "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
            "FP32": "fp32_contents", "FP64": "fp64_contents"}


@dataclass(frozen=True, slots=True)
class Reply:
    """One inference answered by the server, over REST or gRPC."""

    outputs: dict[str, np.ndarray]
    wall_ms: float  # the request's wall time on the client
    server_ms: float  # the server's compute time (Server-Timing)
    up_bytes: int
    down_bytes: int


def raw_bytes(array: np.ndarray) -> bytes:
    """The tensor's data as KServe's raw form: contiguous, little-endian."""
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return little.tobytes()


def from_raw(raw: bytes, datatype: str, shape: Sequence[int]) -> np.ndarray:
    """A tensor back from its raw little-endian bytes (native byte order, ``shape``)."""
    dtype = KSERVE_TO_NP[datatype]
    return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype).reshape(list(shape))


def server_ms(header: str | None) -> float:
    """The ``dur=`` of a ``Server-Timing`` header (or gRPC trailing metadata), 0 when absent."""
    for part in (header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "dur":
            try:
                return max(0.0, float(value))
            except ValueError:
                return 0.0
    return 0.0
