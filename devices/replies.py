"""Every agent reply checked before edge uses a number of it: one schema per agent command.

A device (or whatever answers in its place) is not trusted with numbers: times, sizes and counts
must be finite, non-negative and within bounds (a p50 of NaN, -1 or 1e308, ``cores: 10**12``,
2,000,000 rounds), and the keys edge reads must be there with their types. A reply that breaks
its schema is a DeviceError (exit 3) naming the device, the command and the field, raised before
any work sized by the reply starts. Keys edge does not read are kept as they are.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edge.core.errors import DeviceError

__all__ = ["MAX_MS", "MAX_ROUNDS", "check_reply"]

#: The longest time a device may report for one run or load: a day, in ms.
MAX_MS = 86_400_000.0
#: The most round medians, releases, files or history entries one reply may list.
MAX_ROUNDS = 10_000
MAX_ITEMS = 10_000
#: The longest string a reply may hold where edge shows or stores it.
MAX_TEXT = 4096

Ms = Annotated[float, Field(ge=0, le=MAX_MS, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=10**9)]
Bytes = Annotated[int, Field(ge=0, le=2**63 - 1)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Names = Annotated[list[Text], Field(max_length=MAX_ITEMS)]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)


class DeviceInfo(_Reply):
    """The agent's description of the device."""

    cores: Annotated[int, Field(ge=1, le=4096)] | None = None
    mem_total_mb: Annotated[float, Field(ge=0, le=2**40)] | None = None
    machine: Text | None = None
    cpu: Text | None = None


class BenchEntry(_Reply):
    """One model's timing (or why it dropped out)."""

    model: Text | None = None
    runtime: Text
    error: Text | None = None
    runs: Annotated[int, Field(ge=1, le=10**9)] | None = None
    warmup: Count | None = None
    threads: Annotated[int, Field(ge=0, le=4096)] | None = None
    p50_ms: Ms | None = None
    p90_ms: Ms | None = None
    p99_ms: Ms | None = None
    mean_ms: Ms | None = None
    load_ms: Ms | None = None
    round_ms: Annotated[list[Ms], Field(max_length=MAX_ROUNDS)] | None = None
    throughput_fps: Annotated[float, Field(ge=0, le=1e9)] | None = None
    runtime_version: Text | None = None

    @model_validator(mode="after")
    def _timed(self) -> BenchEntry:
        needed = ("runs", "warmup", "threads", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
                  "load_ms")
        missing = [k for k in needed if getattr(self, k) is None]
        if self.error is None and missing:
            raise ValueError(f"{missing[0]} is missing")
        return self


class Reading(_Reply):
    """One sensor reading (power, temperature...): a finite value and where it was read."""

    value: Annotated[float, Field(ge=-1e6, le=1e6)] | None = None
    source: Text | Annotated[list[Text], Field(max_length=64)] | None = None


class Phase(_Reply):
    """The sensors before, during or after the timed run."""

    power_w: Reading | None = None


class Bench(_Reply):
    results: Annotated[list[BenchEntry], Field(min_length=1, max_length=MAX_ITEMS)]
    rounds: Annotated[int, Field(ge=0, le=MAX_ROUNDS)] | None = None
    peak_rss_mb: Annotated[float, Field(ge=0, le=2**40)] | None = None
    device: DeviceInfo | None = None
    metrics: dict[Annotated[str, Field(max_length=64)], Phase | None] | None = None


class Health(_Reply):
    healthy: bool
    runtime: Text | None = None
    load_ms: Ms | None = None
    run_ms: Ms | None = None


class Verify(_Reply):
    release: Text
    present: Names
    missing: Names
    names: Names
    free_bytes: Bytes | None = None
    complete: bool


class Probe(_Reply):
    agent: int | Text | None = None
    device: DeviceInfo | None = None
    runtimes: dict[Text, Any] = Field(default_factory=dict, max_length=1000)


