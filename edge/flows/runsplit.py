"""``edge run-split``: feed inputs through the split client and report where the time went."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.core import progress
from edge.core.data import load_dataset
from edge.core.errors import UsageError
from edge.core.files import only_regular_files, staged
from edge.core.values import ModelInfo, TensorSpec
from partition.client import SplitClient

__all__ = ["RunSplitOptions", "run"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSplitOptions:
    """What ``edge run-split`` was asked."""

    url: str
    data: Path | None = None
    runs: int = 10
    warmup: int = 0  # inferences run first and left out of the report
    cut: str = "auto"
    token: str | None = None
    threads: int = 1
    probe_every_s: float = 5.0
    out: Path | None = None
    protocol: str = "auto"  # auto (gRPC when offered), http or grpc
    timeout_s: float = 30.0  # one request to the server, its whole reply included


def run(split_dir: Path, options: RunSplitOptions) -> dict[str, Any]:
    """Run ``options.runs`` inferences (cycling through the inputs); a JSON-ready report."""
    only_regular_files(split_dir, "split folder")
    with SplitClient(split_dir, options.url, token=options.token, cut=options.cut,
                     threads=options.threads, probe_every_s=options.probe_every_s,
                     protocol=options.protocol, timeout_s=options.timeout_s) as client:
        feeds = _feeds(client.plan.inputs, options.data)
        for feed, _ in zip(_cycle(feeds), range(options.warmup), strict=False):
            client.infer(feed)
        # timed run i is input i (cycling), so saved output i belongs to input i
        results: list[Any] = []
        with progress.step("inferences", total=options.runs) as bar:
            for index, (feed, _) in enumerate(zip(_cycle(feeds), range(options.runs),
                                                  strict=False)):
                bar.update(f"inference {index + 1}/{options.runs}")
                results.append(client.infer(feed))
                bar.advance()
        last_error, protocol = client.last_error, client.protocol
    if options.out is not None:
        _save(options.out, [r.outputs for r in results])
    runs = [r.timing() for r in results]
    return {"split": str(split_dir), "url": options.url, "protocol": protocol, "runs": runs,
            "summary": _summary(runs), "last_error": last_error}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    cuts: dict[str, int] = {}
    for r in runs:
        cuts[r["cut_id"]] = cuts.get(r["cut_id"], 0) + 1
    return {"runs": len(runs), "median_ms": statistics.median(r["total_ms"] for r in runs),
            "median_predicted_ms": statistics.median(r["predicted_ms"] for r in runs),
            "cuts": cuts, "probes": sum(1 for r in runs if r["probe"])}


def _feeds(inputs: tuple[dict[str, Any], ...], data: Path | None) -> list[dict[str, np.ndarray]]:
    """One feed dict per sample: from ``data`` when given, else one random sample."""
    if not inputs:
        raise UsageError("split.yaml lists no model inputs; re-run `edge partition`")
    specs = tuple(TensorSpec(name=i["name"], shape=tuple(i["shape"]), dtype=i["dtype"])
                  for i in inputs)
    if data is not None:
        info = ModelInfo(path="", sha256="", size_bytes=0, opset=0, inputs=specs, outputs=(),
                         params=0, macs=0)
        return [dict(f) for f in load_dataset(data, info).feeds]
    rng = np.random.default_rng(0)
    return [{s.name: _random(rng, s) for s in specs}]


def _random(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(spec.static_shape).astype(dtype)
    return np.zeros(spec.static_shape, dtype)


def _cycle(feeds: list[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    while True:
        yield from feeds


def _save(path: Path, outputs: list[dict[str, np.ndarray]]) -> None:
    """Outputs of run i under "NAME/i", written atomically."""
    arrays = {f"{name}/{i}": value for i, out in enumerate(outputs) for name, value in out.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
