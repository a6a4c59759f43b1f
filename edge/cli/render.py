"""Plain-text rendering of tables and reports for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edge.core.bundle import chosen_load_line, load_line, version_drift
from edge.core.extras import not_installed
from edge.core.model import macs_caveat
from edge.core.select import label
from edge.core.settle import PAIRED_NOTE
from edge.core.tables import table
from edge.core.units import size_text
from edge.core.values import (
    BenchResult,
    Bundle,
    CandidateResult,
    Contest,
    DeployReport,
    ModelInfo,
    Observed,
)
from edge.core.verify.rows import HEADERS, kind_lines, output_rows

if TYPE_CHECKING:
    from devices.deploy import DeployOutcome
    from devices.release import ReleasesReport, RollbackReport

__all__ = ["render_bundle", "render_deploy", "render_deploy_outcome", "render_model",
           "render_releases", "render_rollback", "table"]


def _count(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def render_model(info: ModelInfo, fit: str | None = None) -> str:
    """The ``edge inspect`` view."""
    io = [("input", s.name, list(s.shape), s.dtype) for s in info.inputs]
    io += [("output", s.name, list(s.shape), s.dtype) for s in info.outputs]
    caveat = macs_caveat(info)
    parts = [
        f"{info.path}",
        f"  opset {info.opset}   precision {info.precision}   size {size_text(info.size_bytes)}   "
        f"params {_count(info.params)}   MACs {'>= ' if caveat else ''}{_count(info.macs)}   "
        f"sha256 {info.sha256[:16]}",
        "",
        table(("", "name", "shape", "dtype"), io),
        "",
        table(("op", "count"), list(info.ops.items())),
    ]
    if fit:
        parts += ["", fit]
    return "\n".join(parts)


def _fidelity(result: CandidateResult) -> str:
    fid = result.fidelity
    if fid is None:
        return ""
    text = f"cos {fid.cosine:.4f}"
    if fid.accuracy is not None:
        text += f"  acc {100 * fid.accuracy:.1f}%"
    elif fid.top1_agreement is not None:
        text += f"  top1 {100 * fid.top1_agreement:.1f}%"
    return text


def render_bundle(bundle: Bundle, where: str) -> str:
    """The ``edge optimize`` summary."""
    mixed = any(r.bench is not None and r.bench.source not in (None, "host")
                for r in bundle.candidates)
    reasons, extras = not_installed([r.reason for r in bundle.candidates])
    rows = [(label(r), _status(r), size_text(r.artifact.total_bytes) if r.artifact else "",
             _fidelity(r), _p50(r, mixed), why) for r, why in zip(bundle.candidates, reasons,
                                                                   strict=True)]
    ref = next((r.fidelity.reference_accuracy for r in bundle.candidates
                if r.fidelity and r.fidelity.reference_accuracy is not None), None)
    head = [f"profile {bundle.profile}   calibration: {bundle.calibration}",
            f"verified on: {bundle.evaluation}"
            + (f"   fp32 reference accuracy {100 * ref:.1f}%" if ref is not None else "")]
    load = chosen_load_line(bundle)
    tail = [f"chosen: {bundle.chosen or 'none'} - {bundle.reason}", *([load] if load else []),
            *([f"rounds: {contest_text(bundle.contest)}"] if bundle.contest else []),
            f"bundle: {where}"]
    paired = any(r.bench is not None and r.bench.paired_ms is not None
                 for r in bundle.candidates)
    ms = "ms, paired" if paired else "p50 ms"
    headers = ("candidate", "status", "size", "fidelity", ms if mixed else f"{ms} (host)",
               "reason")
    lines = ["", table(headers, rows), *([extras] if extras else []),
             *([PAIRED_NOTE] if paired else []), ""]
    return "\n".join(head + lines + _per_output(bundle) + tail)


def _status(result: CandidateResult) -> str:
    """Its status, and "fell back" when it was observed running away from its plan."""
    fell_back = result.bench is not None and result.bench.fell_back
    return f"{result.status}, fell back" if fell_back else result.status


def _compared(candidate: str, bench: BenchResult) -> str:
    if bench.paired_ms is None:
        return f"{candidate} p50 {bench.p50_ms:.3f} ms"
    return f"{candidate} {bench.paired_ms:.3f} ms paired (p50 {bench.p50_ms:.3f})"


def _p50(result: CandidateResult, labelled: bool) -> str:
    """A candidate's median, with where it comes from when the table mixes sources."""
    bench = result.bench
    if bench is None:
        return ""
    ms = bench.compared_ms
    return f"{ms:.3f} ({bench.source_label})" if labelled else f"{ms:.3f}"


