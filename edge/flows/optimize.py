"""``edge optimize``: plan, convert, verify, measure and choose; write a bundle."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from devices.measure import More, Rounds, more_here, time_files_here
from edge.core import cancel, progress
from edge.core.bundle import FORMAT, check_writable, write_bundle
from edge.core.cache import cache_root
from edge.core.data import dataset_digest, load_dataset, synthetic_dataset
from edge.core.errors import CheckFailed, PruneError, UsageError, first_line
from edge.core.files import filled, no_space
from edge.core.intake import (
    dynamic_inputs,
    inspect_reference,
    is_tflite,
    pin_from_sample,
    reference_model,
)
from edge.core.model import inspect_model, sha256_file, unrunnable
from edge.core.plan import MIXED, PRUNED, Planned, accelerator_options, fallbacks_in, unfit
from edge.core.profile import Profile
from edge.core.select import Budget
from edge.core.values import (
    ORIGINAL,
    Artifact,
    Bundle,
    Candidate,
    CandidateResult,
    Dataset,
    ModelInfo,
    Origin,
    Pruning,
    StoredFile,
)
from edge.core.verify import Outputs, Thresholds, check_metrics, judge, measure, run_all, warn_flat
from edge.core.verify.diverge import labelled
from edge.core.verify.rows import passed_reason
from edge.flows import mixed, worklist
from edge.flows.budgets import (
    budget_for,
    host_is,
    loss_band,
    none_within,
    within_budgets,
)
from edge.flows.choice import choose_bundle, with_paired
from edge.flows.planning import plan_for, tflite_readers
from edge.flows.prune import PruneOptions, prune_model
from edge.flows.recover import recover
from targets import get_target, workdir_name
from targets.base import ConversionError, ConvertSettings, OriginTarget, ServingTarget
from targets.onnxruntime import OrtRunner
from targets.original import original_target

__all__ = ["OptimizeOptions", "optimize", "plan_for", "refuse_if_unfit", "work_policy"]

log = logging.getLogger("edge")

@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizeOptions:
    """What ``edge optimize`` was asked to do."""

    calib: Path | None = None
    eval: Path | None = None
    limits: Thresholds = Thresholds()
    holdout: float = 0.2
    latency_budget_ms: float | None = None
    size_budget_mb: float | None = None  # the artifact's files, on disk
    rounds: Rounds = Rounds()
    measure: bool = True
    shapes: dict[str, tuple[int, ...]] | None = None
    dtypes: dict[str, str] | None = None
    args: dict[str, str] | None = None  # a PyTorch forward's non-tensor values (--arg)
    prune: PruneOptions | None = None  # also try pruned and distilled candidates
    trust_code: bool = False  # read a model that runs code when loaded (--trust-model-code)
    exhaustive: bool = False  # convert every candidate, also those that cannot win
    time_budget_s: float | None = None  # stop trying candidates after this (--time-budget)
    device_measures: bool = False  # the device times the faithful candidates and chooses


@dataclass(frozen=True, kw_only=True, slots=True)
class _Context:
    """What every candidate is converted and verified against."""

    model: ModelInfo
    calib: Dataset
    held_out: Dataset
    reference: Outputs
    workroot: Path
    limits: Thresholds
    origin: Origin | None = None  # the user's file: the ``original`` candidate
    threads: int = 1  # the profile's, at most this host's cores: per-layer times use them
    measure: bool = True  # candidates are timed (a mixed plan is made from times)
    pruning: Pruning | None = None  # ``model`` is the pruned reference, made as this says
    #: runtime or target name -> the profile's options for the accelerator it reaches
    accelerators: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Outcome:
    """A candidate's result, its files and (when it passed) its loaded runner."""

    result: CandidateResult
    files: dict[str, Path]
    runner: Any = None


