"""One ONNX Runtime run of a user's model within the deadline of a model's run.

A model's graph may loop for ever (a Loop whose condition stays true, a trip count of 2**62):
ONNX Runtime checks its run options' terminate flag between nodes and between a loop's
iterations, so a timer sets it at the deadline (``EDGE_MODEL_DEADLINE_S``, edge.core.bounded)
and the run ends in one ``UsageError`` line naming the limit, where edge waited for ever.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import onnxruntime as ort

from edge.core.bounded import bounds, over_deadline

__all__ = ["run_within"]


def run_within(session: Any, names: Sequence[str] | None, feeds: Mapping[str, Any],
               what: str) -> list[Any]:
    """``session.run(names, feeds)``, stopped at the deadline (``what`` names the model)."""
    limits = bounds()
    options = ort.RunOptions()
    options.log_severity_level = 4  # its "terminate flag" error is said once, by edge
    timer = threading.Timer(limits.deadline_s, _terminate, (options,))
    timer.daemon = True
    timer.start()
    try:
        return list(session.run(None if names is None else list(names), dict(feeds), options))
    except Exception:
        if options.terminate:
            raise over_deadline(f"{what}: one run with ONNX Runtime", limits) from None
        raise
    finally:
        timer.cancel()


def _terminate(options: Any) -> None:
    options.terminate = True
