"""Scenarios for test_batching.py, run in a child process: MLServer's package and tritonclient's
gRPC messages cannot be imported into one process (the pytest process imports the latter).

    python -m tests.partition.batching_probe SCENARIO   -> one JSON line on stdout
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from mlserver import MLModel
from mlserver.batching.hooks import load_batching
from mlserver.context import model_context
from mlserver.settings import ModelSettings
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput

from edge.flows.cloud.mlserver.batching import Arrivals, EagerBatcher, eager


class Echo(MLModel):
    """Returns its input; records the batch size of every run."""

    async def load(self) -> bool:
        self.batches: list[int] = []
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = payload.inputs[0]
        self.batches.append(x.shape[0])
        return InferenceResponse(model_name=self.name, outputs=[ResponseOutput(
            name="y", shape=x.shape, datatype="FP32", data=list(x.data))])


async def _model(arrivals: Arrivals, delay_s: float) -> Any:
    model = Echo(ModelSettings(name="echo", implementation=Echo, max_batch_size=8,
                               max_batch_time=delay_s))
    await model.load()
    model = await load_batching(model)  # MLServer's own hook, then edge's
    return await eager(arrivals)(model)


def _request(value: float) -> InferenceRequest:
    return InferenceRequest(inputs=[RequestInput(name="x", shape=[1, 1], datatype="FP32",
                                                 data=[value])])


async def queued() -> dict[str, Any]:
    """Eight requests at once, a 1 s max delay."""
    model = await _model(Arrivals(), 1.0)
    start = time.perf_counter()
    replies = await asyncio.gather(*[model.predict(_request(float(k))) for k in range(8)])
    return {"eager": isinstance(model.__adaptive_batching__, EagerBatcher),
            "seconds": time.perf_counter() - start, "batches": model.batches,
            "rows": [r.outputs[0].data.root for r in replies]}


async def lone() -> dict[str, Any]:
    """One request, a 1 s max delay."""
    model = await _model(Arrivals(), 1.0)
    start = time.perf_counter()
    await model.predict(_request(1.0))
    return {"seconds": time.perf_counter() - start, "batches": model.batches}


async def arriving(reading: int) -> dict[str, Any]:
    """A request, then 0.1 s later another, with ``reading`` bodies still arriving meanwhile."""
    arrivals = Arrivals()
    arrivals.reading = reading
    model = await _model(arrivals, 0.5)
    first = asyncio.ensure_future(model.predict(_request(1.0)))
    await asyncio.sleep(0.1)
    arrivals.reading = 0
    await model.predict(_request(2.0))
    await first
    return {"batches": model.batches}


SCENARIOS = {"queued": queued, "lone": lone, "arriving-0": lambda: arriving(0),
             "arriving-1": lambda: arriving(1)}

if __name__ == "__main__":
    with model_context(ModelSettings(name="echo", implementation=Echo)):
        print(json.dumps(asyncio.run(SCENARIOS[sys.argv[1]]())))