def optimize(model_path: Path, profile: Profile, out: Path, options: OptimizeOptions) -> Bundle:
    """Run the whole optimize step and write the bundle to ``out``."""
    started = time.monotonic()
    check_writable(out)
    with progress.step(f"reading {model_path.name}"):
        origin, reference = reference_model(model_path, shapes=options.shapes,
                                            dtypes=options.dtypes, tflite_fallback=True,
                                            trust_code=options.trust_code, args=options.args)
        model = inspect_reference(reference)
    refuse_if_unfit(profile, model)
    check_metrics(options.limits, [o.name for o in model.outputs])
    with progress.step("loading data and running the fp32 reference"):
        ctx = replace(_context(model, options), origin=origin, threads=_threads(profile),
                      measure=options.measure, accelerators=accelerator_options(profile))
    plan = plan_for(profile, ctx.model, origin.format, options.prune)
    policy = work_policy(plan, profile, options, ctx.model, started)
    contexts = {"": ctx} | _pruned_context(plan, ctx, options.prune)
    with _background_conversions(plan, ctx, policy):
        outcomes = _converted(plan, contexts, policy)
    outcomes = _measured(outcomes, profile, options, ctx)
    if host_is(profile):
        worklist.keep_timings([o.result for o in outcomes], ctx.model.path, profile,
                              ctx.model.sha256)
    results, budgeted = within_budgets([o.result for o in outcomes], profile,
                                       latency_budget(options, profile),
                                       options.size_budget_mb)
    band = loss_band(options.limits.max_drop, len(ctx.held_out)) if budgeted else None
    chosen, reason, contest = choose_bundle(results, profile, band,
                                           _more(outcomes, profile, options))
    if chosen is None and budgeted:
        reason = none_within([o.result for o in outcomes])
    bundle = Bundle(
        format=FORMAT, profile=profile.id, profile_spec=profile.to_json(), source=ctx.model,
        calibration=ctx.calib.source,
        evaluation=ctx.held_out.source + (" (held-out split)" if options.eval is None else ""),
        candidates=tuple(_mark(with_paired(r, contest), chosen) for r in results),
        chosen=chosen, reason=reason,
        origin=origin, contest=contest)
    files = {name: path for o in outcomes for name, path in o.files.items()}
    write_bundle(out, bundle, files | _serving_files(outcomes, chosen))
    return bundle


def _serving_files(outcomes: Sequence[_Outcome], chosen: str | None) -> dict[str, Path]:
    """A serving engine's config for the chosen artifact and its files laid out for it, from
    a target that writes one (``serving_files``): bundle-relative name -> file."""
    found = next((o for o in outcomes if o.result.candidate.id == chosen
                  and o.result.artifact is not None), None)
    if found is None or found.result.candidate.target == ORIGINAL:  # the user's own file
        return {}
    target = get_target(found.result.candidate.target)
    if not target.caps.serving:
        return {}
    return cast(ServingTarget, target).serving_files(_main_file(found),
                                                     found.result.candidate.precision)


def refuse_if_unfit(profile: Profile, model: ModelInfo) -> None:
    """A model whose weights exceed the budget even at int8 is refused up front."""
    odd = unrunnable(model)
    if odd:
        raise UsageError(f"{Path(model.path).name}: {odd}")
    reason = unfit(profile, model)
    if reason:
        raise CheckFailed(f"the model does not fit {profile.id}: {reason}")


def work_policy(plan: tuple[Planned, ...], profile: Profile, options: OptimizeOptions,
                model: ModelInfo, started: float | None = None) -> worklist.Policy:
    """How this run orders its candidates and which it may skip (edge.flows.worklist): by the
    profile's order when nothing measured decides (a device not at hand, not timed here, no
    budget), else by the estimates."""
    budgeted = latency_budget(options, profile) is not None or bool(
        options.size_budget_mb or profile.budgets.size_mb)
    by_order = (not (host_is(profile) and options.measure) and not options.device_measures
                and not budgeted)
    return worklist.policy(plan, profile, model.path, by_order=by_order,
                           exhaustive=options.exhaustive, budget_s=options.time_budget_s,
                           started=time.monotonic() if started is None else started)


