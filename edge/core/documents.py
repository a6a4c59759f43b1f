"""edge's documents on disk, read and written in one place: each kind is a pydantic model with a
version field and a JSON Schema.

| kind       | file                                   | model              | version key |
|------------|----------------------------------------|--------------------|-------------|
| manifest   | BUNDLE/manifest.json                   | values.Bundle      | ``format``  |
| split      | SPLIT_DIR/split.yaml                   | SplitDocument      | ``version`` |
| result     | one line of results/DEVICE/SHA16.jsonl | ResultRecord       | ``version`` |
| profile    | a device profile (YAML)                | profile.Profile    | ``version`` |
| pack       | PACK.yaml (``edge pack``)              | PackDocument       | ``version`` |

A document of an unknown version is refused with a one-line error that names the versions this
edge reads; so is one that does not match its model (the first problem is named, never the
file's content). The device agent keeps its own stdlib reader of ``history.json`` on the
device (it runs on Python 3.8 without pydantic).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edge.core.docfile import check_depth, check_version, read_data
from edge.core.errors import UsageError
from edge.core.files import write_atomic
from edge.core.json_value import _to_json, adapter
from edge.core.profile import Profile, Serving, profile_schema
from edge.core.values import Bundle, DeployReport

__all__ = ["KINDS", "MAX_MS", "BandRow", "CutDocument", "CutTensor", "EnergyDocument", "InputSpec",
           "Kind", "PackDocument", "PackModel", "Predicted", "ResultRecord", "ServingDocument",
           "SplitDocument", "SplitHalves", "dump", "parse", "read_json", "read_yaml", "schema",
           "write_json", "write_yaml"]

#: The most bytes a cut may send one way (1 PiB: more is no tensor).
MAX_BYTES = 2**50


class _Doc(BaseModel):
    """A document part: frozen; keys a later version adds are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class SplitHalves(_Doc):
    """The head and tail files (relative to the split directory) and the tensors between them."""

    head: str | None
    tail: str | None
    cut_tensors: tuple[str, ...] | None = None  # version 1: the tail's inputs
    head_inputs: tuple[str, ...]
    head_outputs: tuple[str, ...]
    tail_inputs: tuple[str, ...]
    tail_outputs: tuple[str, ...]
    outputs: tuple[str, ...]


class CutTensor(_Doc):
    """A tensor sent from the device to the cloud (the name on the wire, and the model's)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    name: str
    shape: tuple[int | str | None, ...]
    dtype: str
    bytes: int | None = None
    tensor: str | None = None


class CutDocument(_Doc):
    """One precomputed cut a running client may switch to (finite times, bytes up to
    MAX_BYTES)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)
    id: str
    kind: Literal["split", "all-edge", "all-cloud"]
    model: str = ""
    edge_ms: float
    cloud_ms: float
    up_bytes: int = Field(ge=0, le=MAX_BYTES)
    down_bytes: int = Field(ge=0, le=MAX_BYTES)
    split: SplitHalves


class EnergyDocument(_Doc):
    """The device energy model a split was planned with."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)
    idle_w: float = Field(ge=0)
    max_w: float = Field(ge=0)
    tx_nj_per_bit: float = Field(ge=0)
    assumed: bool = False


class Predicted(_Doc):
    """The chosen cut's predicted times (ms) and the link it was planned for; more keys kept."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    edge_ms: float
    transfer_ms: float
    cloud_ms: float
    total_ms: float | None = None
    bandwidth_mbps: float | None = Field(default=None, gt=0)
    downlink_mbps: float | None = Field(default=None, gt=0)
    rtt_ms: float | None = Field(default=None, ge=0)
    objective: Literal["latency", "energy", "throughput"] | None = None
    energy: EnergyDocument | None = None


class InputSpec(_Doc):
    """A model input the device must feed: name, shape (symbolic dims as names), dtype."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str


class BandRow(_Doc):
    """A row of the bandwidth table: the best cut over a bandwidth range (Mbit/s)."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    min_mbps: float = Field(ge=0)
    max_mbps: float = Field(ge=0)
    kind: Literal["split", "all-edge", "all-cloud"]
    cut: tuple[str, ...] = ()
    predicted_ms: float | None = None
    cut_id: str | None = None


