"""``edge deploy``: a model or bundle to a device (SSH or the embedded local device);
``edge rollback`` and ``edge releases``: the device's release history."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devices.connect import (
    AccessOnly,
    DeviceTarget,
    check_target_paths,
    device_python,
    profile_host,
    transport_for,
)
from devices.deploy import (
    DeployOutcome,
    as_planned,
    deploy_artifact,
    device_benches,
    install_all,
    measure_on_device,
)
from devices.device import Device, open_device
from devices.lock import deploy_lock
from devices.measure import Rounds, more_on_device
from devices.release import (
    DEFAULT_KEEP,
    ReleasesReport,
    RollbackReport,
    check_keep,
    check_name,
    list_releases,
    prune_quietly,
    rollback,
    slot_name_for,
    slot_of_bundle,
)
from devices.transport import Transport
from edge.core import progress
from edge.core.bundle import is_bundle, read_bundle
from edge.core.documents import parse
from edge.core.errors import CheckFailed, DeviceError, UsageError
from edge.core.intake import check_model_file
from edge.core.model import sha256_file
from edge.core.plugins import full_suffix
from edge.core.profile import Profile, catalog_ids, load_profile
from edge.core.results import Comparison, check_baseline, compare, load_baseline
from edge.core.select import Budget, runnable, within_budget
from edge.core.settle import settle
from edge.core.values import (
    Artifact,
    Bundle,
    Candidate,
    CandidateResult,
    DeployReport,
    MeasuredCandidate,
    StoredFile,
)
from edge.flows.latency_data import keep_result
from edge.flows.optimize import OptimizeOptions, latency_budget, optimize
from targets import artifact_suffixes, target_for_suffix
from targets.provision import provision_runtime, runtime_for_bundle

__all__ = ["BenchOutcome", "BenchRequest", "DEFAULT_KEEP", "DeployRequest", "DeviceTarget",
           "ReleasesRequest", "RollbackRequest", "access_profile", "build_bundle", "deploy",
           "describe", "measures_on_device", "measuring_device", "opened_device",
           "resolve_profile", "run_bench", "run_deploy", "run_deploy_outcome", "run_gated_bench",
           "run_releases", "run_rollback"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class DeployRequest:
    """Everything ``edge deploy`` was asked."""

    source: Path
    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    options: OptimizeOptions = OptimizeOptions()
    out: Path | None = None
    #: every faithful candidate timed on the device, the choice made from those timings; None:
    #: the default, yes for any device but the embedded local one (``measures_on_device``)
    measure_on_device: bool | None = None
    allow_fallback: bool = False  # deploy an artifact that ran away from its accelerator
    keep: int = DEFAULT_KEEP  # releases kept on the device (the active and previous always)
    #: the model's slot on the device (its own current release and rollback); None: the
    #: model file's stem
    name: str | None = None
    #: the bundle's candidate to deploy as asked (its id, e.g. tflite-fp32); None: the choice
    candidate: str | None = None


def run_deploy(request: DeployRequest) -> tuple[DeployReport, Bundle, Path]:
    """Optimize if needed, connect, push, benchmark on the device, return the report."""
    outcome, bundle, bundle_dir = run_deploy_outcome(request)
    return outcome.report, bundle, bundle_dir


def run_deploy_outcome(request: DeployRequest) -> tuple[DeployOutcome, Bundle, Path]:
    """As run_deploy, with the whole ``devices.deploy.DeployOutcome``: the report plus bytes
    sent, the health check, the previous release (rollback target) and pruned releases. The
    measurement is kept in the device's history (``edge.core.results``)."""
    read = _check_source(request)
    _check_keep(request.keep)
    _check_name(request.name)
    _check_candidate(request, read)
    profile = _profile(request, read=read)
    _check_paths(request.device, profile)
    with transport_for(request.device, profile) as transport:
        log.info("connecting to %s", transport.label)
        with progress.step(f"connecting to {transport.label}"):
            transport.home()  # connect and authenticate before any work: fail fast, write nothing
        transport.close()  # a long conversion must not hold an idle session open; reconnects
        fastest = request.candidate is None and measures_on_device(request.measure_on_device,
                                                                   local=transport.is_local)
        # the device's timings will choose: optimize keeps what could win there
        # --candidate given a model: every candidate converted, so the one asked for is made
        options = replace(request.options, device_measures=fastest,
                          exhaustive=request.options.exhaustive or request.candidate is not None)
        bundle, bundle_dir = _bundle(replace(request, options=options), profile, read)
        log.info("deploying %s to %s", bundle.chosen, transport.label)
        python = device_python(request.device, profile, transport)
        if request.device.provision:
            python = _provision(transport, python, profile, runtime_for_bundle(bundle))
        rounds, threads = _bench(request.device, profile)
        outcome = deploy(bundle_dir, bundle, transport, profile=profile, python=python,
                         work_dir=profile.access.work_dir, rounds=rounds, threads=threads,
                         keep=request.keep, fastest=fastest, name=request.name,
                         budget=latency_budget(request.options, profile) if fastest else None,
                         opted_out=request.measure_on_device is False,
                         candidate=request.candidate, allow_fallback=request.allow_fallback)
    keep_result(outcome.report, bundle)
    return outcome, bundle, bundle_dir


