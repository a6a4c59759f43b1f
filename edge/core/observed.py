"""What really ran each layer of an artifact, as the runtime that ran it says (the agent's
``devices.agent.observe``, on this host or ON a device): the unit and the precision of every
layer, and their shares of the model's multiply-accumulates. A runtime that cannot say is "not
observable", never guessed. Validated when built: a device's reply is checked field by field.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from edge.core.json_value import JsonValue

__all__ = ["FALLBACK_SHARE", "Observed", "ObservedLayer", "Share"]

#: Layers at most in one observation (a device's reply beyond it is refused).
MAX_LAYERS = 20000
#: The longest name, operator, unit, precision or kernel text kept.
MAX_TEXT = 300
#: A share of an artifact's work that may run away from the unit it was made for before it
#: "fell back" (a quantize/dequantize pair at the edges of an NPU's graph, say).
FALLBACK_SHARE = 0.1


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

    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("why_not", "made_for")

    @property
    def observable(self) -> bool:
        return not self.why_not

    def fell_back(self, limit: float = FALLBACK_SHARE) -> str | None:
        """What ran away from the unit the artifact was made for, when more than ``limit``
        of its work did (one line naming the share and the layers); None when it ran as
        planned, planned no accelerator, or the runtime cannot say."""
        if not self.made_for or not self.observable:
            return None
        away = [layer for layer in self.layers if layer.unit != self.made_for]
        share = 1 - self.share_of(unit=self.made_for)
        if share <= limit or not away:
            return None
        units = ", ".join(sorted({layer.unit for layer in away}))
        names = ", ".join(layer.name for layer in away[:5])
        more = f" and {len(away) - 5} more" if len(away) > 5 else ""
        what = "MACs" if self.by_macs else "layers"
        return (f"{_percent(share)} of the {what} ran on {units}, not on {self.made_for} as "
                f"the artifact was made to ({len(away)} layers: {names}{more})")

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


def _percent(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 or share == 0 else "<1%"