class Switch(_Reply):
    active: Text
    previous: Text | None = None
    changed: bool | None = None
    slot: Text | None = None
    others: Names = Field(default_factory=list)  # the device's other slots in use
    adopted: bool | None = None  # a release from before slots became the slot's previous


class Release(_Reply):
    """One installed release as the agent lists it."""

    release: Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")]
    model: Text | None = None
    complete: bool
    active: bool
    previous: bool | None = None
    size_bytes: Bytes
    files: Annotated[dict[Text, Bytes], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=dict)
    installed: Text | None = None
    last_active: Text | None = None
    artifact: Text | None = None
    current_in: Names = Field(default_factory=list)  # the slots whose current release it is


class Slot(_Reply):
    """One model's slot as the agent lists it."""

    slot: Text
    active: Text | None = None
    previous: Text | None = None
    artifact: Text | None = None


class Releases(_Reply):
    slot: Text | None = None
    slots: Annotated[list[Slot], Field(max_length=MAX_ITEMS)] = Field(default_factory=list)
    active: Text | None = None
    previous: Text | None = None
    releases: Annotated[list[Release], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list)
    history: Annotated[list[dict[str, Any]], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list)


class Prune(_Reply):
    kept: Names = Field(default_factory=list)
    removed: Names
    stale_removed: Names = Field(default_factory=list)


class Space(_Reply):
    free_bytes: Bytes


class Install(_Reply):
    installed: Text
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class CorunPhase(_Reply):
    """One model's frames in one phase of a co-run."""

    frames: Count
    served: Count
    dropped: Count
    per_s: Annotated[float, Field(ge=0, le=1e9)]
    p50_ms: Ms | None = None
    p99_ms: Ms | None = None
    max_ms: Ms | None = None
    service_p50_ms: Ms | None = None

    @model_validator(mode="after")
    def _counted(self) -> CorunPhase:
        if self.served + self.dropped > self.frames:
            raise ValueError("served and dropped frames exceed the frames due")
        if self.served and self.p99_ms is None:
            raise ValueError("p99_ms is missing")
        return self


class CorunJob(_Reply):
    name: Text
    runtime: Text
    load_ms: Ms
    threads: Annotated[int, Field(ge=0, le=4096)]
    alone: CorunPhase | None = None
    together: CorunPhase
    peak_mb: Annotated[float, Field(ge=0, le=2**40)]


class Corun(_Reply):
    jobs: Annotated[list[CorunJob], Field(min_length=1, max_length=64)]
    peak_mb: Annotated[float, Field(ge=0, le=2**40)]
    seconds: Annotated[float, Field(gt=0, le=86_400)]


class PackSwitch(_Reply):
    slots: Annotated[list[Switch], Field(min_length=1, max_length=64)]


#: Agent command -> its reply's schema (a command not listed is not read for numbers).
SCHEMAS: dict[str, type[_Reply]] = {
    "bench": Bench, "health": Health, "verify": Verify, "probe": Probe, "activate": Switch,
    "rollback": Switch, "releases": Releases, "prune": Prune, "space": Space,
    "install": Install, "corun": Corun, "activate-pack": PackSwitch,
}


def check_reply(command: str, reply: dict[str, Any], label: str) -> dict[str, Any]:
    """``reply`` as it came, once it fits ``command``'s schema; else DeviceError naming the
    device ``label``, the command and the first field that does not fit."""
    schema = SCHEMAS.get(command)
    if schema is None:
        return reply
    try:
        schema.model_validate(reply)
    except ValidationError as exc:
        raise DeviceError(f"{label}: agent {command} replied {_first(exc)}") from None
    return reply


def _first(exc: ValidationError) -> str:
    """The first problem of a validation error as ``field.path: what is wrong (got VALUE)``."""
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "its reply"
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    what = error["msg"].removeprefix("Value error, ").lower()
    return f"{where}: {what} (got {shown})"
