"""What ``edge devices probe`` found: the profile (ProbeResult) and, field by field, whether it
was read from the device or assumed (Ledger), summed up in the profile's ``source:`` text."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from edge.core.profile import Profile

__all__ = ["KEY_ORDER", "Ledger", "ProbeResult", "source_text"]

#: Profile fields in file order (the ``source:`` text lists them so).
KEY_ORDER = ("id", "name", "compute.arch", "compute.cpu", "compute.cores", "compute.threads",
             "compute.clock_ghz", "compute.isa", "compute.peak_gops", "memory.ram_mb",
             "memory.model_budget_mb", "storage.kind", "storage.capacity_gb", "power.idle_w",
             "power.max_w", "accelerators", "runtimes", "link.kind", "link.uplink_mbps",
             "link.downlink_mbps", "link.rtt_ms", "access")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeResult:
    """A profile probed from a device, and which of its fields were read vs assumed."""

    data: dict[str, Any]  # the profile as written, in file order (lists, not tuples)
    profile: Profile  # ``data`` validated
    measured: dict[str, str]  # dotted key -> how it was read from the device
    assumed: dict[str, str]  # dotted key -> why it is an estimate or placeholder (edit these)
    notes: tuple[str, ...] = ()  # findings with no profile field (accelerators, limits)
    where: str = ""  # the transport's label, e.g. ssh://pi@kitchen-pi.local:22
    device: dict[str, Any] = field(default_factory=dict)  # the agent's probe reply

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for ``--json``)."""
        return {"where": self.where, "profile": self.profile.to_json(),
                "measured": dict(self.measured), "assumed": dict(self.assumed),
                "notes": list(self.notes), "device": self.device}


class Ledger:
    """Which fields were read from the device and which were assumed, and why."""

    def __init__(self) -> None:
        self.measured: dict[str, str] = {}
        self.assumed: dict[str, str] = {}
        self.notes: list[str] = []

    def read(self, key: str, how: str) -> None:
        """``key`` was read from the device, ``how``."""
        self.measured[key] = how

    def assume(self, key: str, why: str) -> None:
        """``key`` is an estimate or a placeholder, ``why``."""
        self.assumed[key] = why


def source_text(where: str, ledger: Ledger) -> str:
    """The profile's ``source:``: where and when it was probed, what was read, what assumed."""
    day = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    text = (f"Probed from {where} on {day} by edge devices probe. Read from the device: "
            f"{_grouped(ledger.measured)}. Assumed or estimated, edit these: "
            f"{_grouped(ledger.assumed)}.")
    if ledger.notes:
        text += " Also found: " + "; ".join(ledger.notes) + "."
    return text


def _grouped(entries: dict[str, str]) -> str:
    """'a, b (why); c (why)': keys in profile order, keys sharing an explanation together."""
    keys = sorted(entries, key=lambda k: KEY_ORDER.index(k) if k in KEY_ORDER else 99)
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(entries[key], []).append(key)
    return "; ".join(f"{', '.join(ks)} ({why})" for why, ks in groups.items()) or "nothing"
