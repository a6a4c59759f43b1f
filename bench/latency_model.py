#!/usr/bin/env python
"""How well a device's latency model, fitted on the probe models alone, predicts real models.

    python bench/latency_model.py [--threads 1 2] [--rounds 5] [--only NAME ...]
                                  [--update-docs | --docs-only]

This host is the device (x86-64, at each ``--threads``), ONNX Runtime at fp32 and int8 each a
separate target. For each: the eleven probe models of ``edge.core.latency.probes`` are timed
and fitted (``edge devices probe --calibrate``'s fit), then every zoo model with an ONNX
reference (tests/support/zoo_entries.py, its reference as edge makes it, shapes pinned as the
zoo pins them) and the digits sample is timed at both precisions (int8: ONNX Runtime's static
quantization, calibrated on the model's own zoo samples, else random inputs) in the same
interleaved rounds, and predicted from its features. No model's timing enters the fit: the
split is leave-every-model-out by construction. Beside it, the uncalibrated roofline edge used
before (``edge.core.estimate`` on the x86-64 profile) is scored on the same timings.

Figures: the share of predictions within 15 % and 30 % of the measured p50; whether the
measured p50 lies in the predicted interval; Kendall's tau between predicted and measured
order over every (model, precision); and whether the predicted faster precision of each model
is the measured one (or within the 10 % tie). Written to bench/results/latency_model.json with
provenance; ``--update-docs`` writes docs/latency-model.md's table from it. Every timing here
is this host's, measured (real device runs); none comes from an emulator.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import provenance  # noqa: E402

from devices.measure import Rounds, time_files_here  # noqa: E402
from edge.core import estimate as est  # noqa: E402
from edge.core.intake import reference_model  # noqa: E402
from edge.core.latency.model import Fitted, Timed, features, fit  # noqa: E402
from edge.core.latency.probes import write_probes  # noqa: E402
from edge.core.model import inspect_model  # noqa: E402
from edge.core.profile import load_profile  # noqa: E402
from edge.core.select import TIE  # noqa: E402
from edge.core.values import Dataset  # noqa: E402
from targets import get_target  # noqa: E402
from tests.support import zoo  # noqa: E402

OUT = ROOT / "bench" / "results" / "latency_model.json"
DOC = ROOT / "docs" / "latency-model.md"
PRECISIONS = ("fp32", "int8")
BEGIN, END = "<!-- latency-model:begin -->", "<!-- latency-model:end -->"


def references(only: list[str], folder: Path) -> dict[str, Path]:
    """Each model's reference ONNX (the digits sample, then the zoo's), by name."""
    found = {"digits": ROOT / "edge" / "samples" / "digits.onnx"}
    for entry in zoo.entries():
        if only and entry.name not in only:
            continue
        try:
            pins = dict(_pin(text) for text in entry.shapes)
            _, path = reference_model(zoo.model(entry), shapes=pins or None)
        except Exception as exc:  # noqa: BLE001 - a model edge cannot take: said, left out
            print(f"{entry.name}: no ONNX reference ({str(exc).splitlines()[0][:120]})")
            continue
        if path.suffix == ".onnx":
            found[entry.name] = path
    return {k: v for k, v in found.items() if not only or k in only}


def _pin(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.partition("=")
    return name, tuple(int(d) for d in dims.split(","))


def int8(name: str, path: Path, folder: Path) -> Path | None:
    """ONNX Runtime's static int8 of the model, calibrated on random float inputs (None:
    it has a non-float input, or the quantizer refused it)."""
    model = inspect_model(path)
    if any(not t.dtype.startswith("float") for t in model.inputs):
        return None
    rng = np.random.default_rng(0)
    feeds = tuple({t.name: rng.standard_normal([d if isinstance(d, int) and d > 0 else 1
                                                for d in t.shape]).astype(np.float32)
                   for t in model.inputs} for _ in range(4))
    try:
        out, _ = get_target("onnxruntime").convert(model, "int8", calib=Dataset(feeds=feeds),
                                                   workdir=folder / name)
    except Exception as exc:  # noqa: BLE001 - the quantizer's refusal: fp32 alone
        print(f"{name}: no int8 ({str(exc).splitlines()[0][:120]})")
        return None
    return out


def _quantized(files: dict[str, Path], folder: Path) -> dict[str, Path]:
    return {name: q for name, path in files.items() if (q := int8(name, path, folder))}


def timed(files: dict[str, Path], threads: int, rounds: int) -> dict[str, float]:
    """Median ms of each file, all interleaved on this host as edge's agent times them."""
    found = time_files_here(files, Rounds(rounds=rounds, calls=10, warmup=2), threads=threads,
                            skip_failed=True, observe=False)
    return {k: b.p50_ms for k, b in found.items()}


