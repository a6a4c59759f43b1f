"""The model repository serve-cloud serves from, and what ``--export-repository`` writes.

One folder per served tail, readable by three engines::

    OUT/settings.json                 MLServer server settings (`mlserver start OUT`)
    OUT/NAME/1/model.onnx             the served tail (batch-dynamic when batching verified)
    OUT/NAME/config.pbtxt             Triton model config (max_batch_size, dynamic_batching)
    OUT/NAME/model-settings.json      MLServer model settings (edge's TailRuntime, batching)
    OUT/inference-service.yaml        a KServe InferenceService running the Triton repository

``edge serve-cloud`` itself writes this layout to a private folder and starts MLServer on it,
so what is exported is exactly what was served.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from edge.core.errors import UsageError
from edge.core.files import check_space, staged_dir
from edge.flows.cloud.batch import PLATFORM, ServedTail, prepare
from edge.flows.cloud.tensors import TensorSpec

RUNTIME = "edge.flows.cloud.mlserver.runtime.TailRuntime"
#: where TailRuntime lived when earlier repositories were exported (still served)
LEGACY_RUNTIMES = ("partition.cloud.runtime.TailRuntime",)
SETTINGS = "model-settings.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class Batching:
    """Dynamic batching: the largest merged batch and how long a request may wait for one."""

    max_batch: int = 16
    max_delay_ms: float = 2.0


def write_repository(tails: Mapping[str, Path], out: Path, batching: Batching,
                     threads: int = 0) -> list[ServedTail]:
    """Write the repository for ``tails`` (served name -> ONNX); the served tails, by name.

    It is written whole into a folder beside ``out`` that then takes its place (an earlier
    repository there is replaced), so a full disk or a failure leaves no half of one."""
    _check_out(out)
    size = sum(source.stat().st_size for source in tails.values())  # at least the tails
    check_space(out, size)
    with staged_dir(out, size) as staging:
        served = [_write_tail(staging / name, name, source, batching, threads)
                  for name, source in sorted(tails.items())]
        (staging / "settings.json").write_text(json.dumps(server_settings(), indent=2) + "\n",
                                               encoding="utf-8")
        (staging / "inference-service.yaml").write_text(inference_service(out.name),
                                                        encoding="utf-8")
    return [replace(t, onnx=out / t.onnx.relative_to(staging)) for t in served]


def _check_out(out: Path) -> None:
    """Refuse a file, or a folder holding something other than an earlier repository."""
    if out.is_symlink() or out.exists() and not out.is_dir():
        raise UsageError(f"--export-repository {out} is not a folder; choose another path")
    if out.is_dir() and any(out.iterdir()) and not is_repository(out):
        raise UsageError(f"--export-repository {out} holds files that are not a model "
                         "repository; choose an empty or new folder")
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"--export-repository {out}: cannot write into {parent}")


def _write_tail(folder: Path, name: str, source: Path, batching: Batching,
                threads: int) -> ServedTail:
    """One served tail's folder: the model, Triton's config, MLServer's settings."""
    (folder / "1").mkdir(parents=True)
    tail = prepare(name, source, folder / "1" / "model.onnx", batching.max_batch)
    (folder / "config.pbtxt").write_text(triton_config(tail, batching), encoding="utf-8")
    settings = model_settings(tail, batching, threads)
    (folder / SETTINGS).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return tail


def model_settings(tail: ServedTail, batching: Batching, threads: int) -> dict[str, Any]:
    """MLServer's model-settings.json for one tail."""
    doc: dict[str, Any] = {
        "name": tail.name, "implementation": RUNTIME, "platform": PLATFORM, "versions": ["1"],
        "inputs": [s.to_json() for s in tail.inputs],
        "outputs": [s.to_json() for s in tail.outputs],
        "parameters": {"uri": "./1/model.onnx", "version": "1", "extra": {"threads": threads}},
    }
    if tail.max_batch > 1:
        doc |= {"max_batch_size": tail.max_batch,
                "max_batch_time": round(batching.max_delay_ms / 1e3, 6)}
    return doc


