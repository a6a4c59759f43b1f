"""The text ``edge pack`` prints: the plan, the units and what runs on each, the co-run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edge.core.tables import table

__all__ = ["render_pack"]

_PLAN = ("model", "candidate", "unit", "threads", "rate/s", "p99 objective", "alone p99",
         "expected p99", "busy", "MB")
_CORUN = ("model", "alone p50", "alone p99", "together p50", "together p99", "dropped",
          "per s", "peak MB")


def render_pack(doc: Mapping[str, Any]) -> str:
    """The report's JSON (``edge.flows.pack.report_json``) as text."""
    plan, naive = doc["plan"], doc["naive"]
    lines = [f"pack {doc['pack']} on {doc['profile']}: figures {_source(doc)}", "",
             table(_PLAN, [_plan_row(m) for m in plan["models"]]), "", "units:",
             *_picture(doc["units"], plan["models"]), "",
             _headroom("this plan", plan), _headroom("each model as if alone", naive)]
    lines += [f"  (searched {plan['search']})"]
    for tried in doc["tried"]:
        lines += ["", _verdict(tried), table(_CORUN, [_corun_row(m) for m in tried["models"]])]
    if doc["deployed"]:
        lines += ["", "switched as one: " + ", ".join(
            f"{s['slot']} -> {s['active']}" for s in doc["switched"])]
    lines += [f"note: {n}" for n in doc["notes"]]
    if doc.get("out"):
        lines.append(f"report: {doc['out']}/pack.json")
    return "\n".join(lines)


def _source(doc: Mapping[str, Any]) -> str:
    where = doc["figures"]
    return "estimated from the profile" if where == "estimate" else f"measured on {where}"


def _plan_row(m: Mapping[str, Any]) -> tuple[object, ...]:
    objective = m["p99_objective_ms"]
    return (m["name"], m["candidate"], m["unit"], m["threads"] if m["unit"] == "cpu" else "-",
            f"{m['rate']:g}", "-" if objective is None else f"{objective:g} ms",
            _ms(m["alone_p99_ms"]), _ms(m["expected_p99_ms"]), f"{m['busy']:.0%}",
            f"{m['peak_mb']:.0f}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} ms"


def _picture(units: Sequence[Mapping[str, Any]], models: Sequence[Mapping[str, Any]]
             ) -> list[str]:
    """Each unit (each CPU core) and the models on it."""
    lines = []
    for unit in units:
        if unit["name"] == "cpu":
            lines += [_line(f"cpu core {c}", [m for m in models if m["unit"] == "cpu"
                                              and c in m["cores"]]) for c in range(unit["cores"])]
        else:
            lines.append(_line(unit["name"], [m for m in models if m["unit"] == unit["name"]]))
    return lines


def _line(label: str, models: Sequence[Mapping[str, Any]]) -> str:
    shown = " + ".join(f"{m['name']} ({m['candidate']}"
                       + ("" if m["pinned"] or m["unit"] != "cpu" else ", unpinned")
                       + f", busy {m['busy']:.0%})" for m in models)
    return f"  {label:<12} | {shown or 'idle'}"


def _headroom(what: str, plan: Mapping[str, Any]) -> str:
    state = "meets every objective" if plan["meets"] else "misses an objective"
    return (f"{what}: {state} at the asked rates; headroom {plan['headroom']:.2f}x "
            f"({plan['throughput_per_s']:.4g} inferences/s at the objectives), "
            f"{plan['memory_mb']:.0f} MB")


def _verdict(tried: Mapping[str, Any]) -> str:
    if tried["accepted"]:
        return (f"co-run on the device: every objective held together (peak "
                f"{tried['peak_mb']:.0f} MB)")
    return "co-run on the device: broke: " + "; ".join(tried["broken"])


def _corun_row(m: Mapping[str, Any]) -> tuple[object, ...]:
    alone, together = m.get("alone") or {}, m["together"]
    return (m["name"], _ms(alone.get("p50_ms")), _ms(alone.get("p99_ms")),
            _ms(together.get("p50_ms")), _ms(together.get("p99_ms")),
            f"{together['dropped']}/{together['frames']}", f"{together['per_s']:g}",
            f"{m['peak_mb']:.0f}")