def _per_output(bundle: Bundle) -> list[str]:
    """Fidelity per output: how each output is judged (and why), then one row per candidate
    and output; nothing for a bundle written before per-output verification."""
    rows = output_rows(bundle.candidates)
    if not rows:
        return []
    kinds = ["outputs judged as:"] + [f"  {line}" for line in kind_lines(bundle.candidates)]
    return kinds + ["", table(HEADERS, rows), ""]


def render_deploy(report: DeployReport,
                  extra: Sequence[tuple[str, str]] = ()) -> str:
    """The ``edge deploy`` summary (``extra`` rows go before "why")."""
    b = report.bench
    dev = b.device
    state = "active" if report.active else "installed, not active"
    state += f" in the slot {report.name}" if report.name else ""
    rows = [
        ("device", f"{report.target} ({report.transport})"),
        ("machine", f"{dev.get('machine')}  {dev.get('cpu')}  {dev.get('cores')} cores  "
                    f"{dev.get('mem_total_mb')} MB  python {dev.get('python')}"),
        ("candidate", f"{report.candidate}  ({b.runtime} {dev.get('runtime_version')})"),
        ("release", f"{report.release}  ({state})"),
        ("latency", f"p50 {b.p50_ms:.3f} ms  p90 {b.p90_ms:.3f} ms  p99 {b.p99_ms:.3f} ms  "
                    f"mean {b.mean_ms:.3f} ms  ({_timing(b)}, {b.threads} threads)"),
        ("load", f"{b.load_ms:.1f} ms" if b.load_ms is not None else "n/a"),
        ("peak RSS", f"{b.peak_rss_mb:.1f} MB" if b.peak_rss_mb is not None else "n/a"),
    ]
    rows += [("ran", b.observed.line().removeprefix("ran: "))] if b.observed else []
    rows += _bench_metric_rows(b)
    if report.compared:
        rows.append(("compared", "; ".join(_compared(c.candidate, c.bench)
                                            for c in report.compared)))
    if report.contest:
        rows.append(("rounds", contest_text(report.contest)))
    rows += list(extra)
    if report.reason:
        rows.append(("why", report.reason))
    head = "measured on the device by the edge agent"
    if report.transport == "local":
        head += (f" (the embedded local device stands in for {report.profile}: "
                 "these are this machine's numbers)")
    return head + "\n" + table(("", ""), rows)


def contest_text(contest: Contest) -> str:
    """The rounds and the spread of round medians behind a measured choice, on one line."""
    more = (f" + {contest.extra_rounds} of {', '.join(contest.contenders)}"
            if contest.extra_rounds else "")
    spread = "; ".join(f"{s.candidate} {s.low_ms:.3f}-{s.high_ms:.3f} ms (paired "
                       f"{s.paired_ms:.3f})" for s in contest.standings)
    verdict = "clear" if contest.clear else "not clear: paired medians decided"
    return f"{contest.rounds} interleaved{more} ({verdict}); round medians {spread}"


def _bench_metric_rows(b: BenchResult) -> list[tuple[str, str]]:
    """Throughput, temperature/throttling before -> after, power with its source label."""
    rows = []
    if b.throughput_fps is not None:
        rows.append(("throughput", f"{b.throughput_fps:.1f} inferences/s"))
    m = b.metrics
    if not m:
        return rows
    before, after = m.get("before") or {}, m.get("after") or {}

    def value(snap: dict, *keys: str) -> object:
        for key in keys:
            snap = snap.get(key) or {} if isinstance(snap, dict) else {}
        return snap.get("value") if isinstance(snap, dict) else None

    def pair(key: tuple[str, ...], fmt: str) -> str | None:
        one, two = value(before, *key), value(after, *key)
        if one is None and two is None:
            return None
        return " -> ".join(format(v, fmt) if v is not None else "?" for v in (one, two))

    parts = []
    temp = pair(("temperature_c",), ".1f")
    if temp:
        parts.append(f"CPU {temp} °C")
    ratio = pair(("throttling", "freq_ratio"), ".2f")
    if ratio:
        parts.append(f"freq cur/max {ratio}")
    count = pair(("throttling", "throttle_count"), "d")
    if count:
        parts.append(f"throttle events {count}")
    pi = pair(("throttling", "vcgencmd"), "s")
    if pi:
        parts.append(f"get_throttled {pi}")
    if parts:
        rows.append(("thermal", "  ".join(parts) + "  (before -> after)"))
    if "power_source" in m:
        watts = m.get("power_w")
        shown = f"{watts:.2f} W" if watts is not None else "n/a"
        rows.append(("power", f"{shown}  ({m['power_source']})"))
    return rows


