"""MLServer's adaptive batcher, made to wait for company only when company is on its way.

MLServer's batcher holds every batch open for ``max_batch_time`` unless it fills, so a lone
client pays the whole delay on every request. This one first lets requests already in the event
loop reach the queue, takes what is queued, and waits (up to the same deadline) only while the
front layer is still reading request bodies (:class:`Arrivals`). Under load batches form as
before; a single client is answered at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mlserver.batching.adaptive import AdaptiveBatcher
from mlserver.batching.requests import BatchedRequests

_ATTR = "__adaptive_batching__"  # where MLServer's load_batching keeps a model's batcher


class Arrivals:
    """How many admitted inference requests are still being read (not yet with the engine)."""

    def __init__(self) -> None:
        self.reading = 0


class EagerBatcher(AdaptiveBatcher):
    """AdaptiveBatcher whose batches wait only while more requests are arriving."""

    arrivals: Arrivals

    async def _batch_requests(self) -> AsyncIterator[BatchedRequests]:
        while not self._requests.empty():
            taken: dict[str, Any] = {}
            deadline = time.monotonic() + self._max_batch_time
            while len(taken) < self._max_batch_size:
                if self._requests.empty():
                    await asyncio.sleep(0)  # requests already in the loop reach the queue
                if self._requests.empty() and not self.arrivals.reading:
                    break
                try:
                    internal_id, request = await self._get_request(
                        timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    break
                taken[internal_id] = request
            yield BatchedRequests(taken)


def eager(arrivals: Arrivals) -> Callable[[Any], Awaitable[Any]]:
    """An on-model-load hook (after MLServer's ``load_batching``) making its batcher eager."""
    async def hook(model: Any) -> Any:
        batcher = getattr(model, _ATTR, None)
        if isinstance(batcher, AdaptiveBatcher):
            batcher.__class__ = EagerBatcher
            batcher.arrivals = arrivals
        return model
    return hook
