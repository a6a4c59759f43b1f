"""Device measurements kept on the host, per device and artifact, and regression checks.

Every ``edge bench`` / ``edge deploy`` measurement is appended to
``$EDGE_CACHE_DIR/results/<device>/<artifact sha256[:16]>.jsonl`` (one JSON document per line:
the DeployReport plus the time it was kept). ``edge bench --baseline last`` compares a new
measurement with the previous one kept for the same device and artifact; ``--baseline FILE``
with a report saved from ``edge bench --json``. A failed check (exit 1), so CI pipelines can
gate on it, is by default a slow-down the interleaved rounds make significant (``slower``: a
one-sided Mann-Whitney test of the new round medians against the baseline's, p < ALPHA) and
larger than the baseline's typical deviation between rounds (at least FLOOR_PCT, at most
FALLBACK_PCT); with ``--max-regression PCT``, a p50 slower by more than PCT percent (also the
fallback, at FALLBACK_PCT, when either side has fewer than MIN_ROUNDS rounds or too few for
the test to reach p < ALPHA).
A baseline holds a p50 above 0 and at most MAX_MS (1e9 ms), or is refused (exit 2): a NaN,
0, -1 or 1e308 would pass every check. A saved one is read by the bounded document reader
(edge.core.docfile) and checked before anything is measured; a kept line whose times are not
times is skipped. A kept-results path that is no regular file (a FIFO) is refused unopened.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from edge.core.cache import cache_root
from edge.core.docfile import read_data
from edge.core.documents import MAX_MS, ResultRecord, dump, parse
from edge.core.errors import UsageError
from edge.core.files import is_no_space, no_space
from edge.core.values import DeployReport

__all__ = ["ALPHA", "FALLBACK_PCT", "FLOOR_PCT", "MIN_ROUNDS", "Comparison", "Kept",
           "check_baseline", "compare", "history", "keep", "kept_results", "load_baseline",
           "results_dir", "slower"]

log = logging.getLogger("edge")
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]+")
#: The default check: a slow-down this unlikely to be noise over the interleaved rounds ...
ALPHA = 0.01
#: ... and larger than the baseline's typical deviation between rounds, at least this (percent
#: of its p50: a real 1 % drift fails no pipeline) and at most FALLBACK_PCT.
FLOOR_PCT = 2.0
#: Rounds each side needs for the test; with fewer, a flat limit of FALLBACK_PCT percent.
MIN_ROUNDS = 3
FALLBACK_PCT = 10.0
#: Rounds beyond this many per side are tested by the normal approximation, not exactly.
EXACT_ROUNDS = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """A measurement against its baseline: by a flat limit (``max_regression_pct``) or, with
    none given, by the significance of the slow-down over the interleaved rounds (``p_value``)."""

    baseline_p50_ms: float
    p50_ms: float
    change_pct: float  # positive: slower than the baseline
    max_regression_pct: float | None  # None: the significance test decides
    baseline_source: str
    p_value: float | None = None  # one-sided, new rounds slower than the baseline's
    rounds: tuple[int, int] = (0, 0)  # rounds tested: baseline, new
    floor_pct: float = FLOOR_PCT  # the least slow-down that counts (``_floor``)

    @property
    def regressed(self) -> bool:
        """Slower than the allowed percentage, or significantly and beyond the floor."""
        if self.max_regression_pct is not None:
            return self.change_pct > self.max_regression_pct
        return (self.p_value is not None and self.p_value < ALPHA
                and self.change_pct > self.floor_pct)

    def to_json(self) -> dict[str, Any]:
        return {"baseline_p50_ms": self.baseline_p50_ms, "p50_ms": self.p50_ms,
                "change_pct": round(self.change_pct, 2),
                "max_regression_pct": self.max_regression_pct, "p_value": self.p_value,
                "rounds": list(self.rounds), "floor_pct": round(self.floor_pct, 2),
                "test": self.test,
                "baseline": self.baseline_source, "regressed": self.regressed}

    @property
    def test(self) -> str:
        """What decided, in words."""
        if self.max_regression_pct is not None:
            return f"limit +{self.max_regression_pct:g} %"
        return (f"{self.rounds[1]} rounds vs {self.rounds[0]}, Mann-Whitney p={self.p_value:.2g}"
                f"; a regression needs p < {ALPHA:g} and over +{self.floor_pct:.1f} %")

    def line(self) -> str:
        """One line for the terminal."""
        verdict = "REGRESSION" if self.regressed else "ok"
        return (f"p50 {self.p50_ms:.3f} ms vs baseline {self.baseline_p50_ms:.3f} ms "
                f"({self.change_pct:+.1f} %; {self.test}): {verdict} [{self.baseline_source}]")


def slower(new: Sequence[float], base: Sequence[float]) -> float:
    """The one-sided Mann-Whitney p-value that ``new`` round medians are slower than ``base``:
    the chance that rounds drawn alike would rank at least this far above (ties count half;
    the exact distribution up to EXACT_ROUNDS rounds a side, else the normal approximation)."""
    n, m = len(new), len(base)
    u = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in new for b in base)
    if n > EXACT_ROUNDS or m > EXACT_ROUNDS:
        mean, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
        return 0.5 * math.erfc((u - 0.5 - mean) / sd / math.sqrt(2))
    return sum(_ways(n, m, k) for k in range(math.floor(u), n * m + 1)) / math.comb(n + m, n)


@functools.cache
def _ways(n: int, m: int, u: int) -> int:
    """Orderings of n and m values whose statistic U (pairs with the first above) is ``u``."""
    if u < 0:
        return 0
    if n == 0 or m == 0:
        return 1 if u == 0 else 0
    return _ways(n - 1, m, u - m) + _ways(n, m - 1, u)


def results_dir() -> Path:
    """Where measurements are kept: $EDGE_CACHE_DIR/results (default ~/.cache/edge/results)."""
    return cache_root() / "results"


def _file(report: DeployReport) -> Path:
    device = _UNSAFE.sub("_", report.target).strip("_") or "device"
    return results_dir() / device / f"{report.artifact_sha256[:16]}.jsonl"


def history(report: DeployReport, *, passed_only: bool = False) -> list[DeployReport]:
    """Measurements kept earlier for this report's device and artifact, oldest first
    (``passed_only``: without the ones that failed a baseline check)."""
    path = _file(report)
    _regular(path)
    if not path.is_file():
        return []
    records = _records(path)
    return [r.report for r in records if not (passed_only and r.regressed)]


def _records(path: Path) -> list[ResultRecord]:
    """The file's result records; a torn or foreign line is skipped, never fatal."""
    _regular(path)
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                  .splitlines(), 1):
        try:
            records.append(parse("result", json.loads(line), f"{path}:{number}"))
        except (ValueError, RecursionError, UsageError):
            continue
    return records


