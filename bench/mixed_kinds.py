#!/usr/bin/env python
"""edge's per-kind mixed plan on ONNX Runtime, on trained models of the zoo (issue 15).

    python bench/mixed_kinds.py [--models cnn oww fer hand] [--threads 1] [--rounds 15]
                                [--out bench/results/mixed-kinds.json]

For each model of bench/peers.py (its reference ONNX, calibration and held-out data): edge's
ONNX Runtime target makes the int8 artifact (``targets.onnxruntime``, edge's recipe); the kinds
of layer its mixed plan would keep float (``targets.onnxruntime.float_kinds``) are timed in float
by edge's own trial (``float_trial``, the code ``edge optimize`` runs: the plan is made when
the trial is faster than all-int8 by the choice's tie band). Unlike ``edge optimize`` this runs
whatever the int8 artifact's fidelity, and also converts each kind alone in float, and two groups
of convolutions the plan never keeps float (``CONV_GROUPS``: the depthwise ones, the example
issue 15 gives of layers int8 may slow down, and the stem reading the model's input). Then fp32,
all-int8, each kind alone, every kind and each group are timed again in one longer interleaved
run (edge's timing, ``devices.measure``) and judged per output by edge's verify on the held-out
samples against fp32 (``peerbench.judging``). A trial pays where it keeps fidelity and is
``MARGIN`` faster than both all-int8 and fp32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from mixed_ort import in_child
from peerbench.builds import prepare
from peerbench.judging import limits_for, load_eval, outputs, verdict_of
from peerbench.zoorun import model_parser, timed_files, write_results

MARGIN = 0.97
CONV_GROUPS = ("depthwise Conv", "stem Conv")
DATA_MOVES = frozenset({"Transpose", "Reshape", "Pad", "Cast", "Identity", "Unsqueeze"})


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    found = {model: _model(model, args) for model in args.models}
    write_results(args, "bench/mixed_kinds.py", argv, found, margin=MARGIN)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    return model_parser(__doc__.splitlines()[0], rounds=15,
                        out=Path("bench/results/mixed-kinds.json")).parse_args(argv)


def _model(model: str, args: argparse.Namespace) -> dict[str, Any]:
    files = in_child(prepare, model)
    made = _trials(files, args.threads)
    paths = {"fp32": Path(files["onnx"]), "int8": made["int8"], **made["trials"]}
    timed = timed_files(paths, rounds=args.rounds, threads=args.threads)
    fidelity = _judged(paths, files)
    base = timed["int8"]["p50_ms"]
    rows = [{"artifact": k, **timed[k], "over_int8": round(timed[k]["p50_ms"] / base, 3),
             "over_fp32": round(timed[k]["p50_ms"] / timed["fp32"]["p50_ms"], 3),
             **fidelity[k]} for k in paths]
    return {"entry": files.get("entry", model), "metrics": files.get("metrics", []),
            "kinds": made["kinds"], "groups": made["groups"], "edge_trial": made["edge_trial"],
            "rows": rows,
            "verdict": _verdict(rows, made["edge_trial"])}


def _trials(files: dict[str, Any], threads: int) -> dict[str, Any]:
    """edge's int8 artifact, the kinds its plan would keep float, edge's own trial of them
    (``float_trial``, as ``edge optimize`` runs it) and each kind alone (this script's)."""
    import onnx

    from edge.core.cache import cache_root
    from edge.core.data import load_dataset
    from edge.core.model import inspect_model
    from edge.flows.mixed import TRIAL_GAIN, float_trial
    from targets import get_target, workdir_name
    from targets.base import ConvertSettings
    from targets.onnxruntime import float_kinds

    model = inspect_model(Path(files["onnx"]))
    calib = load_dataset(files["calib"], model)
    target = get_target("onnxruntime")

    def convert(kept: tuple[str, ...]) -> Path:
        settings = ConvertSettings(keep_float=kept)
        work = cache_root() / "bench-kinds" / model.sha256[:16] / workdir_name(target.name,
                                                                                settings)
        return target.convert(model, "int8", calib=calib, workdir=work, settings=settings)[0]

    int8 = convert(())
    kinds = float_kinds(onnx.load(model.path, load_external_data=False))
    trial = float_trial(int8, kinds, convert, threads=threads) if kinds else None
    alone = {f"{k} float": convert(nodes) for k, nodes in kinds.items()} if len(kinds) > 1 else {}
    every = {"every kind float": convert(tuple(n for of in kinds.values() for n in of))}
    groups = conv_groups(onnx.load(model.path, load_external_data=False))
    return {"int8": int8, "kinds": {k: len(v) for k, v in kinds.items()},
            "groups": {k: len(v) for k, v in groups.items()},
            "trials": {**alone, **(every if kinds else {}),
                       **{f"{g} float": convert(nodes) for g, nodes in groups.items()}},
            "edge_trial": None if trial is None else {
                "kinds": dict(trial.kinds), "trial_ms": round(trial.trial_ms, 4),
                "int8_ms": round(trial.int8_ms, 4),
                "over_int8": round(trial.trial_ms / trial.int8_ms, 3),
                "gain_needed": round(TRIAL_GAIN, 4),
                "plan_made": trial.trial_ms <= TRIAL_GAIN * trial.int8_ms}}


def conv_groups(proto: Any) -> dict[str, tuple[str, ...]]:
    """``CONV_GROUPS`` -> the reference's convolutions of that group (keep_float's names):
    depthwise (one input channel per group), and the stem (convolutions that read a graph
    input through data moves only: their float input is quantized for them alone)."""
    from onnx import numpy_helper

    from targets.onnxruntime import node_name

    weights = {i.name: numpy_helper.to_array(i).shape for i in proto.graph.initializer}
    moved = {i.name for i in proto.graph.input}
    found: dict[str, list[str]] = {}
    for node in proto.graph.node:  # topological order: a data move's input is known first
        if node.op_type in DATA_MOVES and node.input and node.input[0] in moved:
            moved.update(node.output)
        shape = weights.get(node.input[1]) if node.op_type == "Conv" else None
        if shape is None:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        if group > 1 and shape[1] == 1:
            found.setdefault("depthwise Conv", []).append(node_name(node))
        if node.input[0] in moved:
            found.setdefault("stem Conv", []).append(node_name(node))
    return {g: tuple(found[g]) for g in CONV_GROUPS if g in found}


def _judged(paths: dict[str, Path], files: dict[str, Any]) -> dict[str, Any]:
    """Each artifact's per-output verdict against fp32 on the held-out samples."""
    xs, labels = load_eval(files["eval"])
    limits = limits_for(files.get("metrics", []))
    runs = {k: _session(p) for k, p in paths.items()}
    names = runs["fp32"][1]
    ref = outputs(runs["fp32"][0], xs)
    found = {}
    for key, (run, _) in runs.items():
        verdict = verdict_of(outputs(run, xs), ref, names, labels, limits)
        found[key] = {"keeps_fidelity": verdict["keeps"], "failure": verdict["failure"]}
    return found


def _session(path: Path) -> tuple[Any, list[str]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = 2, 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return (lambda x: session.run(None, {name: x.astype(np.float32)}),
            [o.name for o in session.get_outputs()])


def _verdict(rows: list[dict[str, Any]], edge_trial: dict[str, Any] | None) -> dict[str, Any]:
    """Whether edge made the plan, and whether the every-kind artifact keeps fidelity and is
    ``MARGIN`` faster than both all-int8 and fp32 in the longer run."""
    by = {r["artifact"]: r for r in rows}
    every = by.get("every kind float")
    found = {"plan_made_by_edge": bool(edge_trial and edge_trial["plan_made"]),
             "int8_keeps_fidelity": by["int8"]["keeps_fidelity"]}
    if every is None:
        return found | {"pays": False, "groups": _groups_verdict(by)}
    return found | {"every_kind_over_int8": every["over_int8"],
                    "every_kind_over_fp32": every["over_fp32"],
                    "every_kind_keeps_fidelity": every["keeps_fidelity"],
                    "pays": _pays(every, by), "groups": _groups_verdict(by)}


def _pays(row: dict[str, Any], by: dict[str, dict[str, Any]]) -> bool:
    """Keeps fidelity and is ``MARGIN`` faster than both all-int8 and fp32."""
    fastest = min(by["int8"]["p50_ms"], by["fp32"]["p50_ms"])
    return bool(row["keeps_fidelity"]) and row["p50_ms"] <= MARGIN * fastest


def _groups_verdict(by: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each convolution group kept float: its ratios, fidelity and whether it pays."""
    return {g: {"over_int8": by[f"{g} float"]["over_int8"],
                "over_fp32": by[f"{g} float"]["over_fp32"],
                "keeps_fidelity": by[f"{g} float"]["keeps_fidelity"],
                "pays": _pays(by[f"{g} float"], by)}
            for g in CONV_GROUPS if f"{g} float" in by}


if __name__ == "__main__":
    sys.exit(main())
