"""What really ran each layer of an artifact, as the runtime that ran it says (the agent's
``devices.agent.observe``, on this host or ON a device): the unit and the precision of every
layer, and their shares of the model's multiply-accumulates. A runtime that cannot say is "not
observable", never guessed. Validated when built: a device's reply is checked field by field.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any, ClassVar

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from edge.core.json_value import JsonValue

__all__ = ["FALLBACK_SHARE", "Observed", "ObservedLayer", "Share", "planned_precision"]

#: Layers at most in one observation (a device's reply beyond it is refused).
MAX_LAYERS = 20000
#: The longest name, operator, unit, precision or kernel text kept.
MAX_TEXT = 300
#: A share of an artifact's work that may run away from the unit it was made for before it
#: "fell back" (a quantize/dequantize pair at the edges of an NPU's graph, say).
FALLBACK_SHARE = 0.1
#: Versions one observation may name (runtime, plugins, driver), each a bounded text.
MAX_VERSIONS = 32
#: Precisions that are not integer arithmetic, and those below fp32 a CPU may quietly take.
FLOATS = frozenset({"f64", "f32", "bf16", "f16"})
LOWER_FLOATS = frozenset({"bf16", "f16"})
#: A candidate's precision -> what its arithmetic must be where it runs (the rest: not checked;
#: fp16 weights may be computed in f32 by design, int8-dynamic quantizes only some operators).
PLANNED = {"int8": "int8", "fp32": "fp32"}


def planned_precision(precision: str, variant: str = "") -> str:
    """The arithmetic a candidate of ``precision`` (and ``variant``) is held to where it runs:
    "int8", "fp32" or "" (not checked; a mixed-precision int8 plan keeps layers in float)."""
    return "" if variant == "mixed" else PLANNED.get(precision, "")


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class ObservedLayer(JsonValue):
    """One layer as its runtime ran it."""

    name: str = Field(max_length=MAX_TEXT)
    op: str = Field(max_length=MAX_TEXT)
    unit: str = Field(max_length=MAX_TEXT)  # CPU, NPU, GPU, an external delegate's unit
    precision: str = Field(max_length=MAX_TEXT)  # f32, bf16, f16, i8, u8, ...
    kernel: str = Field(default="", max_length=MAX_TEXT)  # the runtime's kernel or provider
    macs: int = Field(default=0, ge=0, le=10**18)  # 0: its shapes do not say


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Share(JsonValue):
    """The share of a model's work that ran on one unit in one precision."""

    unit: str
    precision: str
    share: float = Field(ge=0, le=1)
    layers: int = Field(ge=0)


