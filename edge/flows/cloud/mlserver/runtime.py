"""edge's tail as an MLServer inference runtime: one onnxruntime session per served tail.

MLServer loads it by name (``edge.flows.cloud.mlserver.runtime.TailRuntime`` in
model-settings.json; the earlier ``partition.cloud.runtime.TailRuntime`` of repositories exported
before is rewritten to it when served, ``edge.flows.cloud.repository.servable``) and drives it:
adaptive batching merges requests before ``predict``, parallel workers (when asked) run it in
other processes. Tensors arrive as numpy arrays (edge's front layer and gRPC servicer decode
them), as a list of arrays (a merged batch), or as plain lists (any other client of the engine),
and leave as flat arrays the batcher can slice per request.

A tail that runs in under ``INLINE_MS`` (the median of five runs when it loads) runs on the event
loop itself: handing it to a thread costs more than it does. Anything slower runs in a thread
(onnxruntime releases the GIL), so the server keeps accepting and parsing requests meanwhile.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput
from mlserver.utils import get_model_uri

from edge.flows.cloud.tensors import clock, elapsed_ms
from partition.kserve import DTYPE_TO_KSERVE, KSERVE_TO_NP
from partition.kserve import ORT_TO_KSERVE as _ORT

INLINE_MS = 0.3


class TailRuntime(MLModel):
    """An onnxruntime CPU session; ``parameters.extra.threads`` sets its intra-op threads."""

    async def load(self) -> bool:
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(extra.get("threads", 0))
        options.log_severity_level = 3
        path = await get_model_uri(self.settings)
        self._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._inline = _run_ms(self._session) < INLINE_MS
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {item.name: as_array(item) for item in payload.inputs}
        names = [o.name for o in payload.outputs] if payload.outputs else self._outputs
        if self._inline:
            arrays = self._session.run(names, feeds)
        else:
            arrays = await asyncio.to_thread(self._session.run, names, feeds)
        outputs = [flat_output(name, array) for name, array in zip(names, arrays, strict=True)]
        return InferenceResponse.model_construct(model_name=self.name, model_version="1",
                                                 id=None, parameters=None, outputs=outputs)


def _run_ms(session: Any) -> float:
    """The median of five runs on zeros at batch 1 (after one untimed run), ms."""
    feeds = {arg.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in arg.shape],
                                KSERVE_TO_NP[_ORT[arg.type]])
             for arg in session.get_inputs()}
    session.run(None, feeds)
    times = []
    for _ in range(5):
        start = clock()
        session.run(None, feeds)
        times.append(elapsed_ms(start))
    return statistics.median(times)


def flat_output(name: str, array: np.ndarray) -> ResponseOutput:
    """A response tensor holding ``array`` flat (no list conversion, no validation pass)."""
    return ResponseOutput.model_construct(
        name=name, shape=list(array.shape), datatype=DTYPE_TO_KSERVE[array.dtype],
        parameters=None, data=array.reshape(-1))  # the engine reads data.root or data


def as_array(item: Any) -> np.ndarray:
    """A request input or response output as an array of its shape and datatype."""
    data = getattr(item.data, "root", item.data)
    dtype = KSERVE_TO_NP[str(getattr(item.datatype, "value", item.datatype))]
    if isinstance(data, np.ndarray):
        flat = data
    elif isinstance(data, list) and data and isinstance(data[0], np.ndarray):
        flat = np.concatenate([part.reshape(-1) for part in data])  # a merged batch
    else:
        flat = np.asarray(data, dtype=dtype)
    return flat.astype(dtype, copy=False).reshape(item.shape)
