"""Make a tail batchable for dynamic batching, and prove it: batch 1 and the max batch agree.

A tail exported for one frame has a leading dim of 1 on every input and output. Dynamic batching
stacks requests along that dim, so the served copy declares it dynamic ("batch") and is run at
batch 1 and at the max batch on random inputs: every row of the batched run must equal the
single-row run of the same input. A tail whose tensors do not all lead with a batch dim (a fixed
[2] side input, say), or that fails the check (a Reshape baked to batch 1), is served unbatched,
and the reason is kept.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edge.flows.cloud.tensors import TensorSpec
from partition.kserve import KSERVE_TO_NP, ORT_TO_KSERVE

PLATFORM = "onnxruntime_onnx"


@dataclass(frozen=True, kw_only=True, slots=True)
class ServedTail:
    """One tail as served: its file, tensors and dynamic-batching limit (0: unbatched)."""

    name: str
    onnx: Path
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch: int
    note: str  # why batching is off, "" when on or not asked


def prepare(name: str, source: Path, target: Path, max_batch: int) -> ServedTail:
    """Write the served copy of ``source`` to ``target``; batch-dynamic when it verifies."""
    model = onnx.load(str(source))
    plain = _served(name, target, model, 0, "")
    if max_batch <= 1:
        shutil.copyfile(source, target)
        return replace(plain, note="dynamic batching off")
    why = _not_batchable(model)
    if not why:
        relaxed = _relax(model)
        onnx.save(relaxed, str(target))
        why = _disagrees(target, max_batch)
        if not why:
            return _served(name, target, relaxed, max_batch, "")
    shutil.copyfile(source, target)
    return replace(plain, note=why)


def _served(name: str, path: Path, model: onnx.ModelProto, max_batch: int,
            note: str) -> ServedTail:
    inputs, outputs = tensor_specs(model)
    return ServedTail(name=name, onnx=path, inputs=inputs, outputs=outputs,
                      max_batch=max_batch, note=note)


def tensor_specs(model: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...],
                                                  tuple[TensorSpec, ...]]:
    """The model's inputs (initializers excepted) and outputs as KServe v2 specs; ValueError
    for a tensor KServe v2 cannot carry."""
    inits = {i.name for i in model.graph.initializer}
    inputs = tuple(_spec(v) for v in model.graph.input if v.name not in inits)
    return inputs, tuple(_spec(v) for v in model.graph.output)


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor = value.type.tensor_type
    ort_type = f"tensor({onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name})"
    ort_type = ort_type.replace("float32", "float").replace("float64", "double")
    if ort_type not in ORT_TO_KSERVE:
        raise ValueError(f"tensor {value.name!r} has a type KServe v2 cannot carry ({ort_type})")
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return TensorSpec(name=value.name, datatype=ORT_TO_KSERVE[ort_type], shape=dims)


def _not_batchable(model: onnx.ModelProto) -> str:
    """Why the leading dim cannot be the batch ("" when every input and output leads with 1/N)."""
    inits = {i.name for i in model.graph.initializer}
    values = [v for v in model.graph.input if v.name not in inits] + list(model.graph.output)
    for value in values:
        dims = value.type.tensor_type.shape.dim
        if not dims or (dims[0].HasField("dim_value") and dims[0].dim_value != 1):
            return f"tensor {value.name!r} has no leading batch dim"
    return ""


def _relax(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose inputs and outputs lead with a dynamic "batch" dim."""
    relaxed = onnx.ModelProto()
    relaxed.CopyFrom(model)
    inits = {i.name for i in relaxed.graph.initializer}
    for value in [*relaxed.graph.input, *relaxed.graph.output]:
        if value.name not in inits:
            value.type.tensor_type.shape.dim[0].dim_param = "batch"
    del relaxed.graph.value_info[:]  # intermediate shapes were inferred at batch 1
    return relaxed


def _disagrees(path: Path, max_batch: int) -> str:
    """"" when batch-``max_batch`` rows equal batch-1 runs of the same inputs, else why not."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        batch = _random_feeds(session, max_batch)
        together = session.run(None, batch)
        alone = [session.run(None, {k: v[i:i + 1] for k, v in batch.items()})
                 for i in range(max_batch)]
    except Exception as exc:  # noqa: BLE001 - ORT refuses a batch it cannot run
        return f"the tail does not run at batch {max_batch}: {str(exc).splitlines()[0]}"
    for k, whole in enumerate(together):
        rows = np.concatenate([a[k] for a in alone])
        scale = float(np.abs(rows).max()) if rows.size else 0.0
        if whole.shape != rows.shape or not np.allclose(whole, rows, rtol=1e-3,
                                                        atol=1e-4 * max(scale, 1.0)):
            return f"batch {max_batch} differs from batch 1 on output {k}"
    return ""


def _random_feeds(session: object, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():  # type: ignore[attr-defined]
        dtype = KSERVE_TO_NP[ORT_TO_KSERVE[arg.type]]
        shape = (batch, *[d if isinstance(d, int) and d > 0 else 1 for d in arg.shape[1:]])
        if dtype.kind == "f":
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[arg.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds
