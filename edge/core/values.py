"""Frozen value types that cross module borders; each round-trips to JSON."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic.dataclasses import dataclass as pydantic_dataclass

from edge.core.json_value import JsonValue, adapter
from edge.core.observed import Observed, ObservedLayer, Share, planned_precision

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "JsonValue",
    "ORIGINAL",
    "adapter",
    "Artifact",
    "StoredFile",
    "BenchResult",
    "Bundle",
    "Candidate",
    "CandidateResult",
    "Contest",
    "Dataset",
    "DeployReport",
    "MeasuredCandidate",
    "Fidelity",
    "OutputFidelity",
    "ModelInfo",
    "Observed",
    "ObservedLayer",
    "Origin",
    "Pruning",
    "SOURCES",
    "Share",
    "Standing",
    "TensorSpec",
]

#: Where a figure comes from (``BenchResult.source``), as tables, reports and manifests say it.
SOURCES = {"device": "measured on the device", "host": "this host only",
           "estimate": "vendor estimate", "simulated": "simulated"}

#: The candidate that is the user's own model file, run as it is (``Candidate.target``).
ORIGINAL = "original"


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class TensorSpec(JsonValue):
    """A model input or output: name, shape (ints, or strings for symbolic dims), dtype, and
    for an ONNX output the op that computed it (``last_op``, past shape-only ops; a hint for
    its kind)."""

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("last_op",)

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    last_op: str = ""

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape with symbolic dims pinned to 1."""
        return tuple(d if isinstance(d, int) and d > 0 else 1 for d in self.shape)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class ModelInfo(JsonValue):
    """What edge knows about a source model."""

    path: str
    sha256: str
    size_bytes: int
    opset: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    params: int
    macs: int
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def precision(self) -> str:
        """The model's own precision, read from its ops and I/O types (derived, so manifests
        keep their keys): ``int8`` when statically quantized (QLinear* ops, QGemm, or
        QuantizeLinear/DequantizeLinear pairs), ``int8-dynamic`` for ONNX Runtime's dynamic
        quantization (ConvInteger, MatMulInteger, DynamicQuantize*) or weight-only
        DequantizeLinear, ``fp16`` with float16 inputs or outputs, else ``fp32``."""
        if set(self.ops) & _STATIC_INT8:
            return "int8"
        if set(self.ops) & _DYNAMIC_INT8:
            return "int8-dynamic"
        if any(t.dtype == "float16" for t in (*self.inputs, *self.outputs)):
            return "fp16"
        return "fp32"


#: Ops that say a model is already quantized: int8 weights and activations (static) ...
_STATIC_INT8 = frozenset({"QLinearConv", "QLinearMatMul", "QuantizeLinear", "QLinearAdd",
                          "QLinearMul", "QGemm", "QAttention"})
#: ... or int8 weights with activations quantized at run time (dynamic), or weights only.
_DYNAMIC_INT8 = frozenset({"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear",
                           "DynamicQuantizeLSTM", "DynamicQuantizeMatMul",
                           "MatMulIntegerToFloat", "DequantizeLinear"})


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Origin(JsonValue):
    """The file the user gave, before conversion to the reference ONNX."""

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("args",)

    path: str
    sha256: str
    format: str
    #: forward's non-tensor argument values (--arg NAME=VALUE) baked into the reference
    args: dict[str, str] = field(default_factory=dict)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Candidate(JsonValue):
    """One way to run the model: a target (runtime + converter) at a precision; or, with
    target ``original``, the user's own file at its own precision."""

    target: str
    precision: str
    variant: str = ""  # ``pruned``: made from the pruned and distilled model

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("variant",)

    @property
    def id(self) -> str:
        """Stable name, e.g. ``tflite-int8`` or ``onnxruntime-int8-pruned``; the user's own
        file is ``original``."""
        if self.target == ORIGINAL:
            return ORIGINAL
        return "-".join(p for p in (self.target, self.precision, self.variant) if p)

    @property
    def planned(self) -> str:
        """The arithmetic it is held to where it runs (``observed.planned_precision``)."""
        return planned_precision(self.precision, self.variant)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class StoredFile(JsonValue):
    """A file that travels with an artifact (e.g. an OpenVINO IR's weights .bin)."""

    file: str
    sha256: str
    size_bytes: int


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Artifact(JsonValue):
    """A converted model: its main file and any companions, stored by content hash."""

    candidate: Candidate
    file: str
    sha256: str
    size_bytes: int
    runtime: str
    notes: tuple[str, ...] = ()
    companions: tuple[StoredFile, ...] = ()
    kept_float: tuple[str, ...] = ()
    #: ONNX operator types kept float wherever they occur (accuracy recovery's last rung)
    float_ops: tuple[str, ...] = ()
    #: the versions of the converter's own environment, when it ran in one (edge toolchains)
    toolchain: dict[str, str] = field(default_factory=dict)
    #: an accelerator's artifact: the operators it leaves to the device's CPU (its runtime runs
    #: them there, copying tensors across at every boundary); () when the unit takes them all
    fallbacks: tuple[str, ...] = ()

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("toolchain", "fallbacks", "float_ops")

    @property
    def release_id(self) -> str:
        """A content id over every file of the artifact (the main file's sha when alone)."""
        if not self.companions:
            return self.sha256
        joined = "\n".join([self.sha256, *(c.sha256 for c in self.companions)])
        return hashlib.sha256(joined.encode()).hexdigest()

    @property
    def planned(self) -> str:
        """The arithmetic it is held to where it runs (``observed.planned_precision``): none
        for the user's own file (it runs as shipped) or an int8 artifact that keeps layers in
        float (recovered accuracy): they run as they were verified, whatever the share."""
        if self.candidate.target == ORIGINAL or self.kept_float or self.float_ops:
            return ""
        return self.candidate.planned

    @property
    def total_bytes(self) -> int:
        """Size of all files."""
        return self.size_bytes + sum(c.size_bytes for c in self.companions)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class OutputFidelity(JsonValue):
    """One output judged on its own, the way its kind needs (see docs/architecture.md).

    ``drop`` is in percentage points (judged against --max-drop); ``cosine`` and ``rel_rms``
    (RMS error over the output's spread across samples) against --min-cosine.
    """

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("rel_max",)

    name: str
    kind: str  # values | classes | probs | sequence | ctc | yolo | ssd | regression | custom
    why: str  # why this kind: the --metric flag, or what auto-detection saw
    passed: bool
    reason: str  # one line: what it kept, or why it fails
    cosine: float | None = None
    rel_rms: float | None = None
    max_abs: float | None = None
    rel_max: float | None = None  # max_abs over the output's spread (the same scale as rel_rms)
    nonfinite: int = 0  # NaN/Inf values in the candidate's output
    error: str = ""  # why it could not be compared at all (NaN/Inf, another shape): a failure
    drop: float | None = None
    detail: str = ""  # the counts behind ``drop``, e.g. "2 of 10 probabilities cross 0.5"
    accuracy: float | None = None
    reference_accuracy: float | None = None
    rel_error: float | None = None  # regression: mean |candidate - fp32| / |fp32| per sample
    numbers: dict[str, float] = field(default_factory=dict)  # kind-specific (ap50, value, ...)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Fidelity(JsonValue):
    """How closely an artifact reproduces the reference on held-out inputs.

    ``outputs`` judges each output on its own; the aggregate fields summarize them (``cosine``
    is the lowest per-output cosine, top-1/accuracy come from the first class output) and are
    what manifests written before per-output verification hold.
    """

    samples: int
    cosine: float
    max_abs: float
    top1_agreement: float | None = None
    accuracy: float | None = None
    reference_accuracy: float | None = None
    synthetic: bool = False
    outputs: tuple[OutputFidelity, ...] = ()
    #: the worst output's used share of its allowed loss (0: exact, 1: at the thresholds;
    #: edge/core/verify/allowance.py); None in manifests written before it
    allowance_used: float | None = None

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("outputs", "allowance_used")


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class BenchResult(JsonValue):
    """Latency and memory where the artifact ran, or as its vendor's tool estimates it:
    ``source`` says which (``SOURCES``), and every table, report and --json says it too."""

    where: str
    runtime: str
    runs: int
    warmup: int
    threads: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    load_ms: float | None = None
    peak_rss_mb: float | None = None
    device: dict[str, Any] = field(default_factory=dict)
    throughput_fps: float | None = None
    # sensors before/during/after the timed runs, plus "power_w" and its "power_source" label
    metrics: dict[str, Any] = field(default_factory=dict)
    #: None: a timing written before edge recorded sources (``where`` says where it ran)
    source: Literal["host", "device", "estimate", "simulated"] | None = None
    #: the median ms of each interleaved round, in the order run (empty: not recorded)
    round_ms: tuple[float, ...] = ()
    #: the figure a measured choice compared (edge.core.settle.paired): the median ratio to
    #: the leader over the interleaved rounds both ran, times the leader's median round; like
    #: for like where the host's speed drifts between rounds, which a pooled p50 is not
    paired_ms: float | None = None
    #: what ran each layer, as the runtime said where it was timed (None: not asked)
    observed: Observed | None = None

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("source", "round_ms", "paired_ms", "observed")

    @property
    def measured(self) -> bool:
        """Whether it is a timing of the artifact running (not a vendor's estimate or a
        simulator's figure)."""
        return self.source in (None, "host", "device")

    @property
    def compared_ms(self) -> float:
        """What tables and ratios show: the paired figure when a choice compared it, else the
        p50 of its own calls."""
        return self.paired_ms if self.paired_ms is not None else self.p50_ms

    @property
    def source_label(self) -> str:
        """How tables name where the figure comes from."""
        return SOURCES[self.source] if self.source else f"measured on {self.where}"

    @property
    def fell_back(self) -> str | None:
        """What ran away from the plan (``Observed.fell_back``): the unit the artifact was
        made for, the arithmetic its candidate was verified in."""
        return self.observed.fell_back() if self.observed is not None else None

    def planned_for(self, artifact: Artifact | None) -> BenchResult:
        """This timing, its observation held to the arithmetic ``artifact`` was verified in
        (``Artifact.planned``; None: nothing held)."""
        if self.observed is None:
            return self
        plan = artifact.planned if artifact is not None else ""
        return replace(self, observed=replace(self.observed, planned=plan))


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Pruning(JsonValue):
    """How a pruned candidate's source model was made from the reference: whole channels
    removed by importance, then distilled from the reference on the calibration data."""

    ratio: float  # the fraction of channels asked to go from each prunable layer
    layers_pruned: int
    layers_whole: int  # left whole: output layers and those feeding reshapes
    channels_before: int  # output channels of all weighted layers
    channels_after: int
    params_before: int
    params_after: int
    sparsity: float  # the fraction of the reference's parameters removed
    macs_before: int
    macs_after: int
    distill_seconds: float
    distill_steps: int
    distill_samples: int
    loss_before: float  # distillation loss (teacher-normalized MSE) after pruning ...
    loss_after: float  # ... and after distillation
    sha256: str  # the pruned fp32 ONNX model every pruned candidate is converted from

    @property
    def summary(self) -> str:
        """One line: channels, parameters, MACs and distillation."""
        return (f"pruned {self.channels_before - self.channels_after} of "
                f"{self.channels_before} channels ({self.layers_pruned} layers): params "
                f"{self.params_before:,} -> {self.params_after:,} (sparsity "
                f"{100 * self.sparsity:.0f}%), MACs {self.macs_before:,} -> "
                f"{self.macs_after:,}; distilled {self.distill_seconds:.0f} s, "
                f"{self.distill_steps} steps on {self.distill_samples} samples")


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Standing(JsonValue):
    """One candidate in a measured choice: its round medians and what the choice compared."""

    candidate: str
    round_ms: tuple[float, ...]  # the median ms of each round it ran, extra rounds last
    low_ms: float  # the spread of its round medians: fastest round ...
    high_ms: float  # ... slowest round
    paired_ms: float  # the figure the choice used: median round ratio to the leader, in ms


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Contest(JsonValue):
    """The rounds and the spread behind a measured choice (``edge.core.settle.settle``): all
    candidates timed in ``rounds`` interleaved rounds; while the winner was not clear (spreads
    overlapping, a round choosing another), ``extra_rounds`` more of just the contenders."""

    rounds: int
    extra_rounds: int
    contenders: tuple[str, ...]  # the candidates the extra rounds timed (empty: clear at once)
    clear: bool  # every round chose the winner and no contender's spread overlapped its own
    round_winners: tuple[str, ...]  # what each round alone chose, in the order run
    standings: tuple[Standing, ...]
    note: str = ""


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class CandidateResult(JsonValue):
    """A candidate's outcome: its artifact, fidelity, status and the reason for it."""

    candidate: Candidate
    status: str  # chosen | passed | rejected | failed | skipped
    reason: str
    artifact: Artifact | None = None
    fidelity: Fidelity | None = None
    bench: BenchResult | None = None
    pruning: Pruning | None = None
    #: an fp32 candidate measured against the reference: "exact" (within float round-off) or
    #: "not exact: max error X, RMS Y of spread" (edge/core/verify/diverge.py); "" otherwise
    exactness: str = ""

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("pruning", "exactness")


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Bundle(JsonValue):
    """What ``edge optimize`` writes: the manifest of a bundle directory."""

    format: int
    profile: str
    profile_spec: dict[str, Any] = field(default_factory=dict)
    source: ModelInfo
    calibration: str
    evaluation: str
    candidates: tuple[CandidateResult, ...]
    chosen: str | None
    reason: str
    origin: Origin | None = None
    contest: Contest | None = None  # the rounds and spread behind a measured choice

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("contest",)

    def chosen_result(self) -> CandidateResult | None:
        """The chosen candidate's result, if any."""
        return next((c for c in self.candidates if c.candidate.id == self.chosen), None)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredCandidate(JsonValue):
    """One candidate's benchmark on the device, when deploy compared several."""

    candidate: str
    bench: BenchResult


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class DeployReport(JsonValue):
    """What ``edge deploy`` did and what the device measured."""

    target: str
    transport: str
    profile: str
    candidate: str
    artifact_sha256: str
    release: str
    bench: BenchResult
    active: bool = True
    compared: tuple[MeasuredCandidate, ...] = ()
    reason: str = ""
    contest: Contest | None = None  # the rounds and spread behind the choice on the device
    name: str | None = None  # the model's slot on the device (active: current in that slot)

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("contest", "name")


@dataclass(frozen=True, slots=True)
class Dataset:
    """Samples ready to feed the reference model (one feed dict per sample), maybe labelled."""

    feeds: tuple[dict[str, np.ndarray], ...]
    labels: np.ndarray | None = None
    source: str = ""
    synthetic: bool = False

    def __len__(self) -> int:
        return len(self.feeds)

    def split(self, holdout: float) -> tuple[Dataset, Dataset]:
        """Split into (calibration, held-out) keeping order; held-out is the tail."""
        n_hold = max(1, int(round(len(self.feeds) * holdout)))
        cut = len(self.feeds) - n_hold
        labels = self.labels
        head = Dataset(self.feeds[:cut], None if labels is None else labels[:cut],
                       self.source, self.synthetic)
        tail = Dataset(self.feeds[cut:], None if labels is None else labels[cut:],
                       self.source, self.synthetic)
        return head, tail