class ServingDocument(Serving):
    """How serve-cloud serves this split: the ``serving`` of the ``--cloud`` profile it was
    planned for (``cloud`` names that profile); serve-cloud's flags override it."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)
    cloud: str | None = None


class SplitDocument(_Doc):
    """``split.yaml``: what ``edge partition`` wrote and ``serve-cloud``/``run-split`` read."""

    version: Literal[1, 2] = 2
    split: SplitHalves
    cut: tuple[CutTensor, ...]
    predicted: Predicted
    compression: Literal["none", "fp16", "int8"] = "none"
    inputs: tuple[InputSpec, ...] = ()
    cuts: tuple[CutDocument, ...] = ()
    bandwidth_table: tuple[BandRow, ...]
    serving: ServingDocument | None = None


class ResultRecord(_Doc):
    """One measurement kept on this host (a line of ``results/DEVICE/SHA16.jsonl``); its
    times are numbers of ms from 0 to MAX_MS (a NaN, Inf or 1e308 is no measurement)."""

    version: Literal[1] = 1
    kept_at: str = ""
    regressed: bool = False
    report: DeployReport

    @pydantic.model_validator(mode="after")
    def _finite_times(self) -> ResultRecord:
        bench = self.report.bench
        for name in _TIMES:
            if not (math.isfinite(value := getattr(bench, name)) and 0 <= value <= MAX_MS):
                raise ValueError(f"report.bench.{name} is not a time (0 to {MAX_MS:g} ms)")
        return self


#: A model's slot name on a device (as ``edge deploy --name``).
SLOT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
#: The most models one pack holds.
MAX_PACK = 16


class PackModel(_Doc):
    """One model of a pack: its file and data (relative to the pack file's folder), its rate
    and latency objective, its priority (1 first) and its slot name on the device."""

    model: str = Field(min_length=1, max_length=4096,
                       description="a model file, or a bundle folder edge optimize wrote")
    name: str | None = Field(default=None, pattern=SLOT_PATTERN,
                             description="its slot on the device [the model file's stem]")
    calib: str | None = Field(default=None, min_length=1, max_length=4096)
    eval: str | None = Field(default=None, min_length=1, max_length=4096)
    shape: dict[str, tuple[int, ...]] | None = Field(
        default=None, description="input name -> fixed shape (as optimize's --shape)")
    rate: float | None = Field(default=None, gt=0, le=100_000, allow_inf_nan=False,
                               description="inferences per second [1, with only p99_ms]")
    p99_ms: float | None = Field(default=None, gt=0, le=3_600_000, allow_inf_nan=False,
                                 description="the 99th percentile latency it must keep, ms")
    priority: int = Field(default=1, ge=1, le=100, description="1 first (who is named first)")

    @model_validator(mode="after")
    def _an_objective(self) -> PackModel:
        if self.rate is None and self.p99_ms is None:
            raise ValueError("give a rate (inferences per second) or p99_ms, or both")
        return self


class PackDocument(_Doc):
    """``edge pack``'s PACK.yaml: the models one device runs together."""

    version: int = 1
    name: str | None = Field(default=None, pattern=SLOT_PATTERN)
    models: tuple[PackModel, ...] = Field(min_length=1, max_length=MAX_PACK)


_TIMES = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
#: The longest time a kept result may hold (11.6 days for one inference: none is longer).
MAX_MS = 1e9


@dataclass(frozen=True, kw_only=True, slots=True)
class Kind:
    """A document kind: its model, where its version lives, and the versions this edge reads."""

    name: str
    model: type
    version_key: str
    versions: tuple[int, ...]
    absent: int | None = None  # the version of a document written before it had the key


KINDS: dict[str, Kind] = {
    "manifest": Kind(name="manifest", model=Bundle, version_key="format", versions=(1,)),
    "split": Kind(name="split.yaml", model=SplitDocument, version_key="version", versions=(1, 2)),
    "result": Kind(name="result", model=ResultRecord, version_key="version", versions=(1,),
                   absent=1),
    "profile": Kind(name="profile", model=Profile, version_key="version", versions=(1,),
                    absent=1),
    "pack": Kind(name="pack", model=PackDocument, version_key="version", versions=(1,),
                 absent=1),
}


def parse(kind: str, data: Any, where: str) -> Any:
    """``data`` (parsed JSON/YAML) validated as a ``kind`` document; UsageError naming the
    first problem otherwise."""
    spec = KINDS[kind]
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a {spec.name} (expected a mapping, got "
                         f"{type(data).__name__})")
    check_depth(data, where)
    check_version(data, spec.name, spec.version_key, spec.versions, spec.absent, where)
    try:
        return _validator(spec.model)(data)
    except pydantic.ValidationError as exc:
        raise UsageError(f"{where}: not a valid {spec.name}: {_problem(exc)}") from None


def dump(kind: str, value: Any) -> dict[str, Any]:
    """A document as a JSON-ready dict, with its version."""
    spec = KINDS[kind]
    if isinstance(value, BaseModel):  # the keys it was given (a read document stays as read)
        data = _to_json(value.model_dump(exclude_unset=True))
    else:
        data = value.to_json()
    data.setdefault(spec.version_key, max(spec.versions))
    return data  # type: ignore[no-any-return]


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a document kind."""
    spec = KINDS[kind]
    if spec.model is Profile:
        doc = profile_schema()  # a profile file may also say `extends:`
    elif issubclass(spec.model, BaseModel):
        doc = spec.model.model_json_schema()
    else:
        doc = adapter(spec.model).json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc,
            "title": f"edge {spec.name}"}


def read_json(kind: str, path: Path) -> Any:
    """A JSON document file, parsed and validated."""
    return parse(kind, read_data(path, "json"), str(path))


def read_yaml(kind: str, path: Path) -> Any:
    """A YAML document file, parsed and validated."""
    return parse(kind, read_data(path, "yaml"), str(path))


def write_json(kind: str, path: Path, value: Any) -> Path:
    """Write a document as JSON atomically (a reader sees the old file or the new one)."""
    text = json.dumps(dump(kind, value), indent=2) + "\n"
    return write_atomic(path, text)


def write_yaml(kind: str, path: Path, value: Any) -> Path:
    """Write a document as YAML atomically."""
    return write_atomic(path, yaml.safe_dump(dump(kind, value), sort_keys=False))


def _validator(model: type) -> Callable[[Any], Any]:
    if issubclass(model, BaseModel):
        return model.model_validate
    return adapter(model).validate_python


def _problem(exc: pydantic.ValidationError) -> str:
    """The first validation problem: where in the document and what, never the value."""
    first = exc.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top)"
    return f"{where}: {first['msg']}"