def _context(model: ModelInfo, options: OptimizeOptions) -> _Context:
    model = _pinned(model, options)
    calib, held_out = _data(model, options)
    key = f"{model.sha256[:16]}-{dataset_digest(calib)[:16]}"
    reference = _reference_outputs(model, held_out)
    warn_flat([o.name for o in model.outputs], reference)
    return _Context(model=model, calib=calib, held_out=held_out, reference=reference,
                    workroot=cache_root() / "convert" / key, limits=options.limits)


def _pinned(model: ModelInfo, options: OptimizeOptions) -> ModelInfo:
    """Pin dynamic input dims from the first calibration sample; refuse when nothing says."""
    dynamic = [] if is_tflite(model.path) else dynamic_inputs(Path(model.path))
    if not dynamic:
        return model
    if options.calib is None:
        raise UsageError(f"input(s) {', '.join(dynamic)} have dynamic dims: give --shape "
                         f"{dynamic[0]}=DIMS or --calib data to pin them")
    sample = load_dataset(options.calib, model).feeds[0]
    return inspect_model(pin_from_sample(Path(model.path), cache_root() / "reference", sample))


def _data(model: ModelInfo, options: OptimizeOptions) -> tuple[Dataset, Dataset]:
    if options.calib is not None:
        calib = load_dataset(options.calib, model, want_labels=options.eval is None)
    else:
        calib = synthetic_dataset(model)
    if options.eval is not None:
        return calib, load_dataset(options.eval, model, want_labels=True)
    if len(calib) < 5:
        raise UsageError(f"--calib {options.calib}: {len(calib)} samples; give at least 5, "
                         "or a separate --eval file")
    return calib.split(options.holdout)


def _reference_outputs(model: ModelInfo, held_out: Dataset) -> Outputs:
    threads = os.cpu_count() or 1
    if is_tflite(model.path):
        return run_all(_tflite_runner(model, threads), held_out)
    try:
        runner = OrtRunner(Path(model.path), threads=threads)
    except Exception as exc:  # noqa: BLE001 - ORT's own types (Fail, InvalidGraph, ...) vary
        raise UsageError(f"{Path(model.path).name}: ONNX Runtime cannot load the model: "
                         f"{first_line(exc)}") from None
    return run_all(runner, held_out)


