"""KServe v2 tensors <-> numpy: request validation, JSON and binary tensor data.

No engine import here: edge's front layer (:mod:`edge.flows.cloud.guard`) parses and checks every
request with these before it reaches the engine, so a bad request is a 400 that never joins a
dynamic batch, and tensors stay numpy arrays from the socket to onnxruntime (the engine's own
REST path has no binary tensor data, MLServer issue #324).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from partition.kserve import DTYPE_TO_KSERVE, KSERVE_TO_NP, raw_bytes

HEADER_LEN = "inference-header-content-length"


class RequestError(Exception):
    """A client error carrying its HTTP status (and the gRPC code it maps to)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, kw_only=True, slots=True)
class TensorSpec:
    """Name, KServe datatype and shape (``-1`` for a dynamic dim) of one model tensor."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The KServe metadata form."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Wanted:
    """One requested output: its name and whether it goes back as binary tensor data."""

    name: str
    binary: bool


def split_body(body: bytes | bytearray,
               header_len: str | None) -> tuple[dict[str, Any], memoryview]:
    """The JSON header (orjson refuses nesting over 1024 levels) and binary part of a body."""
    view = memoryview(body)
    n = len(body) if header_len is None else _header_length(header_len, len(body))
    try:
        doc = orjson.loads(view[:n])
    except orjson.JSONDecodeError as e:
        raise RequestError(f"malformed JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestError("request body must be a JSON object")
    return doc, view[n:]


def _header_length(value: str, size: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise RequestError("bad Inference-Header-Content-Length") from None
    if not 0 <= n <= size:
        raise RequestError("Inference-Header-Content-Length out of range")
    return n


def check_shape(spec: TensorSpec, shape: Any) -> tuple[int, ...]:
    """A request shape, if it fits the model's (a dynamic dim takes any positive size)."""
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise RequestError(f"input {spec.name!r}: shape must be a list of integers")
    if len(shape) != len(spec.shape) or any(
            d < 0 or (m >= 0 and d != m) or (m < 0 and d == 0)
            for d, m in zip(shape, spec.shape, strict=True)):
        raise RequestError(f"input {spec.name!r}: shape {shape} does not match model shape "
                           f"{list(spec.shape)}")
    return tuple(shape)


def json_array(spec: TensorSpec, data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """JSON tensor data (flat or nested lists of numbers) as an array of the model's dtype."""
    if not isinstance(data, list):
        raise RequestError(f"input {spec.name!r}: tensor data must be a list")
    dtype = KSERVE_TO_NP[spec.datatype]
    try:
        array = np.array(data, dtype=object if spec.datatype == "BOOL" else None)
    except (ValueError, TypeError, RecursionError):
        raise RequestError(f"input {spec.name!r}: ragged or malformed tensor data") from None
    if array.size != math.prod(shape):
        raise RequestError(f"input {spec.name!r}: {array.size} values for shape {list(shape)}")
    if not _values_fit(spec.datatype, array):
        raise RequestError(f"input {spec.name!r}: data has values of the wrong type")
    try:
        return array.astype(dtype).reshape(shape)
    except (ValueError, OverflowError, TypeError) as e:
        raise RequestError(f"input {spec.name!r}: {e}") from None


def _values_fit(datatype: str, array: np.ndarray) -> bool:
    """Numbers for numeric tensors (no bools, no strings), bools for BOOL."""
    if datatype == "BOOL":
        return all(isinstance(x, bool) for x in array.reshape(-1))
    return array.size == 0 or array.dtype.kind in "iuf"


def binary_array(spec: TensorSpec, raw: memoryview, shape: tuple[int, ...]) -> np.ndarray:
    """A binary tensor blob (little-endian) as an array of the model's dtype, without copying."""
    dtype = KSERVE_TO_NP[spec.datatype]
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise RequestError(f"input {spec.name!r}: {len(raw)} bytes for shape {list(shape)}")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)


