"""KServe v2 on the wire, once for the split client and the cloud tail: the datatype tables,
tensors as little-endian raw bytes and back, the ``Server-Timing`` duration, and one reply.

Standard library and numpy only: the device-side client imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CONTENTS", "DTYPE_TO_KSERVE", "KSERVE_TO_NP", "MAX_REPLY", "NP_TO_KSERVE",
           "ORT_TO_KSERVE", "TOKEN_ENV", "BadReply", "Declared", "Expected", "Reply", "from_raw",
           "json_tensor", "raw_bytes", "raw_tensor", "server_ms", "token_refused"]

#: Largest reply body (or gRPC message) a client reads, bytes
MAX_REPLY = 256 * 2**20
#: Where the split client reads its bearer token when --token-file is not given
TOKEN_ENV = "EDGE_CLOUD_TOKEN"

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


def from_raw(raw: bytes | memoryview, datatype: str, shape: Sequence[int]) -> np.ndarray:
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


class BadReply(ValueError):
    """A reply that breaks the contract of the tail it answers for (one line, what is wrong)."""


@dataclass(frozen=True, slots=True)
class Declared:
    """A tensor as a model declares it: KServe datatype ("" when unknown) and dims (an int, or
    a name or None when dynamic)."""

    datatype: str
    dims: tuple[int | str | None, ...] | None  # None: any rank


@dataclass(frozen=True, slots=True)
class Expected:
    """What a reply must hold: exactly ``names``, each as ``declared`` says (when the tail is
    known here), its dynamic dims resolved from the request (``symbols``), at most
    ``max_elements`` values each."""

    names: tuple[str, ...]
    declared: Mapping[str, Declared] = field(default_factory=dict)
    symbols: Mapping[str, int] = field(default_factory=dict)
    max_elements: int = MAX_REPLY

    def check(self, name: object, datatype: object, shape: object,
              seen: dict[str, int]) -> tuple[str, str, tuple[int, ...]]:
        """``(name, datatype, shape)`` of one reply entry, refused unless expected;
        ``seen`` collects the dynamic dims resolved so far."""
        if not isinstance(name, str) or name not in self.names:
            raise BadReply(f"output {name!r} was not asked for (expected "
                           f"{', '.join(self.names)})")
        if not isinstance(datatype, str) or datatype not in KSERVE_TO_NP:
            raise BadReply(f"output {name!r}: datatype {datatype!r} is not a KServe tensor type")
        dims = _dims(name, shape)
        declared = self.declared.get(name)
        if declared is not None:
            for symbol, size in self.symbols.items():
                seen.setdefault(symbol, size)
            _match(name, datatype, dims, declared, seen)
        if math.prod(dims) > self.max_elements:
            raise BadReply(f"output {name!r}: shape {list(dims)} is larger than any reply")
        return name, datatype, dims

    def complete(self, got: Mapping[str, np.ndarray]) -> None:
        """Refuse a reply that lacks an output asked for."""
        missing = [n for n in self.names if n not in got]
        if missing:
            raise BadReply(f"no output {', '.join(map(repr, missing))} in the reply (it holds "
                           f"{', '.join(map(repr, got)) or 'none'})")


def _dims(name: str, shape: object) -> tuple[int, ...]:
    if not isinstance(shape, Sequence) or isinstance(shape, str | bytes) or not all(
            type(d) is int and d >= 0 for d in shape):
        raise BadReply(f"output {name!r}: shape {str(shape)[:80]} is not a list of sizes")
    return tuple(shape)


def _match(name: str, datatype: str, dims: tuple[int, ...], declared: Declared,
           known: dict[str, int]) -> None:
    """Refuse an output whose datatype or shape is not the one the tail declares."""
    if declared.datatype and datatype != declared.datatype:
        raise BadReply(f"output {name!r} is {datatype}; the tail declares {declared.datatype}")
    if declared.dims is None:
        return
    if len(dims) != len(declared.dims) or not all(
            _fits(got, want, known) for got, want in zip(dims, declared.dims, strict=True)):
        raise BadReply(f"output {name!r} has shape {list(dims)}; the tail declares "
                       f"{[d if d is not None else '?' for d in declared.dims]}"
                       f"{' with ' + str(dict(known)) if known else ''}")


def _fits(got: int, want: int | str | None, known: dict[str, int]) -> bool:
    """Whether one dim fits its declaration (a dynamic dim resolved here on first sight)."""
    if isinstance(want, int):
        return got == want
    if want is None:
        return True
    return known.setdefault(want, got) == got


def raw_tensor(raw: bytes | memoryview, datatype: str, shape: tuple[int, ...],
               name: str) -> np.ndarray:
    """A checked tensor from raw bytes: exactly ``shape``'s size, booleans 0 or 1."""
    dtype = KSERVE_TO_NP[datatype]
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise BadReply(f"output {name!r}: {len(raw)} bytes for shape {list(shape)} of "
                       f"{datatype} ({math.prod(shape) * dtype.itemsize} expected)")
    array = from_raw(raw, datatype, shape)
    if datatype == "BOOL" and array.size and np.frombuffer(raw, np.uint8).max() > 1:
        raise BadReply(f"output {name!r}: BOOL bytes other than 0 and 1")
    return array


def json_tensor(data: object, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A checked tensor from KServe JSON ``data``: its size, and every value a value of
    ``datatype`` (an INT64 of 1e30 or a UINT8 of -1 is refused, not wrapped)."""
    if not isinstance(data, list):
        raise BadReply(f"output {name!r}: data is not a list")
    try:
        values = np.asarray(data)
    except (ValueError, OverflowError, TypeError):
        raise BadReply(f"output {name!r}: data is not a flat list of numbers") from None
    if values.size != math.prod(shape):
        raise BadReply(f"output {name!r}: {values.size} values for shape {list(shape)}")
    dtype = KSERVE_TO_NP[datatype]
    if values.size and not _representable(values, dtype):
        raise BadReply(f"output {name!r}: values that are not {datatype} "
                       f"({values.dtype.name} from {values.min()} to {values.max()})"
                       if values.dtype.kind in "biuf" else
                       f"output {name!r}: values that are not {datatype} numbers")
    return values.astype(dtype).reshape(shape)


def _representable(values: np.ndarray, dtype: np.dtype) -> bool:
    """Whether every value is one of ``dtype`` (no wrap, no overflow, no truncation)."""
    kind = values.dtype.kind
    if dtype.kind == "b":
        return kind == "b" or (kind in "iu" and bool(((values == 0) | (values == 1)).all()))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return kind in "iu" and int(values.min()) >= info.min and int(values.max()) <= info.max
    if kind in "iu":
        return True
    finite = values[np.isfinite(values)] if kind == "f" else values
    return kind == "f" and (not finite.size or float(np.abs(finite).max())
                            <= float(np.finfo(dtype).max))


def token_refused(where: str, token: str | None) -> str:
    """The line for a server that refused a request's bearer token (HTTP 401, gRPC
    UNAUTHENTICATED): what to give it."""
    if token:
        return (f"cloud server {where} refused the bearer token: give the token the server was "
                f"started with (--token-file FILE, or ${TOKEN_ENV})")
    return (f"cloud server {where} needs a bearer token and none was given: pass the server's "
            f"token with --token-file FILE or set ${TOKEN_ENV}")