@contextlib.contextmanager
def _background_conversions(plan: tuple[Planned, ...], ctx: _Context,
                            policy: worklist.Policy) -> Iterator[None]:
    """Start out-of-process converters (onnx2tf) at once, beside the in-process ones (by the
    profile's order, only the first candidate's: the others may never be needed).

    Their targets cache by work directory and lock it, so the later call in ``_try`` waits
    for this run and reuses it. A failure here is ignored: ``_try`` reports it properly.
    """
    first: dict[str, Planned] = {}
    order = [plan[i] for i in worklist.work_order(plan, policy)
             if plan[i].keep and plan[i].candidate.target != ORIGINAL]
    for planned in order[:1] if policy.by_order and not policy.exhaustive else order:
        if planned.candidate.target not in first:
            first[planned.candidate.target] = planned
    jobs = [p for p in first.values() if p.candidate.target != ORIGINAL
            and get_target(p.candidate.target).caps.converts_in_background]
    def convert(planned: Planned) -> None:
        target = get_target(planned.candidate.target)
        settings = _settings(ctx, target)
        with contextlib.suppress(Exception):
            target.convert(ctx.model, planned.candidate.precision, calib=ctx.calib,
                           workdir=_workdir(ctx, target.name, settings), settings=settings)

    threads = [threading.Thread(target=convert, args=(job,), daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    try:
        with cancel.on_interrupt():  # a Ctrl-C stops the converters instead of waiting
            yield
    finally:
        for thread in threads:
            thread.join()
        cancel.clear()


def _pruned_context(plan: tuple[Planned, ...], ctx: _Context,
                    prune: PruneOptions | None) -> dict[str, _Context | str]:
    """``{"pruned": the context of the pruned model}`` (or why pruning failed) when the plan
    keeps a pruned candidate, else ``{}``."""
    if prune is None or not any(p.keep and p.candidate.variant == PRUNED for p in plan):
        return {}
    log.info("pruning %.0f%% of the channels, distilling for up to %.0f s",
             100 * prune.ratio, prune.budget_s)
    try:
        with progress.step(f"pruning {100 * prune.ratio:.0f}% of the channels and distilling "
                           f"from the original (up to {prune.budget_s:.0f} s)"):
            pruned = prune_model(ctx.model, ctx.calib, prune)
    except PruneError as exc:
        return {PRUNED: f"pruning failed: {exc}"}
    except Exception as exc:  # noqa: BLE001 - torch/torch-pruning's own; the others go on
        if filled(exc):  # the cache's disk is full: the user's to free, one line (exit 2)
            raise no_space(cache_root() / "prune", 1 << 20) from None
        return {PRUNED: f"pruning failed: {type(exc).__name__}: {first_line(exc)}"}
    key = f"{pruned.model.sha256[:16]}-{dataset_digest(ctx.calib)[:16]}"
    return {PRUNED: replace(ctx, model=pruned.model, pruning=pruned.pruning,
                            workroot=cache_root() / "convert" / key)}


def _converted(plan: tuple[Planned, ...], contexts: dict[str, _Context | str],
               policy: worklist.Policy) -> list[_Outcome]:
    """The candidates of the plan tried in the policy's order (in the context of their variant:
    the reference, or the pruned model; a mixed plan after the candidates it is measured from),
    those that cannot win skipped with the reason, under one bar over those it keeps."""
    total = sum(1 for planned in plan if planned.keep)
    outcomes: dict[int, _Outcome] = {}
    done = 0
    with progress.step("converting", total=total) as bar:
        for i in worklist.work_order(plan, policy):
            cancel.stop_if_requested()  # a Ctrl-C whose KeyboardInterrupt was swallowed
            planned = plan[i]
            why = worklist.cannot_win(planned, [o.result for o in outcomes.values()], policy)
            if planned.keep:
                done += 1
                bar.update(f"{'skipping' if why else 'converting'} {done}/{total} "
                           f"{planned.candidate.id}")
            outcomes[i] = _skipped(planned.candidate, why) if why else \
                _outcome(planned, contexts, list(outcomes.values()))
            bar.update(completed=done)
    return [outcomes[i] for i in range(len(plan))]


def _outcome(planned: Planned, contexts: dict[str, _Context | str],
             done: list[_Outcome]) -> _Outcome:
    """One candidate tried in its variant's context (a mixed plan: the reference's)."""
    variant = planned.candidate.variant
    ctx = contexts["" if variant == MIXED or not planned.keep else variant]
    if isinstance(ctx, str):
        return _failed(planned.candidate, ctx)
    return _mixed(planned, ctx, done) if variant == MIXED and planned.keep else _try(planned, ctx)


def _mixed(planned: Planned, ctx: _Context, done: list[_Outcome]) -> _Outcome:
    """The int8 candidate with the layers int8 does not speed up here kept float; skipped when
    its int8 or fp32 did not pass, or candidates are not timed."""
    cand = planned.candidate
    int8, fp32 = (_passed_outcome(done, cand.target, p) for p in ("int8", "fp32"))
    if int8 is None or fp32 is None:
        return _skipped(cand, f"needs {cand.target}-int8 and {cand.target}-fp32 to pass first")
    if not ctx.measure:
        return _skipped(cand, "candidates are not timed: a mixed plan is made from times")
    return _layer_planned(planned, ctx, int8, fp32)


def _layer_planned(planned: Planned, ctx: _Context, int8: _Outcome,
                   fp32: _Outcome) -> _Outcome:
    """Plan the layers to keep float as the target declares (per-layer times of ``int8`` and
    ``fp32``, or a whole-model trial), then convert with them kept float."""
    cand = planned.candidate
    assert int8.result.artifact is not None
    kept, ops = int8.result.artifact.kept_float, int8.result.artifact.float_ops
    how = _target(cand.target, ctx).caps.layer_plan
    try:
        with progress.step(f"{cand.id}: {mixed.DOING[how]}"):
            if how == "layers":
                plan = mixed.by_layers(_main_file(int8), _main_file(fp32), ctx.model,
                                       threads=ctx.threads)
            else:
                plan = mixed.by_kinds(_main_file(int8), ctx.model, kept,
                                      _converter(cand.target, ctx, kept, ops),
                                      threads=ctx.threads)
    except Exception as exc:  # noqa: BLE001 - no plan: the others go on
        return _failed(cand, f"planning failed: {type(exc).__name__}: {first_line(exc)}")
    if isinstance(plan, str):
        return _skipped(cand, plan)
    return _try(planned, ctx, tuple(dict.fromkeys((*kept, *plan.nodes))), (plan.note,), ops)


def _converter(target: str, ctx: _Context, kept: tuple[str, ...],
               float_ops: tuple[str, ...]) -> Callable[[tuple[str, ...]], Path]:
    """nodes -> the int8 artifact of ``target`` with ``kept`` and those nodes in float."""
    def convert(nodes: tuple[str, ...]) -> Path:
        settings = _settings(ctx, _target(target, ctx), (*kept, *nodes), float_ops)
        return _target(target, ctx).convert(ctx.model, "int8", calib=ctx.calib,
                                            settings=settings,
                                            workdir=_workdir(ctx, target, settings))[0]
    return convert


def _passed_outcome(done: list[_Outcome], target: str, precision: str) -> _Outcome | None:
    """The passed, plain (not pruned, not mixed) candidate ``target-precision``, if any."""
    wanted = Candidate(target=target, precision=precision)
    return next((o for o in done if o.runner is not None and o.result.candidate == wanted), None)


def _skipped(cand: Candidate, reason: str) -> _Outcome:
    return _Outcome(result=CandidateResult(candidate=cand, status="skipped", reason=reason),
                    files={})


def _try(planned: Planned, ctx: _Context, keep_float: tuple[str, ...] = (),
         plan_notes: tuple[str, ...] = (), float_ops: tuple[str, ...] = ()) -> _Outcome:
    cand = planned.candidate
    if not planned.keep:
        return _skipped(cand, planned.reason)
    target = _target(cand.target, ctx)
    settings = _settings(ctx, target, keep_float, float_ops)
    log.info("converting and verifying %s", cand.id)
    try:
        with progress.step(_doing(cand, len(ctx.calib))):
            file, notes = target.convert(ctx.model, cand.precision, calib=ctx.calib,
                                         workdir=_workdir(ctx, cand.target, settings),
                                         settings=settings)
    except ConversionError as exc:
        return _failed(cand, str(exc), ctx.pruning)
    try:
        with progress.step(f"{cand.id}: verifying on {len(ctx.held_out)} samples"):
            runner = target.load(file, ctx.model, threads=os.cpu_count() or 1)
            fidelity = measure(ctx.reference, run_all(runner, ctx.held_out), ctx.held_out,
                               ctx.limits, [o.name for o in ctx.model.outputs],
                               declared=ctx.model.outputs)
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot run it drops out, others go on
        return _failed(cand, f"{target.caps.runtime} could not run the artifact: "
                             f"{type(exc).__name__}: {first_line(exc)}", ctx.pruning)
    failure = judge(fidelity, ctx.limits)
    kept, ops = keep_float, float_ops
    if (failure and not keep_float and cand.precision in ("int8", "int8-dynamic")
            and target.caps.keeps_float):
        recovered = _recover(target, cand.precision, ctx, settings)
        if recovered is not None:
            file, notes, fidelity, kept, ops = recovered
            failure = None
    artifact, files = _store(target, cand, file, (*notes, *plan_notes))
    artifact = replace(artifact, kept_float=tuple(kept), float_ops=ops,
                       fallbacks=fallbacks_in(notes))
    status, reason = ("rejected", failure) if failure else (
        "passed", passed_reason(fidelity, *(((), ()) if plan_notes else (kept, ops))))
    if plan_notes and not failure:
        reason += f", with {len(kept)} layer(s) in float by the mixed plan"
    if ctx.pruning is not None:
        reason = f"{reason}; {ctx.pruning.summary}"
    result = CandidateResult(candidate=cand, status=status, reason=reason, artifact=artifact,
                             fidelity=fidelity, pruning=ctx.pruning)
    nodes = (lambda a, f: target.node_outputs(a, ctx.model, f)) if target.caps.node_outputs \
        else None
    result = labelled(result, Path(ctx.model.path), file, ctx.held_out.feeds, nodes)
    return _Outcome(result=result, files=files, runner=None if failure else runner)


def _settings(ctx: _Context, target: Any, keep_float: tuple[str, ...] = (),
              float_ops: tuple[str, ...] = ()) -> ConvertSettings:
    """The conversion settings of ``target``: the nodes kept in float, and the options of the
    profile's accelerator it reaches (by its name, else by its runtime's)."""
    accel = ctx.accelerators.get(target.name, ctx.accelerators.get(target.caps.runtime, ()))
    return ConvertSettings(keep_float=keep_float, float_ops=float_ops, accelerator=accel)


def _workdir(ctx: _Context, target: str, settings: Any) -> Path:
    """Where ``target``'s conversions of this model and calibration set are cached."""
    if target == ORIGINAL:  # nothing is converted: the user's file is used as it is
        return ctx.workroot / ORIGINAL
    return ctx.workroot / workdir_name(target, settings)


def _target(name: str, ctx: _Context) -> Any:
    """The registered target ``name`` (given the user's file when it converts that itself), or
    the user's own file for ``original``."""
    if name == ORIGINAL and ctx.origin is not None:
        return original_target(ctx.origin, ctx.model)
    target = get_target(name)
    if ctx.origin is not None and ctx.origin.format in target.caps.origin_formats:
        return cast(OriginTarget, target).for_origin(ctx.origin)  # converts the user's file
    return target


def _doing(cand: Any, calib: int) -> str:
    """What the progress line says while a candidate's artifact is made."""
    if cand.target == ORIGINAL:
        return f"{cand.id}: your own file, nothing to convert"
    calibrating = f"calibrating on {calib} samples, " if cand.precision == "int8" else ""
    return f"{cand.id}: {calibrating}converting"


def _recover(target: Any, precision: str, ctx: _Context, settings: Any) -> Any:
    """Keep the most sensitive nodes in float until the candidate passes (None if never)."""
    log.info("%s-%s lost fidelity: searching for nodes to keep in float", target.name, precision)
    with progress.step(f"{target.name}-{precision}: searching for nodes to keep in float"):
        return recover(target, ctx.model, precision, ctx.calib, ctx.held_out, ctx.reference,
                       ctx.limits, lambda s: _workdir(ctx, target.name, s),
                       settings=settings)


def _failed(cand: Any, reason: str, pruning: Pruning | None = None) -> _Outcome:
    return _Outcome(result=CandidateResult(candidate=cand, status="failed", reason=reason,
                                           pruning=pruning), files={})


def _store(target: Any, cand: Any, file: Path,
           notes: tuple[str, ...]) -> tuple[Artifact, dict[str, Path]]:
    """The artifact's manifest entry and bundle-relative names of all its files."""
    base = file.name[: -len(target.caps.suffix)] if file.name.endswith(target.caps.suffix) \
        else file.stem
    extra = [file.with_name(base + s) for s in target.caps.companions]
    toolchain = target.caps.toolchain
    companions = tuple(StoredFile(file="", sha256=sha256_file(p), size_bytes=p.stat().st_size)
                       for p in extra)
    artifact = Artifact(candidate=cand, file="", sha256=sha256_file(file),
                        size_bytes=file.stat().st_size, runtime=target.caps.runtime, notes=notes,
                        companions=companions, toolchain=toolchain.versions() if toolchain else {})
    stem = f"artifacts/{artifact.release_id}"
    named = tuple(replace(c, file=f"{stem}{s}") for c, s in zip(companions,
                                                                target.caps.companions,
                                                                strict=True))
    artifact = replace(artifact, file=f"{stem}{target.caps.suffix}", companions=named)
    files = {artifact.file: file} | {c.file: p for c, p in zip(named, extra, strict=True)}
    return artifact, files


def _measured(outcomes: list[_Outcome], profile: Profile, options: OptimizeOptions,
              ctx: _Context) -> list[_Outcome]:
    """Time every passing candidate on this host with the profile's threads: the artifact files
    loaded and run as the device's agent loads and runs them, all interleaved (the same code
    and method as on a device); an accelerator's artifact only on its device (here, its
    vendor's estimate where there is one)."""
    timed = [o for o in outcomes if o.runner is not None and o.result.artifact is not None
             and not _target(o.result.candidate.target, ctx).caps.accelerator]
    if not options.measure or not timed:
        return [_with_estimate(o, ctx) for o in outcomes] if options.measure else outcomes
    threads = _threads(profile)
    files = {o.result.candidate.id: _main_file(o) for o in timed}
    log.info("timing %d candidates on this host (%d threads, %d interleaved rounds)",
             len(files), threads, options.rounds.rounds)
    benches = time_files_here(files, options.rounds, threads=threads, skip_failed=True)
    return [_with_estimate(replace(o, result=replace(o.result, bench=_labelled(benches, o))), ctx)
            for o in outcomes]


def _with_estimate(outcome: _Outcome, ctx: _Context) -> _Outcome:
    """The outcome, with its vendor's estimate when it was not timed."""
    if outcome.result.bench is not None:
        return outcome
    return replace(outcome, result=replace(outcome.result, bench=_estimate(outcome, ctx)))


def _estimate(outcome: _Outcome, ctx: _Context) -> Any:
    """A vendor's estimate of an accelerator artifact this host cannot time (Vela's), labelled
    as one, also for an artifact fidelity rejected (what the unit would give); None when its
    target makes none."""
    result = outcome.result
    if result.artifact is None:
        return None
    target = _target(result.candidate.target, ctx)
    if not target.caps.accelerator:  # an AcceleratorTarget offers estimate()
        return None
    try:
        return target.estimate(_main_file(outcome), ctx.model)
    except Exception as exc:  # noqa: BLE001 - a vendor tool's failure: no estimate, said so
        log.warning("%s: no estimate: %s", result.candidate.id, first_line(exc))
        return None


def _threads(profile: Profile) -> int:
    """The profile's threads, at most this host's cores."""
    return min(profile.compute.default_threads, os.cpu_count() or 1)


def _main_file(outcome: _Outcome) -> Path:
    artifact = outcome.result.artifact
    assert artifact is not None
    return outcome.files[artifact.file]


def _labelled(benches: dict[str, Any], outcome: _Outcome) -> Any:
    """The candidate's bench (None when it was not timed), under its artifact's runtime."""
    bench, artifact = benches.get(outcome.result.candidate.id), outcome.result.artifact
    return None if bench is None or artifact is None else replace(
        bench.planned_for(artifact), runtime=artifact.runtime)


def latency_budget(options: OptimizeOptions, profile: Profile) -> Budget | None:
    """The latency budget: ``--latency-budget``, else the profile's, else None."""
    return budget_for(options.latency_budget_ms, profile.budgets.latency_ms, "latency", "ms")


def _more(outcomes: list[_Outcome], profile: Profile, options: OptimizeOptions) -> More:
    """More rounds of the timed candidates on this host, for a winner not yet clear."""
    files = {o.result.candidate.id: _main_file(o) for o in outcomes
             if o.result.bench is not None and o.result.artifact is not None}
    return more_here(files, options.rounds, threads=_threads(profile))


def _mark(result: CandidateResult, chosen: str | None) -> CandidateResult:
    return replace(result, status="chosen") if result.candidate.id == chosen else result


# ---------------------------------------------------------------- intake: the original .tflite
# as the reference. No converter made a faithful ONNX model of it, so it runs on LiteRT and only
# the targets that read .tflite files (Capabilities.reads) make candidates from it.


def _tflite_runner(model: ModelInfo, threads: int) -> Any:
    """The reference .tflite loaded by the target that reads it."""
    _, target = next(iter(tflite_readers().values()))
    return target.load(Path(model.path), model, threads=threads)