def run(threads: int, rounds: int, probes: dict[str, dict[str, Path]],
        models: dict[str, dict[str, Path]]) -> dict[str, Any]:
    """One thread count: the fits on the probes, every model predicted and measured
    (``probes``, ``models``: precision -> name -> file)."""
    files = {f"{kind}:{name}:{precision}": path
             for kind, group in (("probe", probes), ("model", models))
             for precision, named in group.items() for name, path in named.items()}
    ms = timed(files, threads, rounds)
    fits = {p: fit([Timed(name=k, features=features(path), ms=ms[f"probe:{k}:{p}"])
                    for k, path in probes["fp32"].items() if f"probe:{k}:{p}" in ms])
            for p in PRECISIONS}
    x86 = load_profile("x86-64")
    seen = {name: features(path) for name, path in models["fp32"].items()}
    rows = []
    for name, path in models["fp32"].items():
        work = est.work(path)
        for precision in PRECISIONS:
            measured = ms.get(f"model:{name}:{precision}")
            if measured is None:
                continue
            guess = fits[precision].predict(seen[name], basis="probes")
            lomo = _lomo(fits, probes, ms, seen, name, precision)
            rows.append({"model": name, "precision": precision, "measured_ms": measured,
                         "predicted_ms": guess.ms, "low_ms": guess.low_ms,
                         "high_ms": guess.high_ms, "lomo_ms": lomo.ms,
                         "lomo_low_ms": lomo.low_ms, "lomo_high_ms": lomo.high_ms,
                         "roofline_ms": est.roofline(work, x86, precision).ms})
    return {"threads": threads, "fits": {p: _fit_json(f) for p, f in fits.items()},
            "rows": rows, "model": _scores(rows, "predicted_ms"),
            "lomo": _scores(rows, "lomo_ms", ("lomo_low_ms", "lomo_high_ms")),
            "roofline": _scores(rows, "roofline_ms")}


def _lomo(fits: dict[str, Fitted], probes: dict[str, dict[str, Path]], ms: dict[str, float],
          seen: dict[str, dict[str, float]], held: str, precision: str) -> Any:
    """The prediction of ``held`` by a fit on the probes and every OTHER model timed on this
    device at ``precision`` (what a device's model becomes as deploys and benches add data)."""
    timed_ = [Timed(name=k, features=features(path), ms=ms[f"probe:{k}:{precision}"])
              for k, path in probes["fp32"].items() if f"probe:{k}:{precision}" in ms]
    timed_ += [Timed(name=k, features=f, ms=ms[f"model:{k}:{precision}"])
               for k, f in seen.items() if k != held and f"model:{k}:{precision}" in ms]
    return fit(timed_).predict(seen[held], basis="probes and the other models")


def _fit_json(model: Fitted) -> dict[str, Any]:
    return {"costs_ms": model.costs, "log_bound": model.bound, "probes": model.probes,
            "held_out_errors": list(model.loo_errors)}