@pydantic_dataclass(frozen=True, kw_only=True, slots=True)
class Observed(JsonValue):
    """Every layer of one loaded artifact as its runtime ran it; ``why_not`` says why there are
    none when the runtime cannot say."""

    runtime: str = Field(max_length=MAX_TEXT)
    method: str = Field(default="", max_length=MAX_TEXT)
    layers: tuple[ObservedLayer, ...] = Field(default=(), max_length=MAX_LAYERS)
    why_not: str = Field(default="", max_length=MAX_TEXT)
    #: the unit the artifact was made for (its accelerator's, from its own companion file);
    #: empty: the CPU, no accelerator planned
    made_for: str = Field(default="", max_length=MAX_TEXT)
    #: the arithmetic the candidate was made and verified in ("int8", "fp32"; ``planned_
    #: precision``), set by edge, which knows the candidate; empty: not checked
    planned: str = Field(default="", max_length=MAX_TEXT)
    #: the runtime, plugin and driver versions that ran it, as the device says
    versions: dict[Annotated[str, Field(max_length=MAX_TEXT)],
                   Annotated[str, Field(max_length=MAX_TEXT)]] = Field(
        default_factory=dict, max_length=MAX_VERSIONS)

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("why_not", "made_for", "planned", "versions")

    @property
    def observable(self) -> bool:
        return not self.why_not

    def fell_back(self, limit: float = FALLBACK_SHARE) -> str | None:
        """What ran away from the plan, when more than ``limit`` of the work did: away from
        the unit the artifact was made for, or in float where int8 was planned, or below f32
        where fp32 was verified (one line naming the share and the layers); None when it ran
        as planned, planned nothing to check, or the runtime cannot say."""
        if not self.observable:
            return None
        return self._off_unit(limit) or self._off_precision(limit)

    def _off_unit(self, limit: float) -> str | None:
        if not self.made_for:
            return None
        away = [layer for layer in self.layers if layer.unit != self.made_for]
        share = self._fraction(away)
        if share <= limit or not away:
            return None
        units = ", ".join(sorted({layer.unit for layer in away}))
        what = "MACs" if self.by_macs else "layers"
        return (f"{_percent(share)} of the {what} ran on {units}, not on {self.made_for} as "
                f"the artifact was made to ({_names(away)})")

    def _off_precision(self, limit: float) -> str | None:
        """int8 planned, float arithmetic; fp32 verified, bf16/f16 arithmetic (of the MACs:
        a layer count says nothing of where the arithmetic is)."""
        wrong = FLOATS if self.planned == "int8" else LOWER_FLOATS
        if self.planned not in PLANNED or not self.by_macs:
            return None
        away = [layer for layer in self.layers if layer.macs and layer.precision in wrong]
        share = self._fraction(away)
        if share <= limit or not away:
            return None
        kinds = ", ".join(sorted({layer.precision for layer in away}))
        how = "not in int8 as planned" if self.planned == "int8" else "where fp32 was verified"
        return f"{_percent(share)} of the MACs ran in {kinds}, {how} ({_names(away)})"

    def _fraction(self, some: list[ObservedLayer]) -> float:
        """Their share of the work, summed in integers (MACs, else layers) and divided once:
        the fleet module's device-side rule divides the same sums."""
        macs = self.by_macs
        total = sum(layer.macs if macs else 1 for layer in self.layers)
        return sum(layer.macs if macs else 1 for layer in some) / total if total else 0.0

    @property
    def by_macs(self) -> bool:
        """Whether shares are of multiply-accumulates (else of layers: no shape said any)."""
        return any(layer.macs for layer in self.layers)

    def shares(self) -> tuple[Share, ...]:
        """Each (unit, precision)'s share of the MACs (of the layers when none has MACs),
        largest first; a pair with no MACs (quantize, reshape) has no share."""
        weight: dict[tuple[str, str], int] = defaultdict(int)
        count: dict[tuple[str, str], int] = defaultdict(int)
        for layer in self.layers:
            key = (layer.unit, layer.precision)
            weight[key] += layer.macs if self.by_macs else 1
            count[key] += 1
        total = sum(weight.values())
        found = [Share(unit=u, precision=p, share=w / total, layers=count[(u, p)])
                 for (u, p), w in weight.items() if w]
        return tuple(sorted(found, key=lambda s: (-s.share, s.unit, s.precision)))

    def share_of(self, *, unit: str | None = None, precision: str | None = None) -> float:
        """The share that ran on ``unit`` and/or in ``precision``."""
        return sum(s.share for s in self.shares()
                   if unit in (None, s.unit) and precision in (None, s.precision))

    def line(self) -> str:
        """'ran: CPU bf16 92%, CPU f32 8% of MACs (OpenVINO's runtime graph)'."""
        if not self.observable:
            return f"ran: not observable ({self.why_not})"
        what = "MACs" if self.by_macs else "layers"
        parts = ", ".join(f"{s.unit} {s.precision} {_percent(s.share)}" for s in self.shares())
        return f"ran: {parts or 'no layers'} of {what} ({len(self.layers)} layers)"

    def table(self) -> list[dict[str, Any]]:
        """The shares as rows for --json and reports."""
        return [s.to_json() for s in self.shares()]


def _names(layers: list[ObservedLayer]) -> str:
    """'3 layers: a, b, c' (the first five named)."""
    more = f" and {len(layers) - 5} more" if len(layers) > 5 else ""
    return f"{len(layers)} layers: {', '.join(layer.name for layer in layers[:5])}{more}"


def _percent(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 or share == 0 else "<1%"
