"""Sizes and numbers a file declares are checked before edge acts on them (issue 27): array
headers against the bytes behind them, inventory host ranges and nesting, baselines, and the
text and numbers the report draws."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from html import escape
from pathlib import Path

import numpy as np
import pytest

from devices.host_patterns import expand, expanded_count
from devices.inventory import load_inventory
from devices.inventory_files import MAX_HOSTS
from edge.core import data
from edge.core.data import load_dataset
from edge.core.errors import UsageError
from edge.core.model import inspect_model
from edge.core.results import check_baseline, compare, keep, kept_results, load_baseline
from edge.core.values import DeployReport
from edge.flows.report import render_report
from partition.split import read_split_yaml
from tests.support.cli import run_cli
from tests.support.hostile import OLD_BUNDLE, tiny_model
from tests.support.hostile_sizes import (
    SPLIT_EDITS,
    children_bomb,
    npy_bytes,
    report_doc,
    split_make,
    zip_bytes,
)


@pytest.fixture
def model(tmp_path: Path) -> object:
    return inspect_model(tiny_model(tmp_path / "m.onnx"))


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


# ---------------------------------------------------------------- arrays


@pytest.mark.parametrize("content", [
    npy_bytes((10**11, 4)), npy_bytes((4, 10**11), "<f8", fortran=True),
    npy_bytes((10**11, 4), version=2), npy_bytes((-(10**11), -4)),
], ids=["huge", "fortran", "v2", "negative"])
def test_an_npy_header_declaring_more_than_the_file_holds_is_refused(
        tmp_path: Path, model: object, content: bytes) -> None:
    path = tmp_path / "d.npy"
    path.write_bytes(content)
    with pytest.raises(UsageError, match="d.npy: its header declares"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npy_over_the_budget_is_refused_before_it_is_read(
        tmp_path: Path, model: object, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.npy"
    np.save(path, np.zeros((64, 4), np.float32))
    monkeypatch.setattr(data, "MAX_DATA_BYTES", 512)
    with pytest.raises(UsageError, match="more than edge reads"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npz_member_is_checked_and_extra_members_are_never_read(
        tmp_path: Path, model: object) -> None:
    good = _npy(np.ones((8, 4), np.float32))
    extra = tmp_path / "extra.npz"
    extra.write_bytes(zip_bytes([("x.npy", good, 0, len(good)),
                                 ("junk.npy", npy_bytes((10**11, 4)), 0, 144)]))
    assert len(load_dataset(extra, model).feeds) == 8  # type: ignore[arg-type]
    huge = tmp_path / "huge.npz"
    huge.write_bytes(zip_bytes([("x.npy", npy_bytes((10**11, 4)), 0, 144)]))
    with pytest.raises(UsageError, match="member x: its header declares"):
        load_dataset(huge, model)  # type: ignore[arg-type]


def test_a_deflate_bomb_is_refused_by_its_declared_size(
        tmp_path: Path, model: object, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", _npy(np.zeros((4096, 4), np.float32)))
    monkeypatch.setattr(data, "MAX_DATA_BYTES", 4096)
    with pytest.raises(UsageError, match="more than edge reads"):
        load_dataset(path, model)  # type: ignore[arg-type]


def test_an_npz_of_too_many_members_is_refused(tmp_path: Path, model: object) -> None:
    good = _npy(np.ones((8, 4), np.float32))
    path = tmp_path / "d.npz"
    path.write_bytes(zip_bytes([(f"m{i}.npy", good, 0, len(good)) for i in range(1100)]))
    with pytest.raises(UsageError, match="1,100 members"):
        load_dataset(path, model)  # type: ignore[arg-type]


def _dynamic(tmp_path: Path) -> object:
    """A model whose input is [N, k], both symbolic: any sample width fits."""
    return inspect_model(tiny_model(tmp_path / "dyn.onnx", dims=("N", "k")))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape, match", [
    ((10**18, 0), "1,000,000,000,000,000,000 samples"),
    ((1_000_001, 0), "1,000,001 samples"),
    ((0, 10**18), "more values than edge reads"),
    ((4, 0, 10**12), "more values than edge reads"),
], ids=["samples-1e18", "samples-1e6+1", "width-1e18", "zero-middle"])
def test_a_header_of_too_many_samples_or_values_is_refused_though_it_declares_no_bytes(
        tmp_path: Path, shape: tuple[int, ...], match: str) -> None:
    model = _dynamic(tmp_path)
    (tmp_path / "d.npy").write_bytes(npy_bytes(shape, body=0))
    (tmp_path / "d.npz").write_bytes(zip_bytes([("x.npy", npy_bytes(shape, body=0), 0,
                                                 len(npy_bytes(shape, body=0)))]))
    for name in ("d.npy", "d.npz"):
        with pytest.raises(UsageError, match=match):
            load_dataset(tmp_path / name, model)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(8, 0), (8, 1, 0)])
def test_samples_of_no_values_are_refused(tmp_path: Path, shape: tuple[int, ...]) -> None:
    np.save(tmp_path / "d.npy", np.zeros(shape, np.float32))
    with pytest.raises(UsageError, match=r"samples of shape .* hold no values for input 'x'"):
        load_dataset(tmp_path / "d.npy", _dynamic(tmp_path))  # type: ignore[arg-type]


def test_an_image_that_is_a_fifo_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    model = inspect_model(tiny_model(tmp_path / "m.onnx", dims=(1, 3, 8, 8)))
    (tmp_path / "images").mkdir()
    os.mkfifo(tmp_path / "images" / "a.png")
    with pytest.raises(UsageError, match="a.png is not a regular file"):
        load_dataset(tmp_path / "images", model)


# ---------------------------------------------------------------- inventories


def _inventory(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text", [
    ("hosts.yml", "all:\n  hosts:\n    pi[0:99999999]:\n"),
    ("hosts.ini", "[web]\nn[0:9999][0:9999]\n"),
    ("hosts.ini", "".join(f"[g{i}]\npi[0:8999]\n" for i in range(12))),
], ids=["range", "product", "repeated"])
def test_host_ranges_are_counted_before_they_are_expanded(
        tmp_path: Path, name: str, text: str) -> None:
    with pytest.raises(UsageError, match="at most 10,000"):
        load_inventory(_inventory(tmp_path, name, text))


def test_an_inventory_of_more_than_max_hosts_is_refused(tmp_path: Path) -> None:
    text = "[web]\n" + "".join(f"h{i}[0:999]\n" for i in range(11))
    with pytest.raises(UsageError, match="more than 10,000 hosts"):
        load_inventory(_inventory(tmp_path, "hosts.ini", text))
    assert len(load_inventory(_inventory(tmp_path, "ok.ini", "[web]\npi[0:9999]\n")).hosts
               ) == MAX_HOSTS


def test_expanded_count_matches_expand() -> None:
    for pattern in ("pi", "pi[0:9]", "n[a:f:2]x[01:10]", "w[0:20:3].lan", "x[a:Z]", "y[c:C:5]",
                    "a[0:2]b[c:d]c[08:10]"):
        assert expanded_count(pattern) == len(expand(pattern, "here")), pattern


@pytest.mark.parametrize("pattern", [
    "pi[[0:0]:99999999]", "pi[0:[9:9]9999999]", "pi[[1:1]0:99999999]", "pi[[0:0]:3]",
    "pi[0:[3:3]]", "pi[[0:1]]", "pi[0:3]]", "pi[0:3][",
])
def test_a_range_in_a_range_or_a_stray_bracket_is_refused_never_expanded(
        tmp_path: Path, pattern: str) -> None:
    assert expanded_count(pattern) == 1
    with pytest.raises(UsageError, match=r"here: a range is \[START:END\]"):
        expand(pattern, "here")
    path = _inventory(tmp_path, "hosts.ini", f"[web]\n{pattern}\n")
    with pytest.raises(UsageError, match=re.escape(f"host {pattern}: a range is")):
        load_inventory(path)


def test_a_range_beyond_int64_is_counted_and_refused(tmp_path: Path) -> None:
    assert expanded_count("pi[0:99999999999999999999999]") == 10**23
    with pytest.raises(UsageError, match="at most 10,000"):
        load_inventory(_inventory(tmp_path, "hosts.ini", "[web]\npi[0:99999999999999999999999]\n"))


@pytest.mark.parametrize("name, text", [
    ("hosts.yml", "all:\n  hosts:\n    pi:\n      v: " + "[" * 3000 + "]" * 3000 + "\n"),
    ("hosts.yml", "all:\n  vars:\n    v: " + "{a: " * 100 + "1" + "}" * 100 + "\n  hosts:\n"
     "    pi:\n"),
    ("hosts.ini", "[web]\npi v=" + "[" * 90 + "]" * 90 + "\n"),
], ids=["yaml-3000", "yaml-100", "ini-90"])
def test_inventory_vars_nested_too_deep_are_refused(tmp_path: Path, name: str,
                                                    text: str) -> None:
    with pytest.raises(UsageError, match="nested deeper than 64"):
        load_inventory(_inventory(tmp_path, name, text))


def test_an_alias_bomb_of_children_is_refused_not_walked(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="more than 1,000,000 values"):
        load_inventory(_inventory(tmp_path, "hosts.yml", children_bomb(26)))
    small = load_inventory(_inventory(tmp_path, "small.yml", children_bomb(4)))
    assert [h.name for h in small.hosts] == ["pi"]


# ---------------------------------------------------------------- the regression gate


def _report(p50: object) -> DeployReport:
    return DeployReport.from_json(report_doc(p50))


@pytest.mark.parametrize("p50", [float("nan"), float("inf"), 0, -1, "nan", "-inf"])
def test_a_baseline_file_without_a_finite_positive_p50_is_refused(
        tmp_path: Path, p50: object) -> None:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(report_doc(p50)))
    with pytest.raises(UsageError, match=r"base\.json: its p50_ms .* is not a time"):
        check_baseline(str(path))
    with pytest.raises(UsageError, match="is not a time"):
        load_baseline(str(path), _report(1.0))


def test_a_deep_baseline_is_refused_by_the_bounded_reader(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="base.json: nested deeper than 64"):
        check_baseline(str(path))


def test_compare_never_passes_against_a_baseline_that_is_not_a_time() -> None:
    for p50 in (float("nan"), 0.0, -1.0):
        with pytest.raises(UsageError, match="is not a time"):
            compare(_report(1.0), _report(p50), "here", 10.0)
    assert compare(_report(1.5), _report(1.0), "here", 10.0).regressed


def test_a_kept_last_baseline_of_zero_is_refused_naming_its_file() -> None:
    report = DeployReport.from_json(report_doc(0, device={"case": "zero"}) | {
        "artifact_sha256": "ab" * 32, "target": "gate-zero"})
    keep(report)
    with pytest.raises(UsageError, match=r"--baseline last \(.*gate-zero.*\.jsonl\)"):
        load_baseline("last", report)


@pytest.mark.parametrize("p50", [1e308, 1.7976931348623157e308, 1e10, 1.000001e9])
def test_a_baseline_beyond_max_ms_is_refused(tmp_path: Path, p50: float) -> None:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(report_doc(p50)))
    with pytest.raises(UsageError, match=r"base\.json: its p50_ms .* at most 1e\+09"):
        check_baseline(str(path))
    with pytest.raises(UsageError, match="is not a time"):
        load_baseline(str(path), _report(1.0))
    with pytest.raises(UsageError, match="is not a time"):
        compare(_report(1.0), _report(p50), "here", 10.0)
    assert not compare(_report(1.0), _report(1e9), "here", 10.0).regressed


def test_a_fifo_at_a_kept_path_is_refused_by_last_and_by_keep() -> None:
    report = DeployReport.from_json(report_doc(1.0) | {"artifact_sha256": "cd" * 32,
                                                       "target": "gate-fifo"})
    path = keep(report)
    path.unlink()
    os.mkfifo(path)
    try:
        with pytest.raises(UsageError, match=r"gate-fifo.*\.jsonl is not a regular file"):
            load_baseline("last", report)
        with pytest.raises(UsageError, match="is not a regular file"):
            keep(report)
    finally:
        path.unlink()


def test_a_bad_baseline_file_is_refused_before_the_device_is_touched(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(report_doc(float("nan"))))
    device = Path(os.environ["EDGE_LOCAL_DEVICE"])
    before = sorted(device.rglob("*")) if device.exists() else []
    done = run_cli("bench", str(OLD_BUNDLE), "--profile", "x86-64", "--baseline", str(path))
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    assert "base.json" in done.stderr and "nan" in done.stderr
    assert (sorted(device.rglob("*")) if device.exists() else []) == before


# ---------------------------------------------------------------- the report


def _results(tmp_path: Path, *records: dict[str, object]) -> Path:
    folder = tmp_path / "results" / "dev"
    folder.mkdir(parents=True)
    lines = [json.dumps({"version": 1, "kept_at": "2026-01-01T10:00:00+0000",
                         "regressed": False, "report": report_doc()} | r) for r in records]
    (folder / "x.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("where", ["dev/y.jsonl", "dev/a.jsonl", "other/x.jsonl"])
def test_a_fifo_in_a_results_folder_is_refused_before_it_is_opened(
        tmp_path: Path, where: str) -> None:
    folder = _results(tmp_path, {})
    (folder.parent / where).parent.mkdir(exist_ok=True)
    os.mkfifo(folder.parent / where)
    with pytest.raises(UsageError, match=f"{where} is not a regular file"):
        kept_results(folder.parent)
    done = run_cli("report", str(folder.parent), "-o", str(tmp_path / "r.html"))
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    assert where in done.stderr and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("text", ["$\\undefined{$", "$\\frac{$", "a $x^$ b"])
def test_text_from_documents_is_drawn_as_text_never_mathtext(tmp_path: Path, text: str) -> None:
    folder = _results(tmp_path, {"report": report_doc() | {"target": text,
                                                            "candidate": text}})
    html = render_report(folder)
    assert 'class="plot"' in html and escape(text) in html


@pytest.mark.parametrize("p50", [float("nan"), float("inf"), 1e308, -1.0])
def test_a_kept_result_that_is_not_a_time_is_dropped(tmp_path: Path, p50: float) -> None:
    folder = _results(tmp_path, {}, {"report": report_doc(p50)})
    assert len(kept_results(folder)["dev"]) == 1
    assert 'class="plot"' in render_report(folder)


@pytest.mark.parametrize("kept_at", ["0001-01-01T00:00:00+0000", "9999-12-31T23:59:59-1200",
                                     "1900-01-01T00:00:00+0000"])
def test_a_kept_time_out_of_range_is_unknown(tmp_path: Path, kept_at: str) -> None:
    folder = _results(tmp_path, {"kept_at": kept_at}, {})
    assert kept_results(folder)["dev"][0].kept_at is None
    assert 'class="plot"' in render_report(folder)


def test_a_candidate_that_cannot_be_drawn_is_left_out_with_a_note(tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(OLD_BUNDLE, tmp_path / "b.bundle"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["candidates"][0]["bench"]["p50_ms"] = 1e308
    manifest["profile"] = "$\\undefined{$"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    html = render_report(bundle, layers=False)
    assert "1 candidate(s) left out of the plot" in html


@pytest.mark.parametrize("old, new", [
    ("  max_mbps: 5.6234", "  max_mbps: 1.0e+308"),
    ("  bandwidth_mbps: 100.0", "  bandwidth_mbps: 1.0e+308"),
    ("- min_mbps: 0.1", "- min_mbps: 0.0"),
    ("  edge_ms: 0.088", "  edge_ms: 1.0e+308"),
], ids=["band", "link", "zero", "edge-ms"])
def test_a_split_whose_numbers_cannot_be_drawn_has_a_note_not_a_plot(
        tmp_path: Path, old: str, new: str) -> None:
    split_make(old, new)(tmp_path)
    html = render_report(tmp_path / "s")
    assert 'class="plot"' not in html and "nothing to plot" in html


@pytest.mark.parametrize("kind", sorted(SPLIT_EDITS))
def test_a_split_holding_nan_inf_or_huge_numbers_is_refused_when_read(
        tmp_path: Path, kind: str) -> None:
    split_make(*SPLIT_EDITS[kind])(tmp_path)
    with pytest.raises(UsageError, match="not a valid split.yaml"):
        read_split_yaml(tmp_path / "s")
