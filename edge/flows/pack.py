"""``edge pack plan|deploy PACK.yaml``: several models on one device, planned together, proven
by running them together, and switched as one.

1. Read PACK.yaml (paths inside its folder), check it against the profile before connecting:
   with the optimistic figures (``pack_options``), a pack no plan could meet (memory over the
   model budget, an objective faster than any unit) is refused, exit 2.
2. ``--dry-run``: the plan from estimates; nothing is converted or connected.
3. Else: optimize each model for the profile (its bundle kept under OUT), install every
   faithful candidate on the device, time them there at each thread count, plan
   (``edge.core.pack.solve``), then co-run the best plan on the device (the agent's ``corun``:
   each model alone, then all together at their rates). A plan whose co-run breaks an
   objective is followed by the next; none holding is a failed check (exit 1) naming the
   model and the objective.
4. ``deploy``: the accepted plan's releases made current in every model's slot as one (the
   agent's ``activate-pack``: journaled, a switch cut short is undone whole).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devices.connect import DeviceTarget, check_target_paths, device_python, transport_for
from devices.device import Device, open_device
from devices.lock import deploy_lock
from devices.measure import Rounds, time_on_device
from devices.release import (
    DEFAULT_KEEP,
    check_keep,
    install_artifact,
    prune_quietly,
    slot_name_for,
)
from edge.core import progress
from edge.core.bundle import is_bundle, read_bundle
from edge.core.documents import PackDocument, read_yaml
from edge.core.errors import CheckFailed, UsageError
from edge.core.files import write_atomic
from edge.core.intake import reference_model
from edge.core.model import inspect_model
from edge.core.pack import CPU, MAX_BUSY, Objective, Option, PackPlan, naive, refusal, solve
from edge.core.plan import Planned
from edge.core.profile import Profile, load_profile
from edge.core.select import runnable
from edge.core.values import Bundle, CandidateResult, ModelInfo
from edge.flows.optimize import OptimizeOptions, optimize
from edge.flows.pack_options import (
    BASE_MB,
    accelerator_of,
    estimated_options,
    thread_counts,
    units_of,
)
from edge.flows.planning import plan_for

__all__ = ["PackEntry", "PackReport", "PackRequest", "Tried", "corun", "read_pack", "run_pack"]

log = logging.getLogger("edge")

#: How candidates are timed on the device for the plan (each thread count in one bench).
ROUNDS = Rounds(rounds=3, calls=30, warmup=3)
#: A co-run's frames a model may drop and still hold its rate (the clock's own jitter).
DROP_SHARE = 0.01


@dataclass(frozen=True, kw_only=True, slots=True)
class PackEntry:
    """A model of the pack, its files resolved, with its objective."""

    name: str
    model: Path
    calib: Path | None = None
    eval: Path | None = None
    shapes: dict[str, tuple[int, ...]] | None = None
    objective: Objective


@dataclass(frozen=True, kw_only=True, slots=True)
class PackRequest:
    """What ``edge pack plan|deploy`` was asked."""

    pack: Path
    profile: str
    device: DeviceTarget = DeviceTarget()
    dry_run: bool = False
    deploy: bool = False
    seconds: float = 5.0  # each co-run phase
    tries: int = 3  # plans co-run before giving up
    keep: int = DEFAULT_KEEP
    out: Path | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Tried:
    """A plan co-run on the device: what each model did alone and together, what broke."""

    plan: PackPlan
    jobs: tuple[dict[str, Any], ...]
    peak_mb: float
    broken: tuple[str, ...]

    @property
    def accepted(self) -> bool:
        return not self.broken


@dataclass(frozen=True, kw_only=True, slots=True)
class PackReport:
    """What ``edge pack`` planned, measured and did."""

    pack: str
    profile: Profile
    entries: tuple[PackEntry, ...]
    units: tuple[Any, ...]
    plan: PackPlan
    naive: PackPlan
    where: str  # the figures' source: "estimate" or the device's label
    alternatives: tuple[PackPlan, ...] = ()  # the next best plans, tried in turn
    tried: tuple[Tried, ...] = ()
    deployed: bool = False
    switched: tuple[dict[str, Any], ...] = ()
    out: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def objectives(self) -> dict[str, Objective]:
        return {e.name: e.objective for e in self.entries}


def read_pack(path: Path) -> tuple[str, tuple[PackEntry, ...]]:
    """The pack's name and models, every path inside the pack file's folder and present."""
    doc: PackDocument = read_yaml("pack", path)
    folder = path.resolve().parent
    entries = tuple(_entry(folder, m, str(path)) for m in doc.models)
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{path}: two models named {twice[0]}: give each its own name:")
    return doc.name or path.stem.lower(), entries


def _entry(folder: Path, model: Any, where: str) -> PackEntry:
    file = _inside(folder, model.model, where)
    name = model.name or slot_name_for(str(_original(file)))
    rate = model.rate if model.rate is not None else 1.0
    return PackEntry(name=name, model=file, calib=_maybe(folder, model.calib, where),
                     eval=_maybe(folder, model.eval, where), shapes=model.shape,
                     objective=Objective(rate=rate, p99_ms=model.p99_ms,
                                         priority=model.priority))


def _original(file: Path) -> Path:
    """The user's model file a bundle was made from (its stem names the slot), else ``file``."""
    if not is_bundle(file):
        return file
    bundle = read_bundle(file)
    return Path((bundle.origin or bundle.source).path)