def _scores(rows: list[dict[str, Any]], key: str,
            interval: tuple[str, str] | None = None) -> dict[str, Any]:
    """Within 15 % / 30 %, inside the interval (the model's only), Kendall's tau over every
    (model, precision), the faster precision of each model chosen as measured."""
    errors = [abs(r[key] / r["measured_ms"] - 1) for r in rows]
    out = {"predictions": len(rows),
           "within_15": sum(e <= 0.15 for e in errors) / len(rows) if rows else None,
           "within_30": sum(e <= 0.30 for e in errors) / len(rows) if rows else None,
           "median_error": float(np.median(errors)) if rows else None,
           "kendall_tau": _tau([r[key] for r in rows], [r["measured_ms"] for r in rows]),
           "choice_agrees": _choices(rows, key)}
    low, high = interval or (("low_ms", "high_ms") if key == "predicted_ms" else ("", ""))
    if low and rows:
        out["inside_interval"] = sum(r[low] <= r["measured_ms"] <= r[high]
                                     for r in rows) / len(rows)
    return out


def _tau(predicted: list[float], measured: list[float]) -> float | None:
    """Kendall's tau-a of two orders (pairs tied in either count as neither)."""
    pairs = [(i, j) for i in range(len(predicted)) for j in range(i + 1, len(predicted))]
    if not pairs:
        return None
    score = sum(np.sign(predicted[i] - predicted[j]) * np.sign(measured[i] - measured[j])
                for i, j in pairs)
    return float(score / len(pairs))


def _choices(rows: list[dict[str, Any]], key: str) -> float | None:
    """The share of models whose predicted faster precision is the measured faster one, or
    measured within the tie."""
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[row["precision"]] = row
    agree = []
    for pair in (m for m in by_model.values() if len(m) == len(PRECISIONS)):
        guess = min(pair, key=lambda p: pair[p][key])
        best = min(pair[p]["measured_ms"] for p in pair)
        agree.append(pair[guess]["measured_ms"] <= best * (1 + TIE))
    return sum(agree) / len(agree) if agree else None


def render(doc: dict[str, Any]) -> str:
    """The docs table of the results (by thread count: the model's and the roofline's)."""
    head = ("| threads | predictor | predictions | within 15 % | within 30 % | median error "
            "| in interval | Kendall τ | faster precision agrees |\n|---|---|---|---|---|---|"
            "---|---|---|")
    lines = [head]
    for run_ in doc["runs"]:
        for name, key in (("latency model (11 probes)", "model"),
                          ("probes + the other models (leave one model out)", "lomo"),
                          ("roofline, uncalibrated", "roofline")):
            s = run_[key]
            lines.append(f"| {run_['threads']} | {name} | {s['predictions']} | "
                         f"{_pct(s['within_15'])} | {_pct(s['within_30'])} | "
                         f"{_pct(s['median_error'])} | {_pct(s.get('inside_interval'))} | "
                         f"{_num(s['kendall_tau'])} | {_pct(s['choice_agrees'])} |")
    where = doc["provenance"]["machine"]
    return (f"Measured on this host ({where['cpu']}, {where['cores']} cores), commit "
            f"{doc['provenance']['git_sha'][:12]}, {len(doc['models'])} models "
            f"({', '.join(doc['models'])}); bench/results/latency_model.json:\n\n"
            + "\n".join(lines) + "\n")


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def update_docs(doc: dict[str, Any]) -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + render(doc) + text[end:], encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--update-docs", action="store_true")
    parser.add_argument("--docs-only", action="store_true")
    args = parser.parse_args()
    if args.docs_only:
        update_docs(json.loads(OUT.read_text()))
        return 0
    with tempfile.TemporaryDirectory(prefix="edge-latency-") as scratch:
        folder = Path(scratch)
        probes = write_probes(folder / "probes")
        models = references(args.only, folder)
        both = {"probes": {"fp32": probes, "int8": _quantized(probes, folder / "probes8")},
                "models": {"fp32": models, "int8": _quantized(models, folder / "models8")}}
        runs = [run(t, args.rounds, both["probes"], both["models"]) for t in args.threads]
    doc = {"provenance": provenance.record("bench/latency_model.py"),
           "models": sorted(models), "runs": runs,
           "note": "every timing measured on this host (real device runs); no model's timing "
                   "enters a fit: only the probes'"}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    if args.update_docs:
        update_docs(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
