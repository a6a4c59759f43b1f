"""Plan: which candidates (target x precision) to try for a profile, and why. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from edge.core.capabilities import Capabilities, IsaNeed
from edge.core.profile import Profile
from edge.core.units import MB
from edge.core.values import ORIGINAL, Candidate, ModelInfo

__all__ = ["BYTES_PER_PARAM", "CANNOT_CONVERT_HERE", "FALLBACK_NOTE", "FP16_ISA", "HOST_RUNS",
           "MIXED",
           "PRECISION_RANK", "PRUNED", "Planned", "accelerator_options", "fallbacks_in",
           "make_plan", "plan_original", "plan_pruned", "runs_faster", "unfit"]

#: The plan's order, and the preference among tied candidates: bf16 after fp32, since its IR
#: is fp32's (no smaller) and a tie means it gained nothing for its precision.
PRECISION_RANK = {"int8": 0, "int8-dynamic": 1, "fp16": 2, "fp32": 3, "bf16": 4}
BYTES_PER_PARAM = {"int8": 1, "int8-dynamic": 1, "fp16": 2, "bf16": 4, "fp32": 4}  # bf16: fp32 IR
#: ``Candidate.variant`` of candidates made from the pruned and distilled model.
PRUNED = "pruned"
#: ``Candidate.variant`` of int8 candidates whose per-layer plan keeps some layers in float.
MIXED = "mixed"
#: The precisions a pruned model is converted to: its fp32 and int8 forms.
_PRUNED_PRECISIONS = ("int8", "fp32")
_Targets = Mapping[str, tuple[Capabilities | None, str | None]]
#: How a target's note lists the operators its artifact leaves to the CPU.
FALLBACK_NOTE = "cpu fallback: "
#: How plans and reports say an accelerator's artifact is verified here (Capabilities.host_runs).
HOST_RUNS = {"simulated": "in the vendor's simulator on this host",
             "reference": "with the format's reference kernels on this host",
             "cpu": "as the same graph on this host's CPU"}


def accelerator_options(profile: Profile) -> dict[str, tuple[tuple[str, str], ...]]:
    """Runtime or target name -> the options of the profile's accelerator it reaches (sorted
    pairs: ``ConvertSettings.accelerator``); the first accelerator of a name wins."""
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    for accel in profile.accelerators:
        found.setdefault(accel.runtime, tuple(sorted(accel.options.items())))
    return found


def fallbacks_in(notes: tuple[str, ...]) -> tuple[str, ...]:
    """The operators a target's notes say its artifact leaves to the CPU."""
    for note in notes:
        if note.startswith(FALLBACK_NOTE):
            return tuple(op.strip() for op in note[len(FALLBACK_NOTE):].split(",") if op.strip())
    return ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Planned:
    """A candidate and whether the plan keeps it, with the reason."""

    candidate: Candidate
    keep: bool
    reason: str


def make_plan(
    profile: Profile,
    model: ModelInfo,
    targets: Mapping[str, tuple[Capabilities | None, str | None]],
    origin_format: str | None = None,
    *,
    timed_here: bool = True,
    host_isa: frozenset[str] | None = None,
    fallbacks: Mapping[str, tuple[str, ...] | None] | None = None,
) -> tuple[Planned, ...]:
    """Candidates in the profile's runtime order; ``targets`` maps a target's name to its
    declared capabilities (None: its module did not import) and why it cannot convert here.
    With ``origin_format`` (the user's file's format) the user's own file comes first.
    ``timed_here``: this host's timings stand for the device's (a mixed plan is made from
    them). ``host_isa``: this host's instruction sets, when they decide what it can verify
    (a bf16 candidate needs bf16 here too); None: not asked. ``fallbacks``: an accelerator
    target's name -> the model's operators it predicts on the CPU (None: it cannot tell)."""
    planned: list[Planned] = []
    if origin_format is not None:
        planned.append(plan_original(profile, model, origin_format, targets))
    for runtime in profile.runtimes:
        if runtime not in targets:
            planned.append(_no_target(runtime))
            continue
        caps, missing = targets[runtime]
        if caps is None or not caps.precisions:
            planned.append(Planned(candidate=Candidate(target=runtime, precision="*"),
                                   keep=False, reason=missing or f"{runtime} offers nothing"))
            continue
        if not caps.runs_on(profile.compute.arch):
            planned.append(Planned(candidate=Candidate(target=runtime, precision="*"), keep=False,
                                   reason=f"{caps.runtime} does not run on "
                                          f"{profile.compute.arch} devices"))
            continue
        for precision in sorted(caps.precisions, key=PRECISION_RANK.__getitem__):
            cand = Candidate(target=runtime, precision=precision)
            judged = _unit_precision(profile, cand, caps) or _judge(profile, model, cand, caps,
                                                                    missing, host_isa)
            planned.append(_on_unit(judged, caps, (fallbacks or {}).get(runtime)))
        planned += _mixed_twin(planned, caps, runtime, timed_here, profile.compute.arch)
    return tuple(planned)