def _maybe(folder: Path, text: str | None, where: str) -> Path | None:
    return None if text is None else _inside(folder, text, where)


def _inside(folder: Path, text: str, where: str) -> Path:
    """A path the pack names: relative, inside its folder (links resolved), an existing file."""
    path = (folder / text).resolve()
    if Path(text).is_absolute() or not path.is_relative_to(folder):
        raise UsageError(f"{where}: {text} is outside the pack's folder {folder}: give a path "
                         "relative to it, inside it")
    if not path.exists():
        raise UsageError(f"{where}: {text} not found (in {folder})")
    return path


def run_pack(request: PackRequest) -> PackReport:
    """Plan (and with ``deploy``, switch) the pack; see the module docstring."""
    check_keep(request.keep)
    if request.tries < 1 or not 0 < request.seconds <= 600:
        raise UsageError("--tries must be >= 1 and --seconds in (0, 600]")
    name, entries = read_pack(request.pack)
    profile = load_profile(request.profile)
    _refuse_impossible(profile, entries)
    if request.dry_run:
        return _estimated(name, profile, entries)
    check_target_paths(request.device, profile)
    return _on_device(request, name, profile, entries)


def _refuse_impossible(profile: Profile, entries: Sequence[PackEntry]) -> None:
    """Exit 2 before connecting when even the optimistic figures meet no plan."""
    options, units = _estimates(profile, entries, profile.compute.cores, optimistic=True)
    best = solve(options, _objectives(entries), units, profile.memory.model_budget_mb, keep=1)
    why = refusal(best[0], _objectives(entries), profile.memory.model_budget_mb, profile.id)
    if why is not None:
        raise UsageError(f"pack cannot run on {profile.id}: {why}, even at the best any "
                         "runtime could do; lower the rate, relax the objective or drop a "
                         "model")


def _objectives(entries: Sequence[PackEntry]) -> dict[str, Objective]:
    return {e.name: e.objective for e in entries}


def _estimates(profile: Profile, entries: Sequence[PackEntry], cores: int,
               optimistic: bool = False) -> tuple[dict[str, list[Option]], tuple[Any, ...]]:
    options = {}
    for entry in entries:
        info, plan = _planned_candidates(profile, entry)
        options[entry.name] = estimated_options(profile, info, entry.name, plan, cores,
                                                optimistic=optimistic)
        if not options[entry.name]:
            raise UsageError(f"{entry.name}: no candidate of {entry.model.name} can run on "
                             f"{profile.id} (edge optimize --dry-run shows why)")
    return options, units_of(profile, cores)