def measures_on_device(asked: bool | None, *, local: bool) -> bool:
    """Whether deploy times every faithful candidate on the device: as asked (--on-device,
    --no-on-device), else on any device but the embedded local one (a device at hand decides)."""
    return (not local) if asked is None else asked


@dataclass(frozen=True, kw_only=True, slots=True)
class RollbackRequest:
    """What ``edge rollback`` was asked: which device, and which release (None: previous)."""

    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    to: str | None = None
    name: str | None = None  # the model's slot (None: the device's only one)


def run_rollback(request: RollbackRequest) -> RollbackReport:
    """Switch a model's slot back to its previous release (or ``to``) after a health check;
    returns ``devices.release.RollbackReport``. A malformed ``to`` or name fails before
    connecting."""
    _check_name(request.name)
    profile = access_profile(request.profile)
    _check_paths(request.device, profile)
    with transport_for(request.device, profile) as transport:
        return rollback(transport, python=device_python(request.device, profile, transport),
                        work_dir=profile.access.work_dir, to=request.to, name=request.name)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleasesRequest:
    """What ``edge releases`` was asked; ``prune_keep`` first prunes to that many."""

    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    prune_keep: int | None = None
    name: str | None = None  # the model's slot (None: the device's only one, else every slot)


def run_releases(request: ReleasesRequest) -> ReleasesReport:
    """The device's releases and slots; a slot's active release, rollback target and switch
    history (``devices.release.ReleasesReport``)."""
    if request.prune_keep is not None:
        _check_keep(request.prune_keep)
    _check_name(request.name)
    profile = access_profile(request.profile)
    _check_paths(request.device, profile)
    with transport_for(request.device, profile) as transport:
        return list_releases(transport, python=device_python(request.device, profile, transport),
                             work_dir=profile.access.work_dir, prune_keep=request.prune_keep,
                             name=request.name)


def access_profile(ref: str | None) -> Profile | AccessOnly:
    """The profile for access settings; without one, the defaults (local device, ~/.edge)."""
    return AccessOnly() if ref is None else load_profile(ref)


@contextlib.contextmanager
def opened_device(target: DeviceTarget, profile_ref: str | None) -> Iterator[Device]:
    """A ``devices.device.Device`` (agent pushed, runtimes probed) for commands that measure
    on it: --host, else the profile's access.host, else the embedded local device."""
    profile = access_profile(profile_ref)
    _check_paths(target, profile)
    with transport_for(target, profile) as transport:
        yield open_device(transport, python=device_python(target, profile, transport),
                          work_dir=profile.access.work_dir)


@contextlib.contextmanager
def measuring_device(target: DeviceTarget, profile: Any, runtime: str) -> Iterator[Device]:
    """The device to measure on, opened as deploy opens it: paths checked before connecting,
    --host else the profile's access else the local device, ``runtime`` provisioned with
    --provision, the agent pushed and its runtimes probed."""
    _check_paths(target, profile)
    with transport_for(target, profile) as transport:
        python = device_python(target, profile, transport)
        if target.provision:
            python = _provision(transport, python, profile, runtime)
        yield open_device(transport, python=python, work_dir=profile.access.work_dir)


def _check_paths(device: DeviceTarget, profile: Any) -> None:
    check_target_paths(device, profile)


def _check_name(name: str | None) -> None:
    if name is not None:
        check_name(name)


def _check_keep(keep: int) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise UsageError(f"--keep {keep!r}: keep at least 1 release")


