"""A metric kind with its options: what ``--metric OUTPUT=KIND[:OPTIONS]`` names."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Spec"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """A kind with its options, as in ``ctc:blank=0`` or ``yolo:obj``."""

    kind: str
    options: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """Back to the flag's spelling."""
        opts = ",".join(k if v == "" else f"{k}={v}" for k, v in self.options.items())
        return f"{self.kind}:{opts}" if opts else self.kind
