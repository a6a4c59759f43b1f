"""The plan for one optimize run: what this host can convert for the profile, the user's .tflite
itself when it is the reference, the pruned twins; refused when nothing can be made here."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any

from edge.core.errors import UsageError, first_line
from edge.core.extras import require
from edge.core.intake import is_tflite
from edge.core.plan import Planned, make_plan, plan_pruned
from edge.core.profile import Profile
from edge.core.values import ORIGINAL, Candidate, ModelInfo
from edge.flows.budgets import host_is, host_isa
from edge.flows.prune import PruneOptions
from targets import REGISTRY, get_target
from targets.base import missing_modules

__all__ = ["plan_for", "tflite_readers"]

log = logging.getLogger("edge")


def plan_for(profile: Profile, model: ModelInfo, origin_format: str | None = None,
             prune: PruneOptions | None = None) -> tuple[Planned, ...]:
    """The plan for this profile, with what this host can convert (and, given the user's
    file's format, that file itself as the ``original`` candidate; with ``prune``, the pruned
    twins of its int8 and fp32 candidates; without torch that is a usage error naming the
    extra)."""
    if prune is not None:
        require("prune", "torch", "torch_pruning", why="--prune (pruning and distilling)")
    plan = _base_plan(profile, model, origin_format)
    return plan if prune is None else plan_pruned(plan, model, prune.ratio, None)


def _base_plan(profile: Profile, model: ModelInfo,
               origin_format: str | None) -> tuple[Planned, ...]:
    if is_tflite(model.path):
        return _tflite_plan(profile, model)
    available: dict[str, tuple[Any, str | None]] = {}
    fallbacks: dict[str, tuple[str, ...] | None] = {}
    for name in REGISTRY:
        try:
            target = get_target(name)
        except ImportError as exc:
            available[name] = (None, f"target module did not import: {exc}")
            continue
        available[name] = (target.caps, target.missing())
        if name in profile.runtimes and target.caps.accelerator:  # an AcceleratorTarget
            fallbacks[name] = _predicted(target, model)
    plan = make_plan(profile, model, available, origin_format, timed_here=host_is(profile),
                     host_isa=host_isa(), fallbacks=fallbacks)
    _refuse_if_nothing_installed(plan, available)
    return plan


def _predicted(target: Any, model: ModelInfo) -> tuple[str, ...] | None:
    """The model's operators an accelerator target predicts on the CPU (None: it cannot tell,
    or its prediction failed: the conversion tells)."""
    try:
        predicted = target.predict_fallbacks(model)
        return None if predicted is None else tuple(predicted)
    except Exception as exc:  # noqa: BLE001 - a plug-in's prediction: the plan goes on without
        log.warning("%s: no prediction of CPU fallbacks: %s", target.name, first_line(exc))
        return None


def _refuse_if_nothing_installed(plan: tuple[Planned, ...],
                                 available: dict[str, tuple[Any, str | None]]) -> None:
    """UsageError naming what to install or build when no candidate is kept and the profile's
    runtimes were skipped because their converters are not installed (the extras) or their
    toolchains are not built (each runtime's own reason)."""
    if any(p.keep for p in plan):
        return
    wanting = {p.candidate.target: available.get(p.candidate.target, (None, None)) for p in plan}
    wanting = {name: (caps, why) for name, (caps, why) in wanting.items()
               if caps is not None and why}
    extras = sorted({caps.extra for caps, _ in wanting.values() if missing_modules(caps)})
    others = [f"{name}: {why}" for name, (caps, why) in wanting.items()
              if not missing_modules(caps)]
    if extras:
        names = " ".join(f"'edge[{e}]'" for e in extras)
        others.insert(0, f"their converters are not installed (pip install {names})")
    if others:
        raise UsageError("nothing for this profile's runtimes can be made here: "
                         + "; ".join(others))


def tflite_readers() -> dict[str, tuple[str, Any]]:
    """runtime -> (target name, target) of the registered targets that read .tflite files."""
    readers: dict[str, tuple[str, Any]] = {}
    for name in REGISTRY:
        with contextlib.suppress(ImportError):
            target = get_target(name)
            if target.caps.reads == ".tflite":
                readers.setdefault(target.caps.runtime, (name, target))
    if not readers:
        raise UsageError("no target reads .tflite files here (pip install 'edge[tflite]')")
    return readers


def _tflite_plan(profile: Profile, model: ModelInfo) -> tuple[Planned, ...]:
    """The user's .tflite itself (``original``), then the plan over the .tflite readers, their
    candidates named by target; the other runtimes of the profile are skipped with the
    reason."""
    readers = tflite_readers()
    plan = make_plan(profile, model, {runtime: (t.caps, t.missing())
                                      for runtime, (_, t) in readers.items()}, "tflite")
    renamed = []
    for planned in plan:
        runtime = planned.candidate.target
        if runtime == ORIGINAL:
            renamed.append(planned)
        elif runtime in readers:
            cand = Candidate(target=readers[runtime][0], precision=planned.candidate.precision)
            renamed.append(replace(planned, candidate=cand))
        else:
            renamed.append(replace(planned, keep=False, reason=(
                f"{runtime} converts from ONNX, and no ONNX reference could be made of this "
                ".tflite: only LiteRT candidates made from the original compete")))
    return tuple(renamed)
