"""Device profiles: a validated, frozen description of a device, loaded from YAML files.

A profile is data. The catalog ships in the ``profiles`` package; a user profile file may
``extends:`` a catalog entry and override any key.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from edge.core.docfile import check_version, read_data
from edge.core.errors import UsageError
from edge.core.files import inside
from edge.core.plugins import plugin_names

__all__ = [
    "CATALOG_RUNTIMES",
    "Budgets",
    "Profile",
    "Serving",
    "catalog_ids",
    "known_runtimes",
    "load_profile",
    "profile_schema",
    "validate_file",
]

#: Runtime names the catalog's devices use; targets/ implements a subset (targets.runtimes()).
CATALOG_RUNTIMES = (
    "tflite",
    "onnxruntime",
    "openvino",
    "nnapi",
    "tensorrt",
    "edgetpu",
    "coreml",
    "qnn",
)
#: A runtime or target name as a profile lists it (checked against known_runtimes()).
Runtime = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]
#: Profile format versions this edge reads.
VERSIONS = (1,)
Precision = Literal["fp32", "fp16", "bf16", "int8", "int16", "int4"]


@functools.cache
def known_runtimes() -> tuple[str, ...]:
    """Names a profile may list: the catalog's runtimes, then every runtime a plug-in registers
    and its targets (``openvino-npu``; a new runtime folder needs no edit here)."""
    return (*CATALOG_RUNTIMES, *sorted(set(plugin_names()) - set(CATALOG_RUNTIMES)))


def _known(value: str) -> str:
    if value not in known_runtimes():
        raise ValueError(f"unknown runtime {value!r}: choose one of {', '.join(known_runtimes())}")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Compute(_Frozen):
    """The CPU: architecture, cores, clock and, where known, measured peak throughput."""

    arch: Literal["aarch64", "armv7l", "x86_64", "riscv64", "armv8.1-m"]
    cpu: str = Field(description="CPU model, e.g. 'Cortex-A72'")
    cores: int = Field(gt=0)
    clock_ghz: float = Field(gt=0)
    isa: tuple[str, ...] = Field(default=(), description="SIMD extensions, e.g. neon, avx512_vnni")
    peak_gops: dict[Precision, float] = Field(
        default_factory=dict, description="Peak GOPS of all cores per precision, where known"
    )
    threads: int | None = Field(default=None, gt=0, description="Threads to run models with")

    @property
    def default_threads(self) -> int:
        """Threads a runtime should use on this device."""
        return self.threads or self.cores


class Memory(_Frozen):
    """RAM, and how much of it a model may use."""

    ram_mb: int = Field(gt=0)
    model_budget_mb: int = Field(gt=0, description="Memory a deployed model may use")


class Storage(_Frozen):
    """Where artifacts live on the device."""

    kind: str = Field(description="emmc, microsd, nvme, ufs, ...")
    capacity_gb: float = Field(gt=0)


class Power(_Frozen):
    """Board power draw, watts."""

    idle_w: float = Field(ge=0)
    max_w: float = Field(gt=0)


class Accelerator(_Frozen):
    """An accelerator and the runtime that reaches it."""

    kind: Literal["gpu", "npu", "tpu", "dsp", "vpu"]
    name: str
    tops: float | None = Field(default=None, gt=0, description="Peak TOPS at its best precision")
    precisions: tuple[Precision, ...]
    runtime: Runtime
    memory_mb: int | None = Field(default=None, gt=0,
                                  description="Memory of its own (SRAM, VRAM), MB; null: shared")
    cores: int = Field(default=1, ge=1, le=64,
                       description="Cores a model can be placed on alone (the RK3588 NPU has 3, "
                                   "chosen by rknn's core mask); tops is for all of them")
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Settings its runtime's converter and loader read (rknn: platform; ethos-u: "
                    "config, system_config, memory_mode; openvino: device; tflite: delegate)")

    @field_validator("runtime")
    @classmethod
    def _a_runtime(cls, value: str) -> str:
        return _known(value)

    @field_validator("options")
    @classmethod
    def _plain_options(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", key) or not re.fullmatch(
                    r"[^\x00-\x1f\x7f]{1,512}", text):
                raise ValueError(f"option {key!r}: names are lowercase words, values one line "
                                 "of at most 512 characters")
        return value


class Link(_Frozen):
    """The device's network link to the cloud."""

    kind: str = Field(description="ethernet, wifi5, lte, 5g, datacenter, ...")
    uplink_mbps: float = Field(gt=0)
    downlink_mbps: float = Field(gt=0)
    rtt_ms: float = Field(ge=0)
    tx_nj_per_bit: float | None = Field(
        default=None,
        gt=0,
        description="Radio energy per bit sent, nJ (partition's energy objective); "
        "null: an assumed default per kind (partition.solve.TX_NJ_PER_BIT)",
    )


_PRINTABLE = r"[^\x00-\x1f\x7f]+"  # one non-empty line: no newline, NUL or other control