def deploy(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, profile: Profile, python: str,
    work_dir: str, rounds: Rounds, threads: int, keep: int = DEFAULT_KEEP, fastest: bool = False,
    budget: Budget | None = None, opted_out: bool = False, name: str | None = None,
    candidate: str | None = None, allow_fallback: bool = False,
) -> DeployOutcome:
    """Deploy a bundle: its chosen artifact (or the first faithful one the device runs), or with
    ``fastest`` every faithful candidate measured on the device and the one ``edge.core.select``
    chooses activated (with a latency ``budget``: among those within it on the device, the one
    that loses the least fidelity). ``profile`` is the device's profile (its runtime order and
    power estimate). ``opted_out``: the user said --no-on-device (the reason says so).
    ``name``: the model's slot on the device (None: the stem of the bundle's source model).
    ``candidate``: the faithful candidate to deploy as asked (``edge deploy --candidate``).
    Only files the device lacks (by sha256) are sent; the release becomes current only after
    its health check and benchmark passed (and it ran on the unit it was made for, unless
    ``allow_fallback``); afterwards releases beyond ``keep`` are pruned."""
    check_keep(keep)
    slot = check_name(name) if name is not None else slot_of_bundle(bundle)
    device = open_device(transport, python=python, work_dir=work_dir)
    with deploy_lock(device):
        if fastest:
            return _deploy_fastest(device, bundle_dir, bundle, profile=profile, rounds=rounds,
                                   threads=threads, keep=keep, budget=budget, name=slot,
                                   allow_fallback=allow_fallback)
        result = (_asked_on(bundle, candidate, device) if candidate is not None
                  else _usable(bundle, device.runtimes, device.label)[0])
        assert result.artifact is not None
        outcome = deploy_artifact(device, bundle_dir, result.artifact, profile=profile,
                                  rounds=rounds, threads=threads, keep=keep, name=slot,
                                  allow_fallback=allow_fallback)
    why = _why(bundle, result, asked=candidate is not None) + (OPTED_OUT if opted_out else "")
    return replace(outcome, report=replace(outcome.report, reason=why))


#: What plain deploy's reason adds when the user opted out of measuring every candidate.
OPTED_OUT = ("; --no-on-device: the other faithful candidates were not measured on the device "
             "(without it, edge times them all there and chooses from those timings)")


def _why(bundle: Bundle, result: CandidateResult, *, asked: bool = False) -> str:
    """Why plain deploy sent this candidate: asked for by --candidate, the bundle's choice,
    or the device lacked its runtime."""
    if asked:
        return (f"asked for with --candidate {result.candidate.id} (the bundle chose "
                f"{bundle.chosen}); it kept fidelity: {result.reason}")
    if result.candidate.id == bundle.chosen:
        return f"the bundle's choice: {bundle.reason}"
    chosen = bundle.chosen_result()
    need = chosen.artifact.runtime if chosen and chosen.artifact else "?"
    return (f"the bundle chose {bundle.chosen}, but the device has no {need} runtime; "
            f"deployed {result.candidate.id}, the first faithful candidate it can run")


def _deploy_fastest(device: Device, bundle_dir: Path, bundle: Bundle, *, profile: Profile,
                    rounds: Rounds, threads: int, keep: int, budget: Budget | None, name: str,
                    allow_fallback: bool) -> DeployOutcome:
    """Every faithful candidate the device runs installed and timed there, the choice live."""
    installed, transfer = install_all(device, bundle_dir,
                                      _usable(bundle, device.runtimes, device.label))
    models = {r.candidate.id: m for r, m in installed}
    benches, how = device_benches(device, installed, rounds, threads)
    measured = as_planned(installed, benches, allowed=allow_fallback)
    ms = {k: b.p50_ms for k, b in benches.items()}
    try:
        pool, note = within_budget(measured, ms, budget, device.label)
    except CheckFailed:
        prune_quietly(device, keep)  # the installed candidates, never activated
        raise
    together = how == "in one interleaved bench"  # more rounds only of what ran together
    more = more_on_device(device, models, rounds, threads=threads) if together else None
    choice, contest, _ = settle(pool, tuple(profile.runtimes),
                                {r.candidate.id: _round_ms(benches[r.candidate.id])
                                 for r in pool}, more, where=f"{device.label} {how}")
    chosen = next(r for r in measured if r.candidate.id == choice.id)
    assert chosen.artifact is not None
    outcome = deploy_artifact(device, bundle_dir, chosen.artifact, profile=profile, rounds=rounds,
                              threads=threads, keep=keep, name=name, allow_fallback=allow_fallback)
    paired = {s.candidate: s.paired_ms for s in contest.standings} if contest else {}
    compared = tuple(MeasuredCandidate(candidate=r.candidate.id, bench=replace(
        benches[r.candidate.id], paired_ms=paired.get(r.candidate.id))) for r in measured)
    report = replace(outcome.report, compared=compared, reason=note + choice.reason,
                     contest=contest)
    return replace(outcome, report=report, transfer=transfer)


