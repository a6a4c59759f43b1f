"""Every row judged per output by edge's own rules (edge.core.verify) against ORT fp32.

The reference is the baseline row (ORT fp32 on the reference ONNX) on the held-out samples,
every output. Each row's outputs are matched to the reference's (``matching``), measured with
``edge.core.verify.measure`` and judged with ``judge`` under ``Thresholds`` built from the
model's ``--metric`` flags (``parse_metrics``) and edge's default max_drop / min_cosine /
max_error. A row keeps fidelity iff ``judge`` finds no failing output. Labelled held-out sets
(cnn, digits) give their labels to the first ``classes`` output, as edge optimize does.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from .common import MAX_DROP, MIN_COSINE, Run
from .matching import MatchError, apply, describe, match
from .runners import Row

Outputs = list[list[np.ndarray]]


def load_eval(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Held-out inputs, and labels when the file has them (.npz ``input``/``labels``)."""
    if str(path).endswith(".npy"):
        return np.load(path).astype(np.float32), None
    with np.load(path) as held:
        labels = held["labels"] if "labels" in held.files else None
        return held["input"].astype(np.float32), labels


def limits_for(metrics: list[str]) -> Any:
    """edge's default thresholds with the model's ``--metric`` flags."""
    from edge.core.verify import Thresholds, parse_metrics

    pairs, custom = parse_metrics(tuple(metrics))
    return Thresholds(max_drop=MAX_DROP, min_cosine=MIN_COSINE, metrics=pairs, custom=custom)


def outputs(run: Run, xs: np.ndarray) -> Outputs:
    """Every output of every held-out sample, one sample at a time."""
    return [[np.asarray(o) for o in run(xs[i:i + 1])] for i in range(len(xs))]


def judge_rows(rows: list[Row], eval_path: str, metrics: list[str]) -> dict[str, Any]:
    """Fill every runnable row's fidelity; return the reference's summary."""
    xs, labels = load_eval(eval_path)
    base = next(r for r in rows if r.kind == "baseline")
    assert base.run is not None, base.error
    ref = outputs(base.run, xs)
    limits = limits_for(metrics)
    for row in rows:
        if row.run is not None:
            judge_row(row, (ref, base.names), xs, labels, limits)
    return _reference(base, ref, labels, metrics)


def _reference(base: Row, ref: Outputs, labels: np.ndarray | None,
               metrics: list[str]) -> dict[str, Any]:
    kinds = {o["name"]: {"kind": o["kind"], "why": o["why"]}
             for o in base.fidelity.get("outputs", [])}
    accuracy = base.fidelity.get("reference_accuracy")
    return {"outputs": base.names, "shapes": [list(np.shape(a)) for a in ref[0]],
            "kinds": kinds, "metric_flags": metrics, "labelled": labels is not None,
            "samples": len(ref), "fp32_accuracy": accuracy}


def judge_row(row: Row, reference: tuple[Outputs, list[str]], xs: np.ndarray,
              labels: np.ndarray | None, limits: Any) -> None:
    """Run ``row`` on the held-out samples, match its outputs, measure and judge them."""
    ref, names = reference
    assert row.run is not None
    try:
        got = outputs(row.run, xs)
        picks = match(names, ref[0], row.names, got[0])
    except MatchError as exc:
        row.error, row.run = f"outputs not matched: {exc}", None
        return
    except Exception as exc:  # noqa: BLE001 - a row that cannot run drops out
        row.error, row.run = f"run failed: {type(exc).__name__}: {str(exc)[:200]}", None
        return
    row.fidelity = verdict_of([apply(picks, g) for g in got], ref, names, labels, limits)
    row.fidelity["matched"] = describe(picks, row.names)


def verdict_of(got: Outputs, ref: Outputs, names: list[str], labels: np.ndarray | None,
               limits: Any) -> dict[str, Any]:
    """edge's measure + judge of matched outputs: keeps iff judge finds no failure."""
    from edge.core.values import Dataset
    from edge.core.verify import judge, measure

    fid = measure(ref, got, Dataset(feeds=(), labels=labels), limits, names)
    failure = judge(fid, limits)
    result: dict[str, Any] = {
        "keeps": failure is None, "failure": failure, "cosine": fid.cosine,
        "top1_agreement": fid.top1_agreement, "accuracy": fid.accuracy,
        "reference_accuracy": fid.reference_accuracy,
        "outputs": [_output(asdict(o)) for o in fid.outputs]}
    if labels is not None:
        result.update(old_rule(got, ref, labels))
    return result


def _output(out: dict[str, Any]) -> dict[str, Any]:
    """One output's verdict without empty fields."""
    return {k: v for k, v in out.items() if v not in (None, "", {}) or k == "passed"}


def old_rule(got: Outputs, ref: Outputs, labels: np.ndarray) -> dict[str, Any]:
    """The rule peers.py used before edge's judge (output 0): mean cosine >= 0.98 and
    accuracy at most 1 point below fp32; kept in the JSON to compare."""
    g = [np.asarray(s[0], np.float64).ravel() for s in got]
    r = [np.asarray(s[0], np.float64).ravel() for s in ref]
    cos = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))
           for a, b in zip(g, r, strict=True)]
    acc = float(np.mean(np.array([int(np.argmax(a)) for a in g]) == labels))
    ref_acc = float(np.mean(np.array([int(np.argmax(b)) for b in r]) == labels))
    keeps = np.mean(cos) >= MIN_COSINE and 100 * (ref_acc - acc) <= MAX_DROP + 1e-9
    return {"mean_cosine": float(np.mean(cos)), "min_sample_cosine": float(np.min(cos)),
            "keeps_old_rule": bool(keeps)}