def _unit_precision(profile: Profile, cand: Candidate, caps: Capabilities) -> Planned | None:
    """An accelerator's candidate at a precision the profile's unit does not compute is
    skipped, saying what it computes (a Maxwell GPU has no int8)."""
    accel = next((a for a in profile.accelerators
                  if a.runtime in (cand.target, caps.runtime)), None)
    if not caps.accelerator or accel is None:
        return None
    wanted = "int8" if cand.precision.startswith("int8") else cand.precision
    if wanted in accel.precisions:
        return None
    return Planned(candidate=cand, keep=False, reason=(
        f"the {accel.name} computes {', '.join(accel.precisions)}, not {wanted}"))


def _on_unit(planned: Planned, caps: Capabilities,
             fallbacks: tuple[str, ...] | None) -> Planned:
    """An accelerator's kept candidate says the unit it runs on, how it is verified here and
    which operators would fall back to the CPU."""
    if not caps.accelerator:
        return planned
    if not planned.keep:  # its converter is missing here: what it would leave to the CPU
        said = ", ".join(fallbacks or ()) or "none"
        return planned if fallbacks is None or not planned.reason.startswith(_CANNOT) else \
            replace(planned, reason=f"{planned.reason} (predicted CPU fallbacks: {said})")
    verified = HOST_RUNS.get(caps.host_runs, "on this host")
    if fallbacks is None:
        cpu = "which operators fall back to the CPU is known once converted"
    elif fallbacks:
        cpu = (f"{len(fallbacks)} operator kind(s) would fall back to the CPU: "
               f"{', '.join(fallbacks)}; not preferred over a CPU candidate without a "
               "measurement on the device")
    else:
        cpu = "every operator maps to it"
    return replace(planned, reason=f"on the {caps.accelerator}, verified {verified}; {cpu}")


def _mixed_twin(planned: list[Planned], caps: Capabilities, runtime: str, timed_here: bool,
                arch: str) -> list[Planned]:
    """The mixed plan of a target that declares a way to make one, when its int8 and fp32 are
    kept; skipped when this host's timings do not stand for the device's."""
    kept = {p.candidate.precision for p in planned if p.keep and p.candidate.target == runtime}
    if not caps.layer_plan or not {"int8", "fp32"} <= kept:
        return []
    reason = _MIXED_BY[caps.layer_plan] if timed_here else (
        f"made from this host's timings, which do not stand for the {arch} device's kernels")
    return [Planned(candidate=Candidate(target=runtime, precision="int8", variant=MIXED),
                    keep=timed_here, reason=reason)]


_MIXED_BY = {
    "layers": "int8 with the layers int8 does not speed up kept in float, chosen by the "
              "per-layer times of its int8 and fp32 artifacts",
    "kinds": "int8 with the layers between its convolutions and matrix products kept in "
             "float, when timing the whole model so makes it faster"}


def plan_original(profile: Profile, model: ModelInfo, origin_format: str,
                  targets: _Targets) -> Planned:
    """The user's own file, run as it is, when the device runs its format: the baseline
    every converted candidate must beat (precision: the model's own)."""
    cand = Candidate(target=ORIGINAL, precision=model.precision)
    runtime = _runs_format(targets, origin_format)
    reason = _original_unrunnable(profile, origin_format, runtime, targets)
    reason = reason or _budget(profile, model, cand)
    if reason:
        return Planned(candidate=cand, keep=False, reason=reason)
    return Planned(candidate=cand, keep=True, reason=(
        f"your own {origin_format} file as it is, on {runtime}: the baseline; another "
        "candidate is chosen only when it is faster"))