def _binary_size(entry: dict[str, Any]) -> int | None:
    params = _params(entry)
    size = params.get("binary_data_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise RequestError("binary_data_size must be a non-negative integer")
    return size


def _params(entry: Mapping[str, Any]) -> dict[str, Any]:
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("parameters must be an object")
    return params


def parse_inputs(specs: Sequence[TensorSpec], doc: dict[str, Any],
                 binary: memoryview) -> dict[str, np.ndarray]:
    """The request's inputs, each checked against the model (names, dtype, shape, size)."""
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RequestError("'inputs' must be a list of objects")
    by_name = {s.name: s for s in specs}
    names = [e.get("name") for e in entries]
    if (not all(isinstance(n, str) for n in names) or sorted(names) != sorted(by_name)
            or len(set(names)) != len(names)):
        raise RequestError(f"input names {names} must be exactly {sorted(by_name)}")
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for entry in entries:
        spec = by_name[entry["name"]]
        feeds[spec.name], offset = _one_input(spec, entry, binary, offset)
    if offset != len(binary):
        raise RequestError("unused trailing binary data")
    return feeds


def _one_input(spec: TensorSpec, entry: dict[str, Any], binary: memoryview,
               offset: int) -> tuple[np.ndarray, int]:
    if entry.get("datatype") != spec.datatype:
        raise RequestError(f"input {spec.name!r}: datatype {entry.get('datatype')!r}, model "
                           f"wants {spec.datatype}")
    shape = check_shape(spec, entry.get("shape"))
    size = _binary_size(entry)
    if size is None:
        return json_array(spec, entry.get("data"), shape), offset
    if "data" in entry or offset + size > len(binary):
        raise RequestError(f"input {spec.name!r}: inconsistent binary data")
    return binary_array(spec, binary[offset:offset + size], shape), offset + size


def parse_outputs(specs: Sequence[TensorSpec], doc: dict[str, Any]) -> list[Wanted]:
    """The requested outputs (all, as JSON unless ``binary_data_output``, when none named)."""
    default = bool(_params(doc).get("binary_data_output", False))
    entries = doc.get("outputs")
    if entries is None:
        return [Wanted(name=s.name, binary=default) for s in specs]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RequestError("'outputs' must be a list of objects")
    known = {s.name for s in specs}
    wanted = []
    for entry in entries:
        name = entry.get("name")
        if not isinstance(name, str) or name not in known:
            raise RequestError(f"unknown output {name!r}; model has {sorted(known)}")
        wanted.append(Wanted(name=name, binary=bool(_params(entry).get("binary_data", default))))
    return wanted


def encode_reply(model: str, request_id: Any, wanted: Sequence[Wanted],
                 outputs: Mapping[str, np.ndarray]) -> tuple[bytes, int | None]:
    """The reply body and, when it carries binary tensors, its JSON header's length."""
    entries, blobs = [], []
    for want in wanted:
        array = outputs[want.name]
        entry: dict[str, Any] = {"name": want.name, "shape": list(array.shape),
                                 "datatype": DTYPE_TO_KSERVE[array.dtype]}
        if want.binary:
            blob = raw_bytes(array)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = array.reshape(-1)
        entries.append(entry)
    reply: dict[str, Any] = {"model_name": model, "model_version": "1", "outputs": entries}
    if isinstance(request_id, str):
        reply["id"] = request_id
    head = orjson.dumps(reply, option=orjson.OPT_SERIALIZE_NUMPY)
    return (head + b"".join(blobs), len(head)) if blobs else (head, None)


def clock() -> float:
    """A ``time.perf_counter()`` reading, for :func:`elapsed_ms`."""
    return time.perf_counter()


def elapsed_ms(start: float) -> float:
    """Milliseconds since ``start``: the server time (``Server-Timing``), a run at load."""
    return (time.perf_counter() - start) * 1e3
