"""Each device's measurement history (from ``$EDGE_CACHE_DIR/results``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge.core.results import kept_results
from edge.flows.report.html import Section, figure, fmt_ms, note, page, pyplot, svg, table

#: Devices shown in the history section (the most recently measured first).
MAX_DEVICES = 8


def bundle_history(bundle: Any, root: Path | None) -> dict[str, list[Any]]:
    """Kept results of every device that measured one of the bundle's artifacts."""
    shas = {r.artifact.sha256 for r in bundle.candidates if r.artifact is not None}
    return {device: kept for device, kept in kept_results(root).items()
            if any(k.report.artifact_sha256 in shas for k in kept)}


def history_section(plt: Any, history: dict[str, list[Any]], bundle: Any = None) -> Section:
    if not history:
        return Section("Device history", note(
            "No measurements kept on this host for these artifacts yet: `edge deploy` and "
            "`edge bench` keep every result in $EDGE_CACHE_DIR/results."), "history")
    ids = {r.artifact.sha256: r.candidate.id for r in bundle.candidates
           if r.artifact is not None} if bundle is not None else {}
    latest = sorted(history, key=lambda d: max(
        (k.kept_at.timestamp() for k in history[d] if k.kept_at), default=0), reverse=True)
    body = []
    for n, device in enumerate(latest[:MAX_DEVICES]):
        body.append(_device_history(plt, n, device, history[device], ids))
    if len(latest) > MAX_DEVICES:
        body.append(note(f"{len(latest) - MAX_DEVICES} more device(s) not shown."))
    return Section("Device history", "".join(body), "history")


def _device_history(plt: Any, n: int, device: str, kept: list[Any], ids: dict[str, str]) -> str:
    target = kept[-1].report.target or device
    dated = len({k.kept_at for k in kept}) > 1 and all(k.kept_at is not None for k in kept)
    series: dict[str, list[tuple[Any, Any]]] = {}
    for i, k in enumerate(kept):
        when = k.kept_at.astimezone().replace(tzinfo=None) if dated else i + 1
        series.setdefault(k.report.artifact_sha256, []).append((when, k))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    flagged = False
    for sha, points in series.items():
        ours = sha in ids
        label = (f"{ids[sha]} ({sha[:8]})" if ours
                 else f"release {sha[:8]} ({points[-1][1].report.candidate})")
        ax.plot([x for x, _ in points], [k.report.bench.p50_ms for _, k in points], marker="o",
                ls="-" if ours else "--", label=label)
        bad = [(x, k.report.bench.p50_ms) for x, k in points if k.regressed]
        if bad:
            ax.scatter([x for x, _ in bad], [y for _, y in bad], marker="X", s=90, c="#c62828",
                       zorder=4, label=None if flagged else "failed baseline check")
            flagged = True
    ax.set_ylabel("p50 ms on the device")
    _time_axis(ax, dated, len(kept))
    ax.set_title(f"History on {target}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_ylim(0, 1.15 * max(k.report.bench.p50_ms for k in kept))
    plot = svg(fig, f"plot-history-{n}", f"History on {target}")
    rows = [_history_row(k) for k in kept]
    caption = (f"p50 latency measured on {target} by edge deploy / edge bench, per artifact; "
               "dashed lines are artifacts of other bundles or releases. Load time, peak "
               "memory and power are the agent's, on the device (power: a sensor, or "
               "'est.' when estimated from the profile).")
    return figure(plot, caption) + table(
        ("kept at", "candidate", "release", "p50 ms", "p90 ms", "p99 ms", "runs", "load ms",
         "peak RSS MB", "power W", "check", "ran"),
        rows, ["rejected" if k.regressed else "" for k in kept], numeric=(3, 4, 5, 6, 7, 8, 9))


def _history_row(k: Any) -> tuple[Any, ...]:
    b = k.report.bench
    power = (b.metrics or {}).get("power_w")
    estimated = "estimate" in str((b.metrics or {}).get("power_source", ""))
    return (k.kept_at.strftime("%Y-%m-%d %H:%M:%S") if k.kept_at else "", k.report.candidate,
            k.report.release, fmt_ms(b.p50_ms), fmt_ms(b.p90_ms), fmt_ms(b.p99_ms), b.runs,
            "" if b.load_ms is None else f"{b.load_ms:.1f}",
            "" if b.peak_rss_mb is None else f"{b.peak_rss_mb:.1f}",
            "" if power is None else f"{power:.2f}" + (" est." if estimated else ""),
            "REGRESSION" if k.regressed else "", _ran(b.observed))


def _ran(observed: Any) -> str:
    """'CPU f32 100% of MACs (9 layers)', with a fallback; '' when it was not asked."""
    if observed is None:
        return ""
    fell_back = observed.fell_back()
    return observed.line().removeprefix("ran: ") + (f"; FELL BACK: {fell_back}"
                                                     if fell_back else "")


def observed_tables(timed: list[tuple[str, Any]]) -> str:
    """What really ran each timed candidate (``timed``: its label and bench), as its runtime
    said where it was timed: the share of the MACs (of the layers where no shape says) per
    unit and precision, the versions, and any fallback from its plan; '' when none was asked."""
    seen = [(name, bench) for name, bench in timed
            if bench is not None and bench.observed is not None]
    if not seen:
        return ""
    rows, classes = [], []
    for name, bench in seen:
        found = bench.observed
        fell_back = found.fell_back() or ""
        versions = ", ".join(f"{k} {v}" for k, v in found.versions.items())
        shares = found.shares() if found.observable else ()
        for share in shares or (None,):
            rows.append((name, bench.where, share.unit if share else "not observable",
                         share.precision if share else found.why_not,
                         f"{100 * share.share:.1f}%" if share else "",
                         share.layers if share else "", versions, fell_back))
            classes.append("rejected" if fell_back else "")
    return (note("What really ran each timed candidate, as its runtime said where it was "
                 "timed (OpenVINO's runtime graph, ONNX Runtime's profile, LiteRT's delegate "
                 "partitions, NCNN's Vulkan routing): the share of its multiply-accumulates "
                 "(of its layers where no shape says) per unit and precision. A runtime that "
                 "cannot say is 'not observable', never guessed.")
            + table(("candidate", "where", "unit", "precision", "share", "layers", "versions",
                     "fell back"), rows, classes, numeric=(4, 5)))


def _time_axis(ax: Any, dated: bool, n: int) -> None:
    """When each result was kept (concise dates), or their order when a time is missing."""
    if dated:
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("when measured (this host's local time)")
        ax.margins(x=0.05)
        return
    ax.set_xlabel("measurement, oldest first")
    ax.set_xlim(0.5, n + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)


def render_results_report(results: Path) -> str:
    """The HTML report of a results folder: the history of every device in it."""
    history = kept_results(Path(results))
    plt = pyplot()
    return page("edge report: device history", str(Path(results).resolve()),
                 [history_section(plt, history)])