def _runs_format(targets: _Targets, origin_format: str) -> str | None:
    """The target that declares it runs files of this format as they are."""
    return next((name for name, (caps, _) in targets.items()
                 if caps is not None and origin_format in caps.formats), None)


def _original_unrunnable(profile: Profile, origin_format: str, runtime: str | None,
                         targets: _Targets) -> str | None:
    if runtime is None:
        return (f"a {origin_format} model runs only once converted: no runtime of "
                f"{profile.id} loads it as it is")
    if runtime not in profile.runtimes:
        return (f"{profile.id} runs {', '.join(profile.runtimes)}, not {runtime}: the "
                f"{origin_format} file itself cannot run there")
    caps = targets.get(runtime, (None, None))[0]
    if caps is not None and not caps.runs_on(profile.compute.arch):
        return f"{caps.runtime} does not run on {profile.compute.arch} devices"
    return None


def _no_target(runtime: str) -> Planned:
    return Planned(candidate=Candidate(target=runtime, precision="*"), keep=False,
                   reason=f"edge has no {runtime} target yet; other runtimes compete")


def _judge(profile: Profile, model: ModelInfo, cand: Candidate, caps: Capabilities,
           missing: str | None, host_isa: frozenset[str] | None = None) -> Planned:
    need = caps.isa_need(cand.precision)
    reason = (_missing(missing) or _precision(profile, cand, need)
              or _unverifiable(cand, need, host_isa) or _requantized(model, cand)
              or _nothing_dynamic(model, cand, caps) or _budget(profile, model, cand))
    if reason:
        return Planned(candidate=cand, keep=False, reason=reason)
    return Planned(candidate=cand, keep=True, reason=_why_keep(profile, cand))


#: How a plan says a candidate is dropped only because this host lacks its toolchain.
CANNOT_CONVERT_HERE = "cannot convert on this host: "
_CANNOT = CANNOT_CONVERT_HERE


def _missing(missing: str | None) -> str | None:
    return f"{_CANNOT}{missing}" if missing else None


def _precision(profile: Profile, cand: Candidate, need: IsaNeed | None) -> str | None:
    if need is not None and not computes(profile, need):
        return (f"{profile.compute.cpu} has no {cand.precision} that {need.computed_by} computes "
                f"({need.names} on {need.arch.replace('_', '-')}): {cand.precision} would "
                "compute in fp32")
    if cand.precision != "fp16" or computes_fp16(profile, cand.target):
        return None
    return (f"{profile.compute.cpu} has no fp16 arithmetic: fp16 would only halve the file "
            "and compute in fp32")


def _requantized(model: ModelInfo, cand: Candidate) -> str | None:
    """An already-quantized model is not quantized again (its scales would be quantized)."""
    if not cand.precision.startswith("int8") or not model.precision.startswith("int8"):
        return None
    return (f"the model is already quantized ({model.precision}): quantizing it again would "
            "stack a second rounding on the first; the original competes as it is")


def _nothing_dynamic(model: ModelInfo, cand: Candidate, caps: Capabilities) -> str | None:
    """A runtime whose int8-dynamic quantizes only some operators, for a model without them."""
    if cand.precision != "int8-dynamic" or not caps.dynamic_ops:
        return None
    if any(model.ops.get(op, 0) for op in caps.dynamic_ops):
        return None
    return (f"the model has no {' or '.join(caps.dynamic_ops)}: {caps.runtime}'s int8-dynamic "
            "quantizes only those")


#: Instruction sets, in the profiles' vocabulary, of a CPU with fp16 arithmetic.
FP16_ISA = frozenset({"fp16", "asimdhp", "avx512_fp16"})


def computes_fp16(profile: Profile, runtime: str) -> bool:
    """Whether the CPU, or an accelerator this runtime reaches, computes in fp16."""
    isa = {i.lower() for i in profile.compute.isa}
    return ("fp16" in profile.compute.peak_gops or bool(isa & FP16_ISA)
            or any("fp16" in a.precisions and a.runtime == runtime
                   for a in profile.accelerators))