def asked_candidate(bundle: Bundle, wanted: str, source: Path | str) -> CandidateResult:
    """The bundle's faithful candidate ``wanted`` with its artifact, or a UsageError naming
    the ones that can be deployed."""
    found = next((c for c in bundle.candidates if c.candidate.id == wanted), None)
    faithful = [c.candidate.id for c in bundle.candidates
                if c.status in ("chosen", "passed") and c.artifact is not None]
    choices = f"deployable: {', '.join(faithful)}" if faithful else "none kept fidelity"
    if found is None:
        raise UsageError(f"--candidate {wanted}: {source} has no such candidate ({choices})")
    if found.status not in ("chosen", "passed") or found.artifact is None:
        more = (" (edge optimize --exhaustive converts every candidate)"
                if found.status == "skipped" else "")
        raise UsageError(f"--candidate {wanted}: it was {found.status}: {found.reason}{more}; "
                         f"{choices}")
    return found


def _asked_on(bundle: Bundle, wanted: str, device: Device) -> CandidateResult:
    """The asked candidate, if the device has its runtime (else a DeviceError)."""
    result = asked_candidate(bundle, wanted, "the bundle")
    assert result.artifact is not None
    if result.artifact.runtime not in device.runtimes:
        have = ", ".join(sorted(device.runtimes)) or "none"
        raise DeviceError(f"{device.label} has no {result.artifact.runtime} runtime for "
                          f"--candidate {wanted} (has {have}); give --provision or pick "
                          "another candidate")
    return result


def _check_candidate(request: DeployRequest, read: Bundle | None) -> None:
    """--candidate, before connecting: no contest on the device; a bundle's must be faithful."""
    if request.candidate is None:
        return
    if request.measure_on_device:
        raise UsageError(f"--candidate {request.candidate} deploys that candidate as asked; "
                         "--on-device times every candidate to choose one: give one of them")
    if read is not None:
        asked_candidate(read, request.candidate, request.source)


def _round_ms(bench: Any) -> tuple[float, ...]:
    """A device timing's round medians (one figure when the agent recorded none)."""
    return tuple(bench.round_ms) or (bench.p50_ms,)


def _usable(bundle: Bundle, runtimes: frozenset[str], label: str) -> list[CandidateResult]:
    """Faithful candidates the device can run, the bundle's chosen one first."""
    if bundle.chosen_result() is None:
        raise DeviceError("the bundle has no chosen candidate (none kept fidelity); "
                          "fix the model or relax --max-drop, then re-run edge optimize")
    found = runnable(bundle.candidates, bundle.chosen, runtimes)
    if found:
        return found
    faithful = [c for c in bundle.candidates if c.status in ("chosen", "passed")]
    need = ", ".join(sorted({c.artifact.runtime for c in faithful if c.artifact}))
    have = ", ".join(sorted(runtimes)) or "none"
    raise DeviceError(f"{label} has no runtime for this bundle (needs one of {need}; has "
                      f"{have}): install one into the device's python, e.g. pip install "
                      "ai-edge-litert, onnxruntime or openvino")


def _provision(transport: Any, python: str, profile: Any, runtime: str) -> str:
    """--provision: the runtime into WORK/venv from wheels fetched on this host (the device
    needs no internet); returns the venv's python, the device python from then on."""
    with progress.step(f"{transport.label}: provisioning {runtime}"):
        report = provision_runtime(transport, device_python=python,
                                   work_dir=profile.access.work_dir, runtime=runtime)
    log.info("provisioned %s %s into %s on %s (%d wheels sent, %d already there%s)", runtime,
             report.runtime_version, report.venv, transport.label, report.files_sent,
             report.files_reused, "" if report.installed else ", nothing to install")
    return report.python


def _bench(device: DeviceTarget, profile: Any) -> tuple[Rounds, int]:
    """How to time on the device (``devices.measure.Rounds``: --runs timed calls in all, --warmup
    before each block) and with how many threads (--threads, else the profile's)."""
    threads = device.threads if device.threads is not None else profile.compute.default_threads
    return Rounds(calls=device.runs, warmup=device.warmup), threads