def _planned_candidates(profile: Profile, entry: PackEntry
                        ) -> tuple[ModelInfo, tuple[Planned, ...]]:
    """The model and the candidates to estimate: a bundle's faithful ones (its source as the
    manifest describes it), else the plan of the model file."""
    if is_bundle(entry.model):
        bundle = read_bundle(entry.model)
        faithful = runnable(bundle.candidates, bundle.chosen, frozenset(profile.runtimes))
        return bundle.source, tuple(Planned(candidate=r.candidate, keep=True, reason="")
                                    for r in faithful)
    origin, reference = reference_model(entry.model, shapes=entry.shapes)
    info = inspect_model(reference)
    return info, plan_for(profile, info, origin_format=origin.format)


def _estimated(name: str, profile: Profile, entries: Sequence[PackEntry]) -> PackReport:
    options, units = _estimates(profile, entries, profile.compute.cores)
    return _planned(name, profile, entries, options, units, "estimate",
                    notes=("dry run: figures are estimates from the profile (nothing was "
                           "converted, verified or timed); int8 candidates are assumed to keep "
                           "fidelity",))


def _planned(name: str, profile: Profile, entries: Sequence[PackEntry],
             options: Mapping[str, Sequence[Option]], units: tuple[Any, ...], where: str,
             notes: tuple[str, ...] = ()) -> PackReport:
    objectives = _objectives(entries)
    budget = profile.memory.model_budget_mb
    plans = solve(options, objectives, units, budget)
    why = refusal(plans[0], objectives, budget, profile.id)
    if why is not None:
        raise UsageError(f"pack cannot run on {profile.id}: {why}")
    baseline = naive(options, objectives, units, budget, _default_threads(profile, units))
    return PackReport(pack=name, profile=profile, entries=tuple(entries), units=units,
                      plan=plans[0], naive=baseline, where=where, notes=notes,
                      alternatives=tuple(p for p in plans[1:] if p.meets))


def _default_threads(profile: Profile, units: Sequence[Any]) -> int:
    cores = next(u.cores for u in units if u.name == CPU)
    return min(profile.compute.threads or cores, cores)


def _on_device(request: PackRequest, name: str, profile: Profile,
               entries: Sequence[PackEntry]) -> PackReport:
    out = request.out or Path(f"{name}-{profile.id}.pack")
    bundles = {e.name: _bundle(e, profile, out) for e in entries}
    with transport_for(request.device, profile) as transport:
        python = device_python(request.device, profile, transport)
        device = open_device(transport, python=python, work_dir=profile.access.work_dir)
        cores = _device_cores(device, profile)
        options = _measured(device, profile, bundles, out, cores)
        report = _planned(name, profile, entries, options, units_of(profile, cores),
                          device.label)
        tried = _co_runs(device, report, request)
        report = replace(report, tried=tried, out=str(out))
        accepted = next((t for t in tried if t.accepted), None)
        if accepted is None:
            _write(out, report)
            raise CheckFailed(f"no plan held every objective when run together on "
                              f"{device.label}: {'; '.join(tried[0].broken)} (the report: "
                              f"{out}/pack.json)")
        report = replace(report, plan=accepted.plan)
        if request.deploy:
            report = replace(report, deployed=True,
                             switched=_switch(device, accepted.plan, bundles, request.keep))
    _write(out, report)
    return report


def _device_cores(device: Device, profile: Profile) -> int:
    reply = device.call("probe", timeout=120)
    cores = (reply.get("device") or {}).get("cores")
    return int(cores) if isinstance(cores, int) and cores > 0 else profile.compute.cores


