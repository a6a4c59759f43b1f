"""Inference through MLServer's data plane, for edge's REST front layer and gRPC servicer.

Requests are checked against the model's metadata (cached per model) before they reach the
engine, handed over as numpy arrays (no list conversion), and the reply's arrays come back
whole. The server time reported in ``Server-Timing`` is the data plane's: batching wait plus
compute.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, RequestInput, RequestOutput

from edge.flows.cloud.guard import Reply
from edge.flows.cloud.mlserver.runtime import as_array
from edge.flows.cloud.tensors import (
    RequestError,
    TensorSpec,
    Wanted,
    binary_array,
    check_shape,
    clock,
    elapsed_ms,
    encode_reply,
    json_array,
    parse_inputs,
    parse_outputs,
    split_body,
)
from partition.kserve import CONTENTS, DTYPE_TO_KSERVE

_IDS = itertools.count()
Specs = tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]


class Inferencer:
    """Validated inference on MLServer's ``DataPlane``."""

    def __init__(self, data_plane: Any) -> None:
        self._plane = data_plane
        self._specs: dict[tuple[str, str | None], Specs] = {}

    async def specs(self, name: str, version: str | None) -> Specs:
        """The model's input and output specs (404 for a model the engine does not serve)."""
        key = (name, version or None)
        if key not in self._specs:
            try:
                meta = await self._plane.model_metadata(name, version or None)
            except MLServerError as exc:
                raise RequestError(str(exc), exc.status_code) from None
            self._specs[key] = (_specs(meta.inputs), _specs(meta.outputs))
        return self._specs[key]

    async def rest(self, name: str, version: str | None, body: bytes | bytearray,
                   header_len: str | None) -> Reply:
        """One REST inference: the reply body (JSON or binary tensors) and its server time."""
        inputs, outputs = await self.specs(name, version)
        doc, binary = split_body(body, header_len)
        feeds = parse_inputs(inputs, doc, binary)
        wanted = parse_outputs(outputs, doc)
        arrays, server_ms = await self.run(name, version, feeds, wanted)
        reply, head = encode_reply(name, doc.get("id"), wanted, arrays)
        return Reply(body=reply, header_len=head, server_ms=server_ms)

    async def run(self, name: str, version: str | None, feeds: Mapping[str, np.ndarray],
                  wanted: Sequence[Wanted]) -> tuple[dict[str, np.ndarray], float]:
        """The engine's outputs by name, and the ms the data plane took."""
        request = _request(feeds, wanted)
        start = clock()
        try:
            response = await self._plane.infer(request, name, version or None)
        except MLServerError as exc:
            raise RequestError(str(exc), exc.status_code if exc.status_code < 500 else 400)\
                from None
        except Exception as exc:  # noqa: BLE001 - e.g. ORT refusing inconsistent dynamic dims
            raise RequestError(f"inference failed: {str(exc).splitlines()[0]}") from None
        return {o.name: as_array(o) for o in response.outputs}, elapsed_ms(start)


def _specs(tensors: Any) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(name=t.name, datatype=str(getattr(t.datatype, "value", t.datatype)),
                            shape=tuple(t.shape)) for t in tensors or ())


def _request(feeds: Mapping[str, np.ndarray], wanted: Sequence[Wanted]) -> InferenceRequest:
    inputs = [RequestInput.model_construct(
        name=name, shape=list(array.shape), datatype=DTYPE_TO_KSERVE[array.dtype],
        parameters=None, data=array)  # the engine reads data.root or data
        for name, array in feeds.items()]
    outputs = [RequestOutput.model_construct(name=w.name, parameters=None) for w in wanted]
    return InferenceRequest.model_construct(id=f"edge-{next(_IDS)}", parameters=None,
                                            inputs=inputs, outputs=outputs)


def grpc_inputs(specs: Sequence[TensorSpec], request: Any) -> dict[str, np.ndarray]:
    """A ModelInferRequest's inputs (raw or typed contents), checked like REST's."""
    by_name = {s.name: s for s in specs}
    names = [t.name for t in request.inputs]
    if sorted(names) != sorted(by_name) or len(set(names)) != len(names):
        raise RequestError(f"input names {names} must be exactly {sorted(by_name)}")
    raw = request.raw_input_contents
    if raw and len(raw) != len(names):
        raise RequestError("raw_input_contents must hold one entry per input")
    feeds = {}
    for k, tensor in enumerate(request.inputs):
        spec = by_name[tensor.name]
        if tensor.datatype != spec.datatype:
            raise RequestError(f"input {spec.name!r}: datatype {tensor.datatype!r}, model "
                               f"wants {spec.datatype}")
        shape = check_shape(spec, list(tensor.shape))
        feeds[spec.name] = (binary_array(spec, memoryview(raw[k]), shape) if raw
                            else _contents(spec, tensor, shape))
    return feeds


def _contents(spec: TensorSpec, tensor: Any, shape: tuple[int, ...]) -> np.ndarray:
    field = CONTENTS.get(spec.datatype)
    if field is None:
        raise RequestError(f"input {spec.name!r}: {spec.datatype} needs raw_input_contents")
    return json_array(spec, list(getattr(tensor.contents, field)), shape)


def grpc_outputs(specs: Sequence[TensorSpec], request: Any) -> list[Wanted]:
    """The requested outputs (all when none named), always returned raw."""
    known = [s.name for s in specs]
    names = [o.name for o in request.outputs] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise RequestError(f"unknown output {unknown[0]!r}; model has {sorted(known)}")
    return [Wanted(name=n, binary=True) for n in names]