def render_deploy_outcome(outcome: DeployOutcome, bundle: Bundle | None = None) -> str:
    """The ``edge deploy`` summary with the release steps: transfer, health, rollback target;
    with its ``bundle``, how to load the artifact deployed (not always the bundle's choice)."""
    t, h = outcome.transfer, outcome.health
    sent = (f"{t.files_sent} file(s), {size_text(t.bytes_sent)}" if t.files_sent
            else "nothing (0 B): the device already had this release")
    if t.files_sent and t.files_reused:
        sent += f"; {t.files_reused} file(s) already there"
    rows = [("sent", sent),
            ("health", f"loaded in {h.load_ms:.1f} ms, ran once in {h.run_ms:.3f} ms "
                       f"({h.runtime}) before the switch")]
    if outcome.previous and outcome.previous != outcome.report.release:
        rows.append(("previous", f"{outcome.previous}  (edge rollback --name "
                                 f"{outcome.report.name} returns to it)"))
    if outcome.pruned:
        rows.append(("pruned", ", ".join(outcome.pruned)))
    how = load_line(bundle, outcome.report.candidate) if bundle is not None else None
    rows += [("to load it", how)] if how else []
    drift = (version_drift(bundle, outcome.report.candidate, outcome.report.bench)
             if bundle is not None else None)
    rows += [("versions", drift)] if drift else []
    return render_deploy(outcome.report, rows)


def render_rollback(report: RollbackReport) -> str:
    """The ``edge rollback`` summary."""
    what = f"{report.release}" + (f"  ({report.artifact})" if report.artifact else "")
    if not report.changed:
        return (f"{report.target}: {what} is already the active release of {report.name}; "
                "nothing changed")
    rows = [("device", f"{report.target} ({report.transport})"), ("model", report.name),
            ("active", what), ("was", report.previous or "none")]
    if report.health is not None:
        rows.append(("health", f"loaded in {report.health.load_ms:.1f} ms, ran once in "
                               f"{report.health.run_ms:.3f} ms before the switch"))
    return "rolled back\n" + table(("", ""), rows)


def render_releases(report: ReleasesReport) -> str:
    """The ``edge releases`` listing: most recently used first."""
    mine = report.name is not None  # a slot asked (or the only one): its states shown
    rows = []
    for r in report.releases:
        state = ("active" if r.active else "previous" if r.previous
                 else "incomplete" if not r.complete else "")
        rows.append(((r.release, state) if mine else (r.release,))
                    + (", ".join(r.current_in), r.artifact or "", size_text(r.size_bytes),
                       r.last_active or "", r.installed, _ran(r.observed)))
    head = f"{report.target} ({report.transport})  work dir {report.work_dir}"
    parts = [head, ""]
    if len(report.slots) > 1 or not mine:
        parts += [_slots_table(report), ""]
    if rows:
        state_column = (f"state ({report.name})",) if mine else ()
        parts.append(table(("release", *state_column, "current in", "artifact", "size",
                            "last active", "installed", "ran (last timed)"), rows))
    else:
        parts.append("no releases installed")
    if report.pruned:
        parts += ["", f"pruned: {', '.join(report.pruned)}"]
    if report.previous:
        parts += ["", f"edge rollback{_name_flag(report)} would switch to {report.previous}"]
    return "\n".join(parts)


def _ran(observed: Observed | None) -> str:
    """What ran a release the last time it was timed, with any fallback; '' when unknown."""
    if observed is None:
        return ""
    fell_back = observed.fell_back()
    return observed.line().removeprefix("ran: ") + (f"; FELL BACK: {fell_back}"
                                                     if fell_back else "")


def _slots_table(report: ReleasesReport) -> str:
    """Every model's slot on the device: what it runs, what its rollback would switch to."""
    if not report.slots:
        return "no model is current on the device"
    return table(("model", "active", "artifact", "rollback to"),
                 [(s.name, s.active or "", s.artifact or "", s.previous or "")
                  for s in report.slots])


def _name_flag(report: ReleasesReport) -> str:
    """`` --name NAME`` when the device holds several models (rollback must be told which)."""
    return f" --name {report.name}" if len(report.slots) > 1 else ""


def _timing(bench: BenchResult) -> str:
    """How it was timed: runs, interleaved rounds and the warm-up before each round's runs."""
    rounds = bench.device.get("interleaved_rounds")
    if not rounds:  # a result kept before edge timed in rounds
        return f"{bench.runs} runs after {bench.warmup} warm-up"
    return (f"{bench.runs} runs in {rounds} interleaved rounds, {bench.warmup} warm-up before "
            "each")
