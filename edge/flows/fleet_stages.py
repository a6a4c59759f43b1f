"""Staged rollouts of a fleet deploy (``--canary N``, ``--batch N|P%``, ``--max-fail N|P%``):
which hosts go together, in which order, and when a stage's failures halt the rollout.

Pure functions, no I/O: the built-in engine (edge.flows.fleet) and the Ansible driver (which
maps the same flags onto a play's ``serial`` and ``max_fail_percentage``) share them.

- ``--canary N``: the first N selected hosts (inventory order) are the first stage.
- ``--batch N|P%``: the other hosts follow in stages of N hosts, or P% of ALL selected hosts
  (rounded down, at least 1) -- as Ansible's ``serial: "P%"``.
- ``--max-fail N|P%``: a stage halts the rollout when MORE than N of its hosts fail, or more
  than P% of them -- as Ansible's ``max_fail_percentage``. Default: 0 once the rollout is
  staged (any failure halts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from edge.core.errors import UsageError

__all__ = ["NO_FAILURES", "Share", "Staging", "ansible_serial", "over_budget", "parse_share",
           "stage_names", "stages"]

T = TypeVar("T")
_SHARE = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Share:
    """A count of hosts: ``count`` hosts, or ``percent`` % of some total."""

    count: int | None = None
    percent: int | None = None

    def of(self, total: int) -> int:
        """How many hosts of ``total`` (a percentage: rounded down, at least 1)."""
        if self.percent is None:
            return self.count or 0
        return max(1, total * self.percent // 100)

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent is not None else str(self.count)


NO_FAILURES = Share(count=0)


def parse_share(text: str | None, option: str, *, least: int = 0) -> Share | None:
    """``"3"`` or ``"25%"`` as a Share (None stays None); anything else is a UsageError."""
    if text is None:
        return None
    found = _SHARE.fullmatch(str(text).strip())
    if found is None:
        raise UsageError(f"{option} {text!r}: give a number of hosts (3) or a percentage (25%)")
    value, percent = int(found.group(1)), bool(found.group(2))
    if percent and not 0 <= value <= 100:
        raise UsageError(f"{option} {text}: a percentage is 0% to 100%")
    if value < least:
        raise UsageError(f"{option} {text}: give at least {least}")
    return Share(percent=value) if percent else Share(count=value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Staging:
    """How a rollout is staged: the parsed flags (all None: one stage, failures independent)."""

    canary: int | None = None
    batch: Share | None = None
    max_fail: Share | None = None

    @property
    def staged(self) -> bool:
        """Whether any flag asks for stages or a failure budget."""
        return self.canary is not None or self.batch is not None or self.max_fail is not None

    @property
    def budget(self) -> Share | None:
        """The failure budget per stage: --max-fail, else 0 when staged, else none."""
        if self.max_fail is not None:
            return self.max_fail
        return NO_FAILURES if self.staged else None


def stages(hosts: Sequence[T], canary: int | None = None,
           batch: Share | None = None) -> tuple[tuple[T, ...], ...]:
    """The hosts cut into stages, in order: the canary's first N, then batches (no batch: the
    rest as one stage). Every host is in exactly one stage; no stage is empty."""
    rest = list(hosts)
    cut: list[tuple[T, ...]] = []
    if canary:
        cut.append(tuple(rest[:canary]))
        rest = rest[canary:]
    size = batch.of(len(hosts)) if batch is not None else len(rest)
    size = max(size, 1)
    cut += [tuple(rest[i:i + size]) for i in range(0, len(rest), size)]
    return tuple(stage for stage in cut if stage)


def stage_names(count: int, canary: int | None = None) -> tuple[str, ...]:
    """The names of ``count`` stages: ``canary`` (with a canary), then ``batch 1``, ..."""
    names = ["canary"] if canary else []
    names += [f"batch {i}" for i in range(1, count - len(names) + 1)]
    return tuple(names[:count])


def over_budget(failed: int, size: int, budget: Share | None) -> bool:
    """Whether ``failed`` of a stage's ``size`` hosts exceed the budget (None: never)."""
    if budget is None or not failed:
        return False
    if budget.percent is not None:
        return failed * 100 > budget.percent * size
    return failed > (budget.count or 0)


def ansible_serial(staging: Staging) -> list[int | str]:
    """The same stages as an Ansible play's ``serial`` list (its last entry repeats): the
    canary's size, then the batch (N or "P%"); no batch: the rest in one ("100%")."""
    sizes: list[int | str] = [staging.canary] if staging.canary else []
    batch = staging.batch
    if batch is None:
        return [*sizes, "100%"]
    return [*sizes, f"{batch.percent}%" if batch.percent is not None else batch.of(0)]
