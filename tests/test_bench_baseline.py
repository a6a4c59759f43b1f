"""`edge bench --baseline`: results kept per device and artifact, regressions exit 1 (for CI)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from edge.core.results import ALPHA, history, results_dir
from edge.core.values import DeployReport
from tests.support.cli import run_cli
from tests.support.profiles import one_runtime

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("baseline")
    out = folder / "digits.bundle"
    # --exhaustive: onnxruntime-fp32 (benched below, not the chosen one) is converted too
    done = run_cli("deploy", "sample:digits", "--profile", str(one_runtime(folder)), "-o",
                   str(out), "--runs", "5", "--json", "--exhaustive")
    assert done.status == 0, done.stderr
    return out


def _bench(bundle: Path, *extra: str) -> tuple[int, dict | None, str]:
    done = run_cli("bench", str(bundle), "--candidate", "onnxruntime-fp32", "--runs", "20",
                   "--json", *extra)
    return done.status, (json.loads(done.stdout) if done.stdout.strip() else None), done.stderr


def test_every_result_is_kept_and_last_is_the_baseline(bundle: Path) -> None:
    status, first, _ = _bench(bundle)
    assert status == 0 and first is not None
    report = DeployReport.from_json(first)
    before = len(history(report))
    status, second, err = _bench(bundle, "--baseline", "last", "--max-regression", "1000")
    assert status == 0, err
    assert second is not None and second["baseline"]["regressed"] is False
    assert second["baseline"]["baseline_p50_ms"] == pytest.approx(history(report)[-2].bench.p50_ms)
    assert len(history(report)) == before + 1
    assert str(results_dir()).startswith(os.environ["EDGE_CACHE_DIR"])


def test_a_slower_result_than_the_baseline_exits_1(bundle: Path, tmp_path: Path) -> None:
    status, doc, _ = _bench(bundle)
    assert status == 0 and doc is not None
    fast = json.loads(json.dumps(doc))
    fast["bench"]["p50_ms"] = doc["bench"]["p50_ms"] / 100  # a baseline 100x faster
    fast["bench"]["round_ms"] = [v / 100 for v in doc["bench"]["round_ms"]]
    saved = tmp_path / "baseline.json"
    saved.write_text(json.dumps(fast))
    status, regressed, err = _bench(bundle, "--baseline", str(saved))
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("error: latency regressed")
    assert regressed is not None and regressed["baseline"]["regressed"] is True
    assert regressed["baseline"]["change_pct"] > 1000
    assert regressed["baseline"]["p_value"] < ALPHA  # every new round slower: significant


def test_bad_baselines_are_usage_errors(bundle: Path, tmp_path: Path) -> None:
    missing = _bench(bundle, "--baseline", str(tmp_path / "nope.json"))
    assert missing[0] == 2 and "nope.json" in missing[2] and missing[2].count("\n") == 1
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    assert _bench(bundle, "--baseline", str(junk))[0] == 2
    status, doc, _ = _bench(bundle)
    assert doc is not None
    other = json.loads(json.dumps(doc))
    other["artifact_sha256"] = "0" * 64
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(other))
    status, _, err = _bench(bundle, "--baseline", str(foreign))
    assert status == 2 and "another artifact" in err


def test_first_last_baseline_passes_and_regressions_are_not_baselines(tmp_path: Path) -> None:
    out = tmp_path / "fresh.bundle"
    # --exhaustive: onnxruntime-fp32, benched below, is converted even where the original wins
    done = run_cli("deploy", "sample:digits", "--profile", str(one_runtime(tmp_path, "x86-64")),
                   "-o", str(out), "--runs", "3", "--json", "--exhaustive")
    assert done.status == 0, done.stderr
    shutil.rmtree(results_dir(), ignore_errors=True)  # this session's store: start empty
    status, first, err = _bench(out, "--baseline", "last")
    assert status == 0, err  # nothing kept yet for a fresh artifact: kept, passes
    assert first is not None and "baseline" not in first
    report = DeployReport.from_json(first)
    fast = dict(first, bench=dict(first["bench"], p50_ms=first["bench"]["p50_ms"] / 100,
                                  round_ms=[v / 100 for v in first["bench"]["round_ms"]]))
    saved = tmp_path / "fast.json"
    saved.write_text(json.dumps(fast))
    assert _bench(out, "--baseline", str(saved))[0] == 1
    assert len(history(report)) == 2 and len(history(report, passed_only=True)) == 1