class Access(_Frozen):
    """How to reach the device and run code on it."""

    #: ``none``: edge cannot reach it (a bare-metal microcontroller: no Linux, no Python); its
    #: artifacts are built and verified here, and its figures are its vendor's estimates
    transport: Literal["ssh", "local", "adb", "none"] = "ssh"
    user: str | None = None
    host: str | None = None
    port: int = Field(default=22, gt=0, lt=65536)
    python: str = Field(default="python3", description="Python on the device that runs the agent")
    work_dir: str = Field(default="~/.edge", description="Directory on the device edge owns")

    @field_validator("user", "host", "python", "work_dir")
    @classmethod
    def _one_line(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not re.fullmatch(_PRINTABLE, value):
            what = "the device python" if info.field_name == "python" else info.field_name
            raise ValueError(f"{what} must be one non-empty line without control characters "
                             "(newline, tab, NUL)")
        return value


class Serving(_Frozen):
    """How ``edge serve-cloud`` serves a tail when this profile is a split's ``--cloud``."""

    max_batch: int = Field(default=16, ge=1, le=4096,
                           description="Dynamic batching: most requests merged into one run "
                                       "(1: off)")
    max_delay_ms: float = Field(default=2.0, ge=0, le=1000,
                                description="Dynamic batching: longest wait for a batch, ms")
    processes: int | None = Field(default=None, ge=1, le=256,
                                  description="Server processes (unset: the serving host's "
                                              "cores, at most 8)")


class Budgets(_Frozen):
    """What a model may cost on this device; ``edge optimize`` chooses within it (the
    --latency-budget / --size-budget flags override)."""

    latency_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                     description="Longest p50 latency a model may take, ms")
    size_mb: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                  description="Most disk space a model's files may take, MB "
                                              "(2**20 bytes)")

    @field_validator("latency_ms", "size_mb", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        if isinstance(value, bool):  # YAML's yes/no/true: not a budget
            raise ValueError("must be a number, not true/false")
        return value


class Profile(_Frozen):
    """Everything edge knows about a device."""

    version: int = Field(default=1, description="Profile format version (this edge reads 1)")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    source: str = Field(description="Where the numbers come from (datasheet, measurement)")
    compute: Compute
    memory: Memory
    storage: Storage
    power: Power
    accelerators: tuple[Accelerator, ...] = ()
    runtimes: tuple[Runtime, ...] = Field(min_length=1, description="In order of preference")
    link: Link
    access: Access = Access()
    serving: Serving = Serving()
    budgets: Budgets = Budgets()

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in VERSIONS:
            raise ValueError(f"profile version {value} is not one this edge reads "
                             f"({', '.join(map(str, VERSIONS))}); a newer edge may have written it")
        return value

    @field_validator("runtimes")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("runtimes must not repeat")
        return tuple(_known(v) for v in value)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return self.model_dump(mode="json")


def profile_schema() -> dict[str, Any]:
    """The JSON Schema of a profile file."""
    schema = Profile.model_json_schema()
    schema["properties"]["extends"] = {
        "type": "string",
        "description": "Catalog id or file of a profile whose keys this one overrides",
    }
    return schema


def catalog_ids() -> list[str]:
    """Ids of the shipped profiles, sorted."""
    return sorted(p.name[: -len(".yaml")] for p in _catalog_dir().iterdir() if _is_yaml(p))


def load_profile(ref: str | Path) -> Profile:
    """Load a profile by catalog id or file path; raise UsageError naming what is wrong."""
    path = _resolve(ref)
    return _validate(_read_merged(path, seen=()), path)


def validate_file(path: str | Path) -> Profile:
    """Validate one profile file (raises UsageError naming the file and key)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"profile file {path} does not exist")
    return _validate(_read_merged(path, seen=()), path)


def _catalog_dir() -> Any:
    return resources.files("profiles")


def _is_yaml(entry: Any) -> bool:
    return entry.name.endswith(".yaml") and not entry.name.startswith("_")


def _resolve(ref: str | Path) -> Path:
    text = str(ref)
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        if not path.is_file():
            raise UsageError(f"profile file {path} does not exist")
        return path
    entry = _catalog_dir() / f"{text}.yaml"
    if not entry.is_file():
        ids = ", ".join(catalog_ids())
        raise UsageError(f"unknown profile '{text}': choose one of {ids}, or give a profile file")
    return Path(str(entry))


def _read_merged(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    if path in seen:
        raise UsageError(f"{path}: extends: cycle through {' -> '.join(map(str, seen))}")
    data = _read(path)
    base_ref = data.pop("extends", None)
    data.setdefault("id", path.stem)
    if base_ref is None:
        return data
    if not isinstance(base_ref, str):
        raise UsageError(f"{path}: extends: must be a profile id or file name")
    base_path = _resolve_relative(base_ref, path)
    base = _read_merged(base_path, seen + (path,))
    return _deep_merge(base, data)


def _resolve_relative(ref: str, child: Path) -> Path:
    """``extends:`` names a catalog id or a file in the child's own folder (never outside it)."""
    if Path(ref).suffix not in (".yaml", ".yml", ".json") and "/" not in ref and "\\" not in ref:
        return _resolve(ref)
    sibling = inside(child.parent, ref, f"{child}: extends")
    if not sibling.is_file():
        raise UsageError(f"{child}: extends: {ref} does not exist beside it")
    return sibling


def _read(path: Path) -> dict[str, Any]:
    """A profile file's mapping (JSON or YAML), read by the one document reader."""
    data = read_data(path)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a profile must be a mapping of keys, got {type(data).__name__}")
    check_version(data, "profile", "version", VERSIONS, 1, str(path))
    return data


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validate(data: dict[str, Any], path: Path) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise UsageError(f"{path}: {problems}") from None


def _problem(err: Any) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"key '{key}': {err['msg']}"