def _regular(path: Path) -> None:
    """Refuse a kept-results path that is there but no regular file, before it is opened:
    reading a FIFO (or appending to one) waits for a writer (a reader) forever."""
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} is not a regular file (a FIFO, socket, device or folder?); "
                         "refusing to open it as kept results")


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept measurement: its device folder, when it was kept, and the report."""

    device: str
    kept_at: datetime | None
    regressed: bool
    report: DeployReport


def kept_results(root: Path | None = None) -> dict[str, list[Kept]]:
    """Every kept measurement under ``root`` (a results folder, or one device's folder;
    default ``results_dir()``) by device folder name, oldest first. Torn lines are skipped."""
    root = results_dir() if root is None else Path(root)
    if not root.is_dir():
        return {}
    files = sorted(root.glob("*.jsonl"))
    by_device: dict[str, list[Kept]] = {}
    for file in files or sorted(root.glob("*/*.jsonl")):
        device = file.parent.name
        for record in _records(file):
            by_device.setdefault(device, []).append(
                Kept(device, _when(record.kept_at), record.regressed, record.report))
    epoch = datetime.min.replace(tzinfo=UTC)
    return {d: sorted(k, key=lambda x: x.kept_at or epoch) for d, k in sorted(by_device.items())}


#: Years a kept time may fall in; another (year 1, 9999) is no time edge wrote: unknown.
YEARS = (1970, 2999)


def _when(text: Any) -> datetime | None:
    try:
        when = datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None
    return when if YEARS[0] <= when.year <= YEARS[1] else None


def keep(report: DeployReport, *, regressed: bool = False) -> Path:
    """Append the measurement to its device/artifact history (one write per line)."""
    path = _file(report)
    _regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = ResultRecord(kept_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), regressed=regressed,
                          report=report)
    line = json.dumps(dump("result", record)) + "\n"
    _append(path, line)
    return path


def _append(path: Path, line: str) -> None:
    """Append one whole line: after a torn last line (an older run's full disk) on a line of
    its own; a write the disk cannot take is cut off again (NoSpace naming the file)."""
    with open(path, "a+b", buffering=0) as fh:
        end = fh.seek(0, os.SEEK_END)
        torn = end > 0 and fh.seek(end - 1) >= 0 and fh.read(1) != b"\n"
        data = (b"\n" if torn else b"") + line.encode("utf-8")
        try:
            view = memoryview(data)
            while view:  # an unbuffered write may take part of it; the next one says why
                view = view[fh.write(view) or 0:]
        except OSError as exc:
            with contextlib.suppress(OSError):
                fh.truncate(end)
            if is_no_space(exc):
                raise no_space(path, len(data)) from None
            raise


def check_baseline(spec: str) -> None:
    """Refuse a bad ``--baseline FILE`` before anything is measured (``last`` is looked up
    after the measurement, which names the device and artifact)."""
    if spec != "last":
        _saved_baseline(Path(spec))


def load_baseline(spec: str, report: DeployReport) -> tuple[DeployReport, str] | None:
    """The baseline named by ``--baseline``: ``last`` (the last kept result that passed its
    check; None when there is none yet) or a report saved from ``edge bench --json``."""
    if spec == "last":
        earlier = history(report, passed_only=True)
        if not earlier:
            return None
        _check_p50(earlier[-1], f"--baseline last ({_file(report)})")
        return earlier[-1], f"last kept for {report.target}"
    path = Path(spec)
    baseline = _saved_baseline(path)
    if baseline.artifact_sha256 != report.artifact_sha256:
        raise UsageError(f"--baseline {path} measured another artifact "
                         f"({baseline.artifact_sha256[:16]}, not "
                         f"{report.artifact_sha256[:16]})")
    return baseline, str(path)


def _saved_baseline(path: Path) -> DeployReport:
    """A report saved from ``edge bench --json``, read by the bounded reader and checked."""
    if not path.is_file():
        raise UsageError(f"--baseline {path}: no such file (give `last` or a report saved "
                         "from `edge bench --json`)")
    doc = read_data(path, "json")
    try:
        baseline = DeployReport.from_json(doc)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--baseline {path}: not a report from `edge bench --json` "
                         f"({type(exc).__name__})") from None
    _check_p50(baseline, f"--baseline {path}")
    return baseline


def _check_p50(baseline: DeployReport, where: str) -> None:
    """A baseline holds a p50 above 0 and at most MAX_MS (the range of a kept time): a NaN,
    0 or 1e308 would pass every check."""
    p50 = baseline.bench.p50_ms
    if isinstance(p50, bool) or not isinstance(p50, int | float) or not (
            math.isfinite(p50) and 0 < p50 <= MAX_MS):
        raise UsageError(f"{where}: its p50_ms {p50!r} is not a time (a number of ms above 0 "
                         f"and at most {MAX_MS:g}); give a report from `edge bench --json`")


def compare(report: DeployReport, baseline: DeployReport, source: str,
            max_regression_pct: float | None) -> Comparison:
    """The new p50 against the baseline's, by the flat limit given or by the significance of
    the slow-down over both sides' interleaved rounds (a flat FALLBACK_PCT where either has
    fewer than MIN_ROUNDS); a warning when the baseline was timed another way."""
    _check_p50(baseline, f"baseline {source}")
    if _method(baseline) != _method(report):
        log.warning("the baseline (%s) was measured %s, this result %s: compare with care",
                    source, _method(baseline), _method(report))
    base = baseline.bench.p50_ms
    change = (report.bench.p50_ms - base) / base * 100
    done = Comparison(baseline_p50_ms=base, p50_ms=report.bench.p50_ms, change_pct=change,
                      max_regression_pct=max_regression_pct, baseline_source=source)
    if max_regression_pct is not None:
        return done
    new, old = _rounds(report), _rounds(baseline)
    if min(len(new), len(old)) < MIN_ROUNDS or not _can_reach(len(new), len(old)):
        return replace(done, max_regression_pct=FALLBACK_PCT)
    return replace(done, p_value=slower(new, old), rounds=(len(old), len(new)),
                   floor_pct=_floor(old))


def _can_reach(n: int, m: int) -> bool:
    """Whether n rounds against m can be significant at all (3 against 3 cannot: the rarest
    ordering has p = 1/20)."""
    return n > EXACT_ROUNDS or m > EXACT_ROUNDS or 1 / math.comb(n + m, n) < ALPHA


def _floor(rounds: Sequence[float]) -> float:
    """The least slow-down that counts, percent: the baseline's typical round-to-round
    deviation (the median absolute deviation, scaled to a normal's sigma: one spiked round
    does not set it), at least FLOOR_PCT and at most FALLBACK_PCT."""
    mid = median(rounds)
    spread = 1.4826 * median(abs(v - mid) for v in rounds) / mid * 100
    return min(FALLBACK_PCT, max(FLOOR_PCT, spread))


def _rounds(report: DeployReport) -> tuple[float, ...]:
    """The round medians of a result that are times (a saved report's are checked here)."""
    return tuple(v for v in report.bench.round_ms
                 if isinstance(v, int | float) and math.isfinite(v) and 0 < v <= MAX_MS)


def _method(report: DeployReport) -> str:
    """How a device result was timed: in interleaved rounds, or one run after another."""
    rounds = report.bench.device.get("interleaved_rounds")
    return f"in {rounds} interleaved rounds" if rounds else "one run after another"