def server_settings() -> dict[str, Any]:
    """MLServer's settings.json: inference in the server process (see docs/architecture.md)."""
    return {"parallel_workers": 0, "metrics_endpoint": None}


def triton_config(tail: ServedTail, batching: Batching) -> str:
    """Triton's config.pbtxt: the batch dim leaves ``dims`` when max_batch_size > 0."""
    batched = tail.max_batch > 1
    lines = [f'name: "{tail.name}"', f'platform: "{PLATFORM}"',
             f"max_batch_size: {tail.max_batch if batched else 0}"]
    lines += _pbtxt_tensors("input", tail.inputs, batched)
    lines += _pbtxt_tensors("output", tail.outputs, batched)
    if batched:
        delay_us = int(round(batching.max_delay_ms * 1e3))
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {delay_us}", "}"]
    lines += ["instance_group [", "  {", "    kind: KIND_CPU", "    count: 1", "  }", "]"]
    return "\n".join(lines) + "\n"


def _pbtxt_tensors(key: str, specs: Sequence[TensorSpec], batched: bool) -> list[str]:
    out = [f"{key} ["]
    for k, spec in enumerate(specs):
        dims = spec.shape[1:] if batched else spec.shape
        out += ["  {", f"    name: {json.dumps(spec.name)}",
                f"    data_type: TYPE_{spec.datatype}",
                f"    dims: [ {', '.join(str(d) for d in dims)} ]",
                "  }" + ("," if k < len(specs) - 1 else "")]
    return out + ["]"]


def inference_service(folder: str) -> str:
    """A KServe InferenceService serving the repository with KServe's Triton runtime."""
    name = re.sub(r"[^a-z0-9-]+", "-", folder.lower()).strip("-")[:45] or "edge-tail"
    doc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
           "metadata": {"name": name if name[0].isalpha() else f"edge-{name}"},
           "spec": {"predictor": {
               "minReplicas": 1, "maxReplicas": 4,
               "model": {"modelFormat": {"name": "triton"}, "protocolVersion": "v2",
                         "runtime": "kserve-tritonserver",
                         "storageUri": f"s3://CHANGE-ME/{folder}",
                         "resources": {"requests": {"cpu": "2", "memory": "2Gi"},
                                       "limits": {"cpu": "4", "memory": "4Gi"}}}}}}
    head = ("# Copy this folder to object storage, set storageUri, then: kubectl apply -f "
            "inference-service.yaml\n")
    return head + yaml.safe_dump(doc, sort_keys=False)


def is_repository(path: Path) -> bool:
    """Whether ``path`` is an exported repository (served as it is, settings and all)."""
    return path.is_dir() and any(path.glob(f"*/{SETTINGS}"))


def servable(repository: Path, scratch: Path) -> Path:
    """``repository``, or when it was exported naming TailRuntime's earlier module, a mirror in
    ``scratch`` (its files linked, the settings naming today's runtime)."""
    if not any(_legacy(f) for f in repository.glob(f"*/{SETTINGS}")):
        return repository
    mirror = scratch / "models"
    for item in sorted(repository.rglob("*")):
        target = mirror / item.relative_to(repository)
        target.parent.mkdir(parents=True, exist_ok=True)
        if item.is_dir():
            target.mkdir(exist_ok=True)
        elif item.name == SETTINGS and _legacy(item):
            settings = json.loads(item.read_text(encoding="utf-8")) | {"implementation": RUNTIME}
            target.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        else:
            target.symlink_to(item.resolve())
    return mirror


def _legacy(settings: Path) -> bool:
    try:
        return json.loads(settings.read_text(encoding="utf-8")).get("implementation") \
            in LEGACY_RUNTIMES
    except (OSError, ValueError, AttributeError):
        return False
