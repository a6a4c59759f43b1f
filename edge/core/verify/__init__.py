"""Fidelity of an artifact against the reference model on held-out inputs, output by output.

Every output is judged on its own scale, the way its kind needs (``kinds``: values, classes,
probs, sequence, ctc, exact, yolo, ssd, regression; ``embed``: embedding, multilabel), the kind
given by ``--metric OUTPUT=KIND`` or auto-detected (``auto``) and recorded with the reason; a
user's ``--metric module:function`` (``custom``) judges all outputs at once. NaN or Inf in a
candidate's output always fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edge.core.errors import UsageError
from edge.core.values import Dataset, Fidelity, OutputFidelity, TensorSpec
from edge.core.verify.allowance import allowance_used
from edge.core.verify.auto import Picked, pick_kinds, warn_flat
from edge.core.verify.custom import call_metric, load_metric
from edge.core.verify.kinds import KINDS, common, measure_kind
from edge.core.verify.spec import Spec

__all__ = ["KINDS", "Outputs", "Thresholds", "check_metrics", "judge", "measure",
           "output_failure", "parse_metrics", "run_all", "warn_flat"]

#: per sample, the list of output arrays
Outputs = list[list[np.ndarray]]

#: options each kind takes (``ctc:blank=0``), with their value type ('' = a bare flag)
_OPTIONS: dict[str, dict[str, type]] = {
    "probs": {"threshold": float}, "ctc": {"blank": int, "layout": str},
    "sequence": {"layout": str},
    "yolo": {"obj": str, "score": float, "iou": float, "nms": float},
    "ssd": {"scores": str, "score": float, "iou": float, "nms": float},
    "embedding": {"threshold": float}, "multilabel": {"threshold": float, "k": int},
}

#: options whose value is one of a few words, and what the words mean
_CHOICES = {"layout": ("ntc", "tnc")}
_CHOICES_MEAN = {"layout": "ntc: [N, T, C], batch first; tnc: [T, N, C], time first"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Thresholds:
    """What an artifact must keep, output by output.

    ``max_drop`` (percentage points) bounds every counted metric: accuracy or top-1 agreement,
    probability flips, sequence positions, CTC strings, detections. ``min_cosine`` bounds a
    ``values`` output's cosine; ``max_rel_rms`` its RMS error relative to its spread across
    samples (and a ``regression`` output's relative error): ``max_error``, or less when the
    cosine bound asks for less.
    """

    max_drop: float = 1.0
    min_cosine: float = 0.98
    max_error: float = 0.10
    metrics: tuple[tuple[str, str], ...] = ()  # (OUTPUT or '*', KIND[:options]) from --metric
    custom: tuple[str, ...] = ()  # module:function from --metric (command line only)

    @property
    def max_rel_rms(self) -> float:
        """``max_error``, or the relative error a cosine of ``min_cosine`` allows,
        sqrt(2 (1 - min_cosine)), when that is smaller."""
        return min(self.max_error, self.from_cosine)

    @property
    def from_cosine(self) -> float:
        return math.sqrt(max(0.0, 2.0 * (1.0 - self.min_cosine)))

    def error_bound(self) -> str:
        """Which flag sets ``max_rel_rms``."""
        if self.from_cosine < self.max_error:
            return f"from --min-cosine {self.min_cosine}"
        return f"--max-error {self.max_error}"


def run_all(runner: object, data: Dataset) -> Outputs:
    """Run every held-out sample through a runner."""
    return [list(runner.run(feed)) for feed in data.feeds]  # type: ignore[attr-defined]


# ---------------------------------------------------------------- --metric flags


def parse_spec(text: str) -> Spec:
    """``KIND[:OPT[=VALUE],...]`` as a Spec, or a UsageError naming what is wrong."""
    kind, _, rest = text.partition(":")
    if kind not in KINDS:
        raise UsageError(f"--metric {text}: unknown kind {kind!r} "
                         f"(kinds: {', '.join(KINDS)}, or module:function)")
    options = dict(_option(text, kind, item) for item in rest.split(",") if item)
    return Spec(kind=kind, options=options)


def _option(text: str, kind: str, item: str) -> tuple[str, str]:
    """One ``KEY[=VALUE]`` of a kind, checked against the options the kind takes."""
    allowed = _OPTIONS.get(kind, {})
    key, _, value = item.partition("=")
    if key not in allowed:
        raise UsageError(f"--metric {text}: {kind} takes no option {key!r}"
                         + (f" (options: {', '.join(allowed)})" if allowed else ""))
    if key in _CHOICES and value not in _CHOICES[key]:
        raise UsageError(f"--metric {text}: {key}={value!r} is not one of "
                         f"{', '.join(_CHOICES[key])} ({_CHOICES_MEAN[key]})")
    if allowed[key] is not str:
        try:
            allowed[key](value)
        except ValueError:
            raise UsageError(f"--metric {text}: {key}={value!r} is not a number") from None
    return key, value


def parse_metrics(texts: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``--metric`` flags as (OUTPUT, KIND) pairs and module:function names; each checked
    (kinds and options known, functions importable) so a typo fails before any work."""
    pairs: list[tuple[str, str]] = []
    custom: list[str] = []
    for text in texts:
        if text in KINDS:
            raise UsageError(f"--metric {text}: name the output, as OUTPUT={text} "
                             f"(or *={text} for every output)")
        if "=" in text:  # module:function never holds '='; an output name may hold ':'
            output, _, kind = text.partition("=")
            if not output or any(o == output for o, _ in pairs):
                raise UsageError(f"--metric {text}: give each OUTPUT once, as OUTPUT=KIND")
            parse_spec(kind)
            pairs.append((output, kind))
        else:
            load_metric(text)
            custom.append(text)
    return tuple(pairs), tuple(custom)


def check_metrics(limits: Thresholds, names: Sequence[str]) -> None:
    """A UsageError when a ``--metric`` flag names an output the model does not have."""
    known = set(names)
    for output, kind in limits.metrics:
        wanted = [output] + [v for k, v in parse_spec(kind).options.items() if k == "scores"]
        for name in wanted:
            if name != "*" and name not in known:
                raise UsageError(f"--metric {output}={kind}: the model has no output {name!r} "
                                 f"(outputs: {', '.join(names)})")


# ---------------------------------------------------------------- measuring


def measure(reference: Outputs, candidate: Outputs, data: Dataset,
            limits: Thresholds | None = None, names: Sequence[str] | None = None, *,
            declared: Sequence[TensorSpec] = ()) -> Fidelity:
    """Compare candidate outputs to reference outputs, output by output (``declared``: the
    model's outputs as its graph declares them, whose shapes and last ops hint at their
    kinds)."""
    limits = limits or Thresholds()
    count = len(reference[0]) if reference else 0
    names = list(names) if names is not None and len(names) == count else \
        [f"output{i}" for i in range(count)]
    flags = {output: parse_spec(kind) for output, kind in limits.metrics}
    picked = pick_kinds(names, reference, flags, data.labels is not None, declared)
    first_classes = next((i for i, p in enumerate(picked) if p.spec.kind == "classes"), None)
    outputs = [_one(i, names, picked[i], (reference, candidate),
                    data.labels if i == first_classes else None, limits)
               for i in range(count)]
    outputs += [_custom(spec, names, reference, candidate, data.labels)
                for spec in limits.custom]
    summary = _summary(outputs, len(reference), data.synthetic)
    used = allowance_used(summary, limits.max_drop, limits.min_cosine, limits.max_rel_rms)
    return replace(summary, allowance_used=round(used, 4) if math.isfinite(used) else None)


def _arrays(outputs: Outputs, index: int) -> list[np.ndarray]:
    """One output of every sample: float32/float64 as they are (a large output is not
    copied), other types (float16, integers, booleans) as float64."""
    found = [np.asarray(sample[index]) for sample in outputs]
    return [a if a.dtype in (np.float32, np.float64) else a.astype(np.float64) for a in found]


def _one(index: int, names: Sequence[str], picked: Picked, pair: tuple[Outputs, Outputs],
         labels: Any, limits: Thresholds) -> OutputFidelity:
    """One output measured and judged."""
    ref, got = _arrays(pair[0], index), _arrays(pair[1], index)
    base = OutputFidelity(name=names[index], kind=picked.spec.kind, why=picked.why,
                          passed=False, reason="")
    _check_reference(names[index], ref)
    broken = _broken(ref, got)
    if broken:
        bad = sum(int(np.sum(~np.isfinite(g))) for g in got)
        return replace(base, nonfinite=bad, error=broken, reason=broken)
    shared = common(ref, got)
    base = replace(base, cosine=shared.cosine, rel_rms=shared.rel_rms, max_abs=shared.max_abs,
                   rel_max=shared.rel_max)
    ref, got = _paired(picked.spec, names, pair, ref, got)
    try:
        found = measure_kind(picked.spec, ref, got, labels)
    except ValueError as exc:
        raise UsageError(f"output {names[index]!r} as {picked.spec.text()}: {exc}") from None
    result = replace(base, drop=found.drop, detail=found.detail, accuracy=found.accuracy,
                     reference_accuracy=found.reference_accuracy, rel_error=found.rel_error,
                     numbers=found.numbers)
    failure = output_failure(result, limits)
    return replace(result, passed=failure is None, reason=failure or _kept(result))


def _check_reference(name: str, ref: list[np.ndarray]) -> None:
    """The original's own output must be finite: nothing compares with NaN (it would pass)."""
    bad = sum(int(np.sum(~np.isfinite(r))) for r in ref)
    if bad:
        raise UsageError(f"output {name!r} of the original model holds {bad} NaN or Inf "
                         f"values on these samples: nothing can be verified against it; check "
                         "the data's scale and preprocessing")


def _broken(ref: list[np.ndarray], got: list[np.ndarray]) -> str:
    """Why an output cannot be compared (another shape, NaN or Inf), or ''."""
    for r, g in zip(ref, got, strict=True):
        if r.shape != g.shape:
            return f"shape {list(g.shape)} differs from fp32's {list(r.shape)}"
    bad = sum(int(np.sum(~np.isfinite(g))) for g in got)
    if bad:
        return f"{bad} of {sum(g.size for g in got)} values are NaN or Inf"
    return ""


def _paired(spec: Spec, names: Sequence[str], pair: tuple[Outputs, Outputs],
            ref: list[np.ndarray], got: list[np.ndarray],
            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``ssd:scores=OUTPUT``: the boxes with the scores output's rows appended."""
    other = spec.options.get("scores")
    if not other:
        return ref, got
    index = list(names).index(other)

    def joined(boxes: list[np.ndarray], outputs: Outputs) -> list[np.ndarray]:
        scores = _arrays(outputs, index)
        return [np.concatenate([b.reshape(-1, 4), s.reshape(b.size // 4, -1)], axis=1)
                for b, s in zip(boxes, scores, strict=True)]

    return joined(ref, pair[0]), joined(got, pair[1])


def _custom(spec: str, names: Sequence[str], reference: Outputs, candidate: Outputs,
            labels: Any) -> OutputFidelity:
    passed, value, reason = call_metric(spec, names, reference, candidate, labels)
    return OutputFidelity(name=spec, kind="custom", why=f"--metric {spec}", passed=passed,
                          reason=reason, numbers={"value": value})


def _summary(outputs: list[OutputFidelity], samples: int, synthetic: bool) -> Fidelity:
    """The per-output results with the aggregate fields older manifests have."""
    cosines = [o.cosine for o in outputs if o.cosine is not None]
    broken = any(o.error for o in outputs)
    top1 = next((o.numbers["top1_agreement"] for o in outputs
                 if "top1_agreement" in o.numbers), None)
    labelled = next((o for o in outputs if o.accuracy is not None), None)
    return Fidelity(
        samples=samples, cosine=0.0 if broken or not cosines else min(cosines),
        max_abs=max((o.max_abs for o in outputs if o.max_abs is not None), default=0.0),
        top1_agreement=top1, accuracy=labelled.accuracy if labelled else None,
        reference_accuracy=labelled.reference_accuracy if labelled else None,
        synthetic=synthetic, outputs=tuple(outputs))


def _kept(out: OutputFidelity) -> str:
    """What a passing output kept, in one line."""
    if out.accuracy is not None and out.reference_accuracy is not None:
        return out.detail
    if out.drop is not None:
        return out.detail
    if out.rel_error is not None:
        return f"relative error {out.rel_error:.4f}"
    return f"cosine {out.cosine:.4f}, RMS error {out.rel_rms:.3f} of its spread"


# ---------------------------------------------------------------- judging


def output_failure(out: OutputFidelity, limits: Thresholds) -> str | None:
    """Why one output fails the thresholds, or None."""
    head = f"output {out.name!r}"
    if out.error:
        return f"{head}: {out.error}"
    if out.kind == "custom":
        return None if out.passed else f"--metric {out.name}: {out.reason}"
    if out.accuracy is not None and out.reference_accuracy is not None:
        drop = 100.0 * (out.reference_accuracy - out.accuracy)
        if not drop <= limits.max_drop + 1e-9:  # NaN fails
            return (f"{head}: accuracy {100 * out.accuracy:.1f}% is {drop:.1f} points below "
                    f"fp32 {100 * out.reference_accuracy:.1f}% (--max-drop {limits.max_drop})")
        return None
    if out.drop is not None:
        if not out.drop <= limits.max_drop + 1e-9:  # NaN fails
            return f"{head}: {out.detail} ({out.drop:.1f}% > --max-drop {limits.max_drop})"
        return None
    return _numeric_failure(head, out, limits)


def _numeric_failure(head: str, out: OutputFidelity, limits: Thresholds) -> str | None:
    """values: cosine and RMS error over spread; regression: relative error."""
    allowed = limits.max_rel_rms
    if out.rel_error is not None:
        if not out.rel_error <= allowed:
            return (f"{head}: relative error {out.rel_error:.4f} > {allowed:.4f} "
                    f"({limits.error_bound()})")
        return None
    if out.cosine is None or not out.cosine >= limits.min_cosine:
        return f"{head}: cosine {out.cosine:.4f} < --min-cosine {limits.min_cosine}"
    if out.rel_rms is None or not out.rel_rms <= allowed:
        return (f"{head}: RMS error {out.rel_rms:.3f} of its spread across samples > "
                f"{allowed:.3f} ({limits.error_bound()})")
    return None


def judge(fidelity: Fidelity, limits: Thresholds) -> str | None:
    """Why the artifact fails the thresholds (the first failing output, named), or None."""
    if fidelity.outputs:
        return next(filter(None, (output_failure(o, limits) for o in fidelity.outputs)), None)
    return _judge_aggregate(fidelity, limits)


def _judge_aggregate(fidelity: Fidelity, limits: Thresholds) -> str | None:
    """A fidelity recorded before per-output results (older manifests): its aggregates."""
    if fidelity.accuracy is not None and fidelity.reference_accuracy is not None:
        drop = 100.0 * (fidelity.reference_accuracy - fidelity.accuracy)
        if not drop <= limits.max_drop + 1e-9:  # NaN fails
            return (f"accuracy {100 * fidelity.accuracy:.1f}% is {drop:.1f} points below "
                    f"fp32 {100 * fidelity.reference_accuracy:.1f}% (--max-drop {limits.max_drop})")
    elif fidelity.top1_agreement is not None:
        drop = 100.0 * (1.0 - fidelity.top1_agreement)
        if not drop <= limits.max_drop + 1e-9:  # NaN fails
            return (f"top-1 agrees with fp32 on {100 * fidelity.top1_agreement:.1f}% of samples "
                    f"(--max-drop {limits.max_drop} points)")
    if not fidelity.cosine >= limits.min_cosine:
        return f"output cosine {fidelity.cosine:.4f} < {limits.min_cosine}"
    return None
