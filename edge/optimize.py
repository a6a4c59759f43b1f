"""``edge optimize``: plan, convert, verify and choose; write a bundle."""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from edge.bundle import FORMAT, write_bundle
from edge.data import dataset_digest, load_dataset, synthetic_dataset
from edge.errors import UsageError
from edge.model import inspect_model, sha256_file
from edge.plan import PRECISION_RANK, Planned, make_plan
from edge.profile import Profile
from edge.values import Artifact, Bundle, CandidateResult, Dataset, ModelInfo
from edge.verify import Outputs, Thresholds, judge, measure, run_all

__all__ = ["OptimizeOptions", "cache_root", "optimize", "plan_for"]

log = logging.getLogger("edge")


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizeOptions:
    """What ``edge optimize`` was asked to do."""

    calib: Path | None = None
    eval: Path | None = None
    limits: Thresholds = Thresholds()
    holdout: float = 0.2


def cache_root() -> Path:
    """Where converted artifacts are cached by content (``EDGE_CACHE_DIR`` overrides)."""
    return Path(os.environ.get("EDGE_CACHE_DIR", "~/.cache/edge")).expanduser()


def plan_for(profile: Profile, model: ModelInfo) -> tuple[Planned, ...]:
    """The plan for this profile, with what this host can convert."""
    from targets import REGISTRY, get_target

    available = {}
    for name in REGISTRY:
        try:
            target = get_target(name)
        except ImportError as exc:
            available[name] = ((), f"target module did not import: {exc}")
            continue
        available[name] = (target.precisions, target.missing())
    return make_plan(profile, model, available)


def optimize(model_path: Path, profile: Profile, out: Path, options: OptimizeOptions) -> Bundle:
    """Run the whole optimize step and write the bundle to ``out``."""
    model = inspect_model(model_path)
    calib, held_out = _data(model, options)
    plan = plan_for(profile, model)
    reference = _reference_outputs(model, held_out)
    workroot = cache_root() / "convert" / f"{model.sha256[:16]}-{dataset_digest(calib)[:16]}"
    results, files = [], {}
    for planned in plan:
        result, file = _try(planned, model, calib, held_out, reference, workroot, options.limits)
        results.append(result)
        if file is not None and result.artifact is not None:
            files[result.artifact.file] = file
    chosen, reason = _choose(results, profile)
    bundle = Bundle(
        format=FORMAT, profile=profile.id, source=model, calibration=calib.source,
        evaluation=held_out.source + (" (held-out split)" if options.eval is None else ""),
        candidates=tuple(_mark(r, chosen) for r in results), chosen=chosen, reason=reason)
    write_bundle(out, bundle, files)
    return bundle


def _data(model: ModelInfo, options: OptimizeOptions) -> tuple[Dataset, Dataset]:
    if options.calib is not None:
        calib = load_dataset(options.calib, model)
    else:
        calib = synthetic_dataset(model)
    if options.eval is not None:
        return calib, load_dataset(options.eval, model, want_labels=True)
    if len(calib) < 5:
        raise UsageError(f"--calib {options.calib}: {len(calib)} samples; give at least 5, "
                         "or a separate --eval file")
    return calib.split(options.holdout)


def _reference_outputs(model: ModelInfo, held_out: Dataset) -> Outputs:
    from targets.onnxruntime import OrtRunner

    return run_all(OrtRunner(Path(model.path), threads=os.cpu_count() or 1), held_out)


def _try(
    planned: Planned, model: ModelInfo, calib: Dataset, held_out: Dataset,
    reference: Outputs, workroot: Path, limits: Thresholds,
) -> tuple[CandidateResult, Path | None]:
    from targets import get_target
    from targets.base import ConversionError, ConvertSettings

    settings = ConvertSettings()
    cand = planned.candidate
    if not planned.keep:
        return CandidateResult(candidate=cand, status="skipped", reason=planned.reason), None
    target = get_target(cand.target)
    log.info("converting and verifying %s", cand.id)
    try:
        file, notes = target.convert(model, cand.precision, calib=calib,
                                     workdir=workroot / f"{cand.target}-{settings.digest()}",
                                     settings=settings)
        runner = target.load(file, model, threads=os.cpu_count() or 1)
        fidelity = measure(reference, run_all(runner, held_out), held_out)
    except ConversionError as exc:
        return CandidateResult(candidate=cand, status="failed", reason=str(exc)), None
    sha = sha256_file(file)
    artifact = Artifact(candidate=cand, file=f"artifacts/{sha}{target.suffix}", sha256=sha,
                        size_bytes=file.stat().st_size, runtime=target.runtime, notes=notes)
    failure = judge(fidelity, limits)
    status, reason = ("rejected", failure) if failure else ("passed", _passed(fidelity))
    return CandidateResult(candidate=cand, status=status, reason=reason, artifact=artifact,
                           fidelity=fidelity), file


def _passed(fid: object) -> str:
    from edge.values import Fidelity

    assert isinstance(fid, Fidelity)
    if fid.accuracy is not None and fid.reference_accuracy is not None:
        return (f"keeps fidelity: accuracy {100 * fid.accuracy:.1f}% vs fp32 "
                f"{100 * fid.reference_accuracy:.1f}%")
    return f"keeps fidelity: cosine {fid.cosine:.4f}"


def _choose(results: list[CandidateResult], profile: Profile) -> tuple[str | None, str]:
    passed = [r for r in results if r.status == "passed"]
    if not passed:
        return None, "no candidate kept fidelity; see each candidate's reason"
    order = list(profile.runtimes)
    best = min(passed, key=lambda r: (order.index(r.candidate.target),
                                      PRECISION_RANK[r.candidate.precision]))
    return best.candidate.id, (
        f"first in {profile.id}'s runtime order ({' > '.join(order)}) at the lowest precision "
        "that keeps fidelity; edge deploy measures its latency on the device")


def _mark(result: CandidateResult, chosen: str | None) -> CandidateResult:
    if result.candidate.id != chosen:
        return result
    from dataclasses import replace

    return replace(result, status="chosen")


warnings.filterwarnings("default", module="edge")