def _bundle(entry: PackEntry, profile: Profile, out: Path) -> tuple[Bundle, Path]:
    """The model's bundle: as the pack names it (made by edge optimize), else optimized now
    into OUT/NAME.bundle."""
    if is_bundle(entry.model):
        bundle = read_bundle(entry.model)
        if bundle.chosen is None:
            raise CheckFailed(f"{entry.name}: {entry.model} has no chosen candidate (none kept "
                              "fidelity)")
        return bundle, entry.model
    where = out / f"{entry.name}.bundle"
    options = OptimizeOptions(calib=entry.calib, eval=entry.eval, shapes=entry.shapes,
                              device_measures=True)
    try:
        with progress.step(f"{entry.name}: optimizing {entry.model.name} for {profile.id}"):
            bundle = optimize(entry.model, profile, where, options)
    except UsageError as exc:
        raise UsageError(f"pack model {entry.name}: {exc}") from None
    if bundle.chosen is None:
        raise CheckFailed(f"{entry.name}: {bundle.reason} (see {where}/manifest.json)")
    return bundle, where


def _measured(device: Device, profile: Profile, bundles: Mapping[str, tuple[Bundle, Path]],
              out: Path, cores: int) -> dict[str, list[Option]]:
    """Every faithful candidate of every model installed, then timed on the device at each
    thread count (all of them in one interleaved bench per count)."""
    files: dict[str, tuple[str, CandidateResult]] = {}
    for name, (bundle, folder) in bundles.items():
        for result in runnable(bundle.candidates, bundle.chosen, device.runtimes):
            assert result.artifact is not None
            path, _ = install_artifact(device, folder, result.artifact)
            files[f"{name}/{result.candidate.id}"] = (path, result)
    options: dict[str, list[Option]] = {name: [] for name in bundles}
    for threads in thread_counts(profile, cores):
        benches = time_on_device(device, {k: p for k, (p, _) in files.items()}, ROUNDS,
                                 threads=threads, skip_failed=True, observe=False)
        for key, bench in benches.items():
            name = key.split("/", 1)[0]
            options[name] += _device_options(profile, name, files[key], bench, threads,
                                             device.label)
    return options


def _device_options(profile: Profile, name: str, found: tuple[str, CandidateResult],
                    bench: Any, threads: int, label: str) -> list[Option]:
    path, result = found
    assert result.artifact is not None
    size_mb = result.artifact.total_bytes / 1e6
    option = Option(model=name, candidate=result.candidate.id, unit=CPU, threads=threads,
                    p50_ms=bench.p50_ms, p99_ms=bench.p99_ms, peak_mb=BASE_MB + 1.5 * size_mb,
                    source=f"measured on {label}", file=path)
    accel = accelerator_of(profile, result.artifact.runtime)
    if accel is None:
        return [option]
    if threads != 1:
        return []
    units = [u.name for u in units_of(profile) if u.runtime == accel.runtime]
    return [replace(option, unit=unit) for unit in units]


def _co_runs(device: Device, report: PackReport, request: PackRequest) -> tuple[Tried, ...]:
    """The best plans co-run on the device in turn until one holds (at most ``tries``)."""
    plans = [report.plan, *report.alternatives][:request.tries]
    tried = []
    for plan in plans:
        tried.append(corun(device, plan, report.objectives, request.seconds,
                           report.profile.memory.model_budget_mb))
        if tried[-1].accepted:
            break
        log.warning("%s: the plan broke when run together (%s); trying the next",
                    device.label, "; ".join(tried[-1].broken))
    return tuple(tried)


def corun(device: Device, plan: PackPlan, objectives: Mapping[str, Objective],
          seconds: float, budget_mb: float) -> Tried:
    """Run every model of ``plan`` on the device at its rate, alone then together; what
    broke (objectives checked on the together phase; memory against ``budget_mb``)."""
    jobs = [{"name": p.option.model, "model": p.option.file, "rate": objectives[
        p.option.model].rate, "threads": p.option.threads,
        "cores": list(p.cores) if p.pinned else None, "unit": p.option.unit}
        for p in plan.placed]
    with progress.step(f"{device.label}: running {len(jobs)} models together "
                       f"({2 * seconds:g} s each, alone then together)"):
        reply = device.call("corun", "--jobs", json.dumps(jobs), "--seconds", str(seconds),
                            timeout=60 + (len(jobs) + 1) * (seconds + 120))
    done = tuple(reply["jobs"])
    broken = [b for job in done for b in _broken(job, objectives[job["name"]])]
    if reply["peak_mb"] > budget_mb:
        broken.append(f"the models' processes peaked at {reply['peak_mb']:.0f} MB together, "
                      f"over the model budget of {budget_mb:.0f} MB")
    return Tried(plan=plan, jobs=done, peak_mb=float(reply["peak_mb"]), broken=tuple(broken))