def runs_faster(profile: Profile, tie: float) -> Callable[[str, str], bool]:
    """Whether the device runs (runtime, precision) faster than fp32, as the order takes it: a
    lower precision is, unless the profile's peak figures for the unit that runs it say it
    gains no more than ``tie``, or it is fp16 on a unit without fp16 arithmetic (planning
    already skips a precision the unit lacks)."""
    def faster(runtime: str, precision: str) -> bool:
        if PRECISION_RANK.get(precision, 99) >= PRECISION_RANK["fp32"]:
            return False
        if precision == "fp16" and not computes_fp16(profile, runtime):
            return False
        peak = _peaks(profile, runtime)
        base, mine = peak.get("fp32"), peak.get("int8" if precision.startswith("int8")
                                                else precision)
        return not (base and mine) or mine > base * (1 + tie)
    return faster


def _peaks(profile: Profile, runtime: str) -> Mapping[str, float]:
    """The peak figures of the unit a runtime runs on: an accelerator's are not given per
    precision (its precisions are what it computes), the CPU's are the profile's."""
    if any(a.runtime == runtime for a in profile.accelerators):
        return {}
    return {str(k): v for k, v in profile.compute.peak_gops.items()}


def _unverifiable(cand: Candidate, need: IsaNeed | None,
                  host_isa: frozenset[str] | None) -> str | None:
    if need is None or host_isa is None or need.isa & host_isa:
        return None
    return (f"this host's CPU has no {cand.precision} instructions ({need.names}): "
            f"{cand.precision} could not be verified here; optimize for this device on a host "
            "that has them")


def computes(profile: Profile, need: IsaNeed) -> bool:
    """Whether the device is of the need's architecture with one of its instruction sets."""
    isa = {i.lower() for i in profile.compute.isa}
    return profile.compute.arch == need.arch and bool(isa & need.isa)


def unfit(profile: Profile, model: ModelInfo) -> str | None:
    """Why the model cannot fit the device at any precision edge offers, else None."""
    return _budget(profile, model, Candidate(target="*", precision="int8"))


def _budget(profile: Profile, model: ModelInfo, cand: Candidate) -> str | None:
    size_mb = model.params * BYTES_PER_PARAM.get(cand.precision, 4) / MB
    budget = profile.memory.model_budget_mb
    if size_mb <= budget:
        return None
    return f"weights alone need {size_mb:.0f} MB at {cand.precision}, over the {budget} MB budget"


def _why_keep(profile: Profile, cand: Candidate) -> str:
    if cand.precision == "int8":
        simd = "/".join(profile.compute.isa) or "CPU"
        return f"int8 kernels ({simd}) cut memory traffic 4x; kept if fidelity holds"
    if cand.precision == "int8-dynamic":
        return "int8 weights, activations quantized at run time: no calibration needed"
    if cand.precision == "fp16":
        return "the device computes fp16"
    if cand.precision == "bf16":
        return ("the device computes bf16: half fp32's memory traffic in its kernels; kept if "
                "fidelity holds")
    return "fp32 baseline: exact, and the fallback when quantization loses fidelity"


def plan_pruned(plan: tuple[Planned, ...], model: ModelInfo, ratio: float,
                missing: str | None = None) -> tuple[Planned, ...]:
    """A pruned twin of every int8 and fp32 candidate the plan keeps: the same target and
    precision, converted from the reference with ``ratio`` of its channels pruned and then
    distilled from the reference (kept if fidelity to the reference holds); ``missing``: why
    this host cannot prune."""
    why_not = f"cannot prune on this host: {missing}" if missing else _unprunable(model)
    twins = []
    for planned in plan:
        cand = planned.candidate
        if (not planned.keep or cand.target == ORIGINAL or cand.variant
                or cand.precision not in _PRUNED_PRECISIONS):
            continue
        twin = replace(cand, variant=PRUNED)
        twins.append(Planned(candidate=twin, keep=why_not is None, reason=why_not or (
            f"{100 * ratio:.0f}% of the channels pruned, then distilled from the original on "
            f"the calibration data; kept if fidelity to the original holds")))
    return plan + tuple(twins)


def _unprunable(model: ModelInfo) -> str | None:
    """Why pruning cannot apply to this reference, else None."""
    if model.path.endswith(".tflite"):
        return "pruning reads an ONNX reference; this .tflite has none"
    if model.precision != "fp32":
        return f"the model is already {model.precision}: pruning starts from a float model"
    return None
