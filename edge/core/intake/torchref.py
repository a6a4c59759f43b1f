"""A PyTorch model's first run, in a bounded child (edge.core.bounded): its forward on the
example inputs and its ONNX export (edge.core.intake.pytorch.from_torch).

``python -m edge.core.intake.torchref JOB.json`` reads the job (the source, the scratch paths,
the pins, dtypes, ``--arg`` values and whether the user trusts the file's code), runs
``from_torch`` and writes the raw ONNX and the feeds and outputs it saw (``in/NAME``,
``out/INDEX/NAME`` in an .npz, as the TensorFlow child does); it answers
(edge.core.bounded.reply) ``{"warnings": [...]}`` (the edge logger's warnings, for the parent
to show) when done, or ``{"error": LINE}`` with edge's own one-line refusal.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge.core.bounded import OUT_OF_MEMORY, apply_limits, out_of_memory, reply
from edge.core.errors import EdgeError, first_line
from edge.core.intake.pytorch import from_torch

__all__ = ["main"]


class _Kept(logging.Handler):
    """The edge logger's warnings of the run, sent back for the parent to show."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(argv: list[str]) -> int:
    apply_limits()
    job = json.loads(Path(argv[0]).read_text())
    kept = _Kept()
    logging.getLogger("edge").addHandler(kept)
    try:
        _run(job)
    except EdgeError as exc:
        reply({"error": str(exc)})
        return 0
    except Exception as exc:  # noqa: BLE001 - torch's own errors: one line for the parent
        if out_of_memory(exc):
            return OUT_OF_MEMORY
        reply({"error": f"{job['source']}: {first_line(exc)}"})
        return 0
    reply({"warnings": kept.lines})
    return 0


def _run(job: dict[str, Any]) -> None:
    pins = {k: tuple(v) for k, v in job["pins"].items()}
    model, feeds, expected = from_torch(Path(job["source"]), Path(job["out"]), pins,
                                        job["dtypes"], trust=job["trust"],
                                        arg_values=job["args"])
    onnx.save(model, job["raw"])
    arrays = {f"in/{k}": v for k, v in feeds.items()}
    arrays.update({f"out/{i}/{name}": v for i, (name, v) in enumerate(expected)})
    np.savez(job["check"], **arrays)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