def describe(request: DeployRequest) -> dict[str, Any]:
    """What run_deploy would do, without doing it."""
    read = _check_source(request)
    _check_name(request.name)
    _check_candidate(request, read)
    profile = _profile(request, read=read)
    _check_paths(request.device, profile)
    host = request.device.host or profile_host(profile)
    where = host or "the embedded local device"
    steps = []
    slot = request.name or (slot_of_bundle(read) if read else slot_name_for(str(request.source)))
    fastest = (("every faithful candidate ", "the one chosen from those timings")
               if request.candidate is None
               and measures_on_device(request.measure_on_device, local=host is None)
               else ("", "it"))
    if not _is_bundle(request.source):
        out = request.out or Path(f"{request.source.stem}-{profile.id}.bundle")
        every = ", converting every candidate" if request.candidate is not None else ""
        steps.append(f"optimize {request.source} for {profile.id} into {out}{every}")
    which = (f"candidate {request.candidate}'s" if request.candidate is not None
             else "the chosen artifact's")
    steps += [f"connect to {where}",
              f"push the agent and {which} files the device lacks (sha256-checked)",
              "health-check it on the device (load and run once)",
              f"benchmark {fastest[0]}on the device ({request.device.runs} timed runs in "
              f"interleaved rounds, {request.device.warmup} warm-up runs before each)",
              f"switch the current release of the model's slot {slot!r} to {fastest[1]} (the "
              "device's other models keep theirs)",
              f"keep the {request.keep} most recently used releases (always the previous one)"]
    return {"profile": profile.id, "target": where, "steps": steps}


def _is_bundle(path: Path) -> bool:
    return is_bundle(path)


def _check_source(request: DeployRequest) -> Bundle | None:
    """The bundle, read and checked (containment, sizes, sha256) before any connection; or
    None for a model, whose file is checked as cheaply as it can be."""
    if not request.source.exists():
        raise UsageError(f"{request.source} does not exist: give an .onnx model or a bundle dir")
    if _is_bundle(request.source):  # a malformed or escaping bundle fails before connecting
        return read_bundle(request.source)
    if request.profile is None:
        raise UsageError("deploying a model needs --profile (e.g. --profile rpi4)")
    # a corrupt model, or one that would run code, fails before any connection
    check_model_file(request.source, trust_code=request.options.trust_code)
    return None


def _profile(request: DeployRequest | BenchRequest, default: str | None = None,
             read: Bundle | None = None) -> Any:
    """--profile, else the bundle's (a user profile is kept in its manifest; ``read``: the
    bundle already read), else default."""
    if request.profile is not None:
        return load_profile(request.profile)
    if not _is_bundle(request.source) and default is not None:
        return load_profile(default)
    bundle = read or read_bundle(request.source)
    if bundle.profile in catalog_ids():
        return load_profile(bundle.profile)
    if not bundle.profile_spec:
        raise UsageError(f"{request.source}: its profile {bundle.profile!r} is not a built-in "
                         "one and the manifest holds no profile_spec: give --profile")
    # a user profile, kept in the manifest: validated as a profile document; how to reach the
    # device never comes from a bundle (profile or command line only)
    spec = parse("profile", bundle.profile_spec, f"{request.source}: profile_spec")
    return spec.model_copy(update={"access": type(spec.access)()})


def _bundle(request: DeployRequest, profile: Any,
            read: Bundle | None = None) -> tuple[Bundle, Path]:
    if _is_bundle(request.source):
        bundle = read or read_bundle(request.source)
        if bundle.chosen is None:
            raise CheckFailed(f"{request.source} has no chosen candidate (none kept fidelity): "
                              "fix the model or relax --max-drop/--min-cosine and re-optimize")
        if bundle.profile != profile.id:
            log.warning("bundle was optimized for %s, deploying with %s", bundle.profile,
                        profile.id)
        _warn_unjudged_budgets(request, profile)
        return bundle, request.source
    out = request.out or Path(f"{request.source.stem}-{profile.id}.bundle")
    bundle = optimize(request.source, profile, out, request.options)
    if bundle.chosen is None:
        raise CheckFailed(f"{bundle.reason} (see {out}/manifest.json); nothing was deployed")
    return bundle, out