def _broken(job: Mapping[str, Any], objective: Objective) -> list[str]:
    together = job["together"]
    found = []
    if together["dropped"] > DROP_SHARE * together["frames"] or together["served"] == 0:
        found.append(f"{job['name']} dropped {together['dropped']} of {together['frames']} "
                     f"frames at {objective.rate:g}/s (fell behind)")
    p99 = together.get("p99_ms")
    if objective.p99_ms is not None and p99 is not None and p99 > objective.p99_ms:
        found.append(f"{job['name']} p99 {p99:.3g} ms together, over its objective of "
                     f"{objective.p99_ms:g} ms")
    return found


def _switch(device: Device, plan: PackPlan, bundles: Mapping[str, tuple[Bundle, Path]],
            keep: int) -> tuple[dict[str, Any], ...]:
    """Every model's chosen release current in its slot, as one; then prune."""
    pairs = []
    for placed in plan.placed:
        bundle, _ = bundles[placed.option.model]
        result = next(c for c in bundle.candidates if c.candidate.id == placed.option.candidate)
        assert result.artifact is not None
        pairs.append(f"{placed.option.model}={result.artifact.release_id[:16]}:"
                     f"{result.candidate.id}")
    with deploy_lock(device, "pack deploy"):
        with progress.step(f"{device.label}: switching {len(pairs)} models as one"):
            reply = device.call("activate-pack", device.work,
                                *[a for p in pairs for a in ("--set", p)])
        prune_quietly(device, keep)
    return tuple(reply["slots"])


def _write(out: Path, report: PackReport) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "pack.json", json.dumps(report_json(report), indent=2) + "\n")


def report_json(report: PackReport) -> dict[str, Any]:
    """The report as ``--json`` prints it and OUT/pack.json keeps it."""
    objectives = report.objectives
    return {"pack": report.pack, "profile": report.profile.id, "figures": report.where,
            "units": [{"name": u.name, "kind": u.kind, "cores": u.cores} for u in report.units],
            "plan": plan_json(report.plan, objectives),
            "naive": plan_json(report.naive, objectives),
            "tried": [_tried_json(t, objectives) for t in report.tried],
            "deployed": report.deployed, "switched": list(report.switched),
            "max_busy": MAX_BUSY, "out": report.out, "notes": list(report.notes)}


def plan_json(plan: PackPlan, objectives: Mapping[str, Objective]) -> dict[str, Any]:
    """A plan: each model's option and placement, its headroom and throughput."""
    return {"meets": plan.meets, "headroom": round(plan.headroom, 3),
            "throughput_per_s": round(plan.throughput(objectives), 3),
            "memory_mb": round(plan.memory_mb, 1), "search": plan.how,
            "models": [{"name": p.option.model, "candidate": p.option.candidate,
                        "unit": p.option.unit, "threads": p.option.threads,
                        "cores": list(p.cores), "pinned": p.pinned,
                        "rate": objectives[p.option.model].rate,
                        "p99_objective_ms": objectives[p.option.model].p99_ms,
                        "alone_p50_ms": round(p.option.p50_ms, 4),
                        "alone_p99_ms": round(p.option.p99_ms, 4),
                        "expected_p99_ms": round(p.p99_ms, 4), "busy": round(p.busy, 3),
                        "peak_mb": round(p.option.peak_mb, 1), "source": p.option.source,
                        "file": p.option.file}
                       for p in plan.placed]}


def _tried_json(tried: Tried, objectives: Mapping[str, Objective]) -> dict[str, Any]:
    return {"accepted": tried.accepted, "broken": list(tried.broken),
            "peak_mb": tried.peak_mb, "models": [dict(j) for j in tried.jobs]}