def _warn_unjudged_budgets(request: DeployRequest, profile: Any) -> None:
    """A bundle's choice was made when it was optimized: its budgets then, not these."""
    options = request.options
    local = (request.device.host or profile_host(profile)) is None
    on_device = measures_on_device(request.measure_on_device, local=local)
    if options.size_budget_mb is not None or (options.latency_budget_ms is not None
                                              and not on_device):
        log.warning("budget flags are not applied to an existing bundle (its choice was made "
                    "when it was optimized; --on-device judges --latency-budget on the "
                    "device): re-optimize the model with them")


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchRequest:
    """What ``edge bench`` was asked: an artifact or a bundle's candidate, measured where."""

    source: Path
    candidate: str | None = None
    profile: str | None = None
    device: DeviceTarget = DeviceTarget()
    baseline: str | None = None  # "last" or a saved `edge bench --json` report
    max_regression: float | None = None  # a flat limit, percent (None: significance test)
    name: str | None = None  # the slot whose current release "active" is said of [default]


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchOutcome:
    """A device measurement, kept in its history, and how it compares with the baseline."""

    report: DeployReport
    comparison: Comparison | None = None
    no_baseline_yet: bool = False  # a baseline was asked for and none is kept yet

    @property
    def regressed(self) -> bool:
        return bool(self.comparison and self.comparison.regressed)


def run_gated_bench(request: BenchRequest) -> BenchOutcome:
    """``edge bench``: measure on the device, compare with the baseline asked for, keep the
    result in the device's history (marked when it regressed). A bad --baseline FILE is
    refused before the device is touched."""
    if request.baseline is not None:
        check_baseline(request.baseline)
    report = run_bench(request)
    found = load_baseline(request.baseline, report) if request.baseline is not None else None
    comparison = compare(report, *found, request.max_regression) if found else None
    outcome = BenchOutcome(report=report, comparison=comparison,
                           no_baseline_yet=request.baseline is not None and found is None)
    keep_result(report, regressed=outcome.regressed)
    return outcome


def run_bench(request: BenchRequest) -> DeployReport:
    """Install (not activate) an artifact on the device and measure it there."""
    _check_name(request.name)
    root, artifact = _bench_artifact(request)
    profile = _profile(request, default="x86-64")
    with measuring_device(request.device, profile, artifact.runtime) as device:
        if artifact.runtime not in device.runtimes:
            raise DeviceError(f"{device.label} has no {artifact.runtime} runtime; has "
                              f"{', '.join(sorted(device.runtimes)) or 'none'}")
        rounds, threads = _bench(request.device, profile)
        return measure_on_device(device, root, artifact, profile=profile, activate=False,
                                 rounds=rounds, threads=threads, name=request.name)


def _bench_artifact(request: BenchRequest) -> tuple[Path, Any]:
    """(root dir, Artifact) for a bundle's candidate or a bare artifact file."""
    if _is_bundle(request.source):
        bundle = read_bundle(request.source)
        wanted = request.candidate or bundle.chosen
        result = next((c for c in bundle.candidates if c.candidate.id == wanted), None)
        if result is None or result.artifact is None:
            ids = ", ".join(c.candidate.id for c in bundle.candidates if c.artifact)
            raise UsageError(f"{request.source}: no artifact for candidate '{wanted}'; "
                             f"choose one of {ids}")
        return request.source, result.artifact
    return request.source.parent, _artifact_of_file(request.source)


def _artifact_of_file(path: Path) -> Artifact:
    """A bare artifact file as an Artifact of the target whose declared suffix it has."""
    target = target_for_suffix(full_suffix(path.name)) if path.is_file() else None
    if target is None:
        raise UsageError(f"{path}: give a bundle directory or a model file "
                         f"({', '.join(artifact_suffixes())})")
    stem = path.name[: -len(full_suffix(path.name))]
    extra = [path.with_name(stem + s) for s in target.caps.companions]
    for file in extra:
        if not file.is_file():
            raise UsageError(f"{path}: its {full_suffix(file.name)} ({file.name}) must lie "
                             "beside it")
    companions = tuple(StoredFile(file=p.name, sha256=sha256_file(p),
                                  size_bytes=p.stat().st_size) for p in extra)
    return Artifact(candidate=Candidate(target=target.name, precision="as-is"), file=path.name,
                    sha256=sha256_file(path), size_bytes=path.stat().st_size,
                    runtime=target.caps.runtime, companions=companions)


def resolve_profile(request: DeployRequest | BenchRequest, default: str | None = None) -> Any:
    """The profile a request deploys to (--profile, else the bundle's, else ``default``)."""
    return _profile(request, default)


def build_bundle(request: DeployRequest, profile: Any) -> tuple[Bundle, Path]:
    """The bundle a request deploys: read it, or optimize the model into one."""
    return _bundle(request, profile)
