"""``edge report``: self-contained HTML with inline SVG plots for a bundle, a split and a results
folder, checked as text and rendered in a real headless Chromium (Debian's ``chromium``)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devices.layers import LayerProfile
from edge.core.bundle import read_bundle
from edge.flows.report import layers as report_layers
from edge.flows.report import (
    render_bundle_report,
    render_partition_report,
    render_results_report,
    write_report,
)
from edge.flows.report.layers import MAX_LAYER_PLOTS, layer_candidates
from tests.support.cli import run_cli

BUNDLE_PLOTS = {"plot-candidates": "Candidates: latency x fidelity",
                "plot-layers": "Per-layer time (measured on this host)"}
SPLIT_PLOTS = {"plot-partition": "Partition: predicted latency vs bandwidth"}

#: A split whose best cut changes twice with the bandwidth (hand-written split.yaml: the report
#: reads only the YAML). Its cost note carries markup that must come out escaped.
THREE_REGIMES = """\
version: 2
split: &chosen {head: head.onnx, tail: tail.onnx, cut_tensors: [stem], head_inputs: [input],
  head_outputs: [stem], tail_inputs: [stem], tail_outputs: [logits], outputs: [logits]}
cut: [{name: stem, shape: [1, 16, 24, 24], dtype: float32, bytes: 36864}]
predicted: {kind: split, edge_ms: 3.0, transfer_ms: 7.4, cloud_ms: 0.5, total_ms: 25.9,
  costs: "edge <b>estimated</b> & measured", bandwidth_mbps: 40.0, downlink_mbps: 80.0,
  rtt_ms: 15.0, objective: latency}
compression: none
inputs: [{name: input, shape: [1, 3, 96, 96], dtype: float32}]
cuts:
- {id: c0, kind: split, model: tail, edge_ms: 3.0, cloud_ms: 0.5, up_bytes: 36864,
   down_bytes: 8, split: *chosen}
- {id: c1, kind: all-edge, model: '', edge_ms: 60.0, cloud_ms: 0, up_bytes: 0, down_bytes: 0,
   split: {head: cuts/c1/head.onnx, tail: null, cut_tensors: [], head_inputs: [input],
   head_outputs: [logits], tail_inputs: [], tail_outputs: [], outputs: [logits]}}
- {id: c2, kind: all-cloud, model: tail-c2, edge_ms: 0, cloud_ms: 0.6, up_bytes: 110592,
   down_bytes: 8, split: {head: null, tail: cuts/c2/tail.onnx, cut_tensors: [input],
   head_inputs: [], head_outputs: [], tail_inputs: [input], tail_outputs: [logits],
   outputs: [logits]}}
bandwidth_table:
- {min_mbps: 0.1, max_mbps: 5.0, kind: all-edge, cut: [], predicted_ms: 60.0, cut_id: c1}
- {min_mbps: 6.0, max_mbps: 500.0, kind: split, cut: [stem], predicted_ms: 67.0, cut_id: c0}
- {min_mbps: 600.0, max_mbps: 10000.0, kind: all-cloud, cut: [input], predicted_ms: 17.0,
   cut_id: c2}
"""


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits bundle for rpi4, deployed to the embedded local device and one other
    candidate benchmarked there, so the results folder has a history of two artifacts."""
    out = tmp_path_factory.mktemp("report") / "digits-rpi4.bundle"
    # --exhaustive: every candidate converted (onnxruntime-int8, not chosen, is benched and
    # broken down per layer below)
    result = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o", str(out),
                     "--exhaustive")
    assert result.status == 0, result.stderr
    for argv in (("deploy", str(out), "--runs", "10", "--warmup", "1"),
                 ("bench", str(out), "--candidate", "onnxruntime-int8", "--runs", "10",
                  "--warmup", "1")):
        result = run_cli(*argv)
        assert result.status == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def openvino_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits bundle for cloud-c7i: OpenVINO and ONNX Runtime candidates (no TFLite)."""
    out = tmp_path_factory.mktemp("report") / "digits-c7i.bundle"
    result = run_cli("optimize", "sample:digits", "--profile", "cloud-c7i", "-o", str(out))
    assert result.status == 0, result.stderr
    return out


def _measurable(bundle: Path) -> int:
    """How many of the bundle's artifacts the report breaks down per layer (before its cap)."""
    return len(layer_candidates(read_bundle(bundle), bundle))


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "digits-rpi4-split"
    result = run_cli("partition", "sample:digits", "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(out))
    assert result.status == 0, result.stderr
    return out


@pytest.fixture
def three_regimes(tmp_path: Path) -> Path:
    (tmp_path / "split.yaml").write_text(THREE_REGIMES)
    return tmp_path


# ---------------------------------------------------------------- the HTML as text
def _plots(text: str) -> dict[str, str]:
    """id -> <title> of every inline plot."""
    return dict(re.findall(r'<svg[^>]*\bid="([^"]+)"[^>]*class="plot"[^>]*><title>([^<]*)</title>',
                           text))


def assert_self_contained(text: str) -> None:
    """No scripts, nothing fetched: no src/href to anything but in-page anchors or data:."""
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?+(?!#|data:)""", text, re.I)
    assert not re.search(r"url\(\s*['\"]?+(?!#|data:)", text), "CSS/SVG url() to a resource"
    assert "@import" not in text and "@font-face" not in text
    assert "default-src 'none'" in text  # the CSP: a viewer would refuse any fetch anyway


def _layer_panels(text: str) -> dict[str, int]:
    """'candidate — runtime' title -> bars drawn, for every subplot of the per-layer plot."""
    start = text.index('id="plot-layers"')
    svg = text[start:text.index("</svg>", start)]
    panels = {}
    for body in re.split(r'<g id="axes_\d+">', svg)[1:]:
        body = body.split('<g id="legend_')[0]  # the figure's legend follows the last axes
        title = re.search(r">([^<>]+ \u2014 [^<>]+)</text>", body)
        if title:  # bars are patches; so are an axes' background and its four spines
            panels[title.group(1)] = len(re.findall(r'<g id="patch_\d+">', body)) - 5
    return panels


def _layer_rows(text: str) -> dict[str, int]:
    """candidate -> rows in the per-layer table."""
    table = text[text.index("layers as a table</summary>"):]
    table = table[:table.index("</table>")]
    rows: dict[str, int] = {}
    for candidate in re.findall(r"<tr><td>([^<]+)</td>", table):
        rows[candidate] = rows.get(candidate, 0) + 1
    return rows


def assert_layers_on(text: str, candidate: str, runtime: str, how: str) -> None:
    """``candidate`` has its own subplot on ``runtime`` with one bar per table row."""
    panels = {t.split(" \u2014 ")[0]: (t.split(" \u2014 ")[1], n)
              for t, n in _layer_panels(text).items()}
    assert panels[candidate][0].startswith(runtime), panels
    assert panels[candidate][1] == _layer_rows(text)[candidate] > 0
    assert f"<li>{candidate} - {runtime}" in text and how in text


@pytest.mark.slow
def test_bundle_report_plots_candidates_layers_and_history(bundle: Path) -> None:
    text = render_bundle_report(bundle)
    assert_self_contained(text)
    plots = _plots(text)
    assert {k: plots.get(k) for k in BUNDLE_PLOTS} == BUNDLE_PLOTS
    history = {k: v for k, v in plots.items() if k.startswith("plot-history-")}
    assert list(plots) == [*BUNDLE_PLOTS, *history] and text.count("<svg") == len(plots)
    assert "History on local:" in " ".join(history.values())
    manifest = json.loads((bundle / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
    target = chosen["candidate"]["target"] + "-" + chosen["candidate"]["precision"]
    assert f"(chosen: {target})" in text  # the plot's title, as SVG text
    for c in manifest["candidates"]:  # every candidate's reason is in the table
        assert f"<td>{c['status']}</td>" in text
        assert __import__("html").escape(c["reason"]) in text
    # both artifacts measured on the local device are in its history, by candidate
    assert "tflite-int8 (" in text and "onnxruntime-int8 (" in text
    assert "measured on this host" in text
    # per-layer bars on each runtime: the chosen TFLite candidate first, ONNX Runtime too
    assert next(iter(_layer_panels(text))).startswith(f"{target} \u2014 ")
    assert_layers_on(text, "tflite-int8", "LiteRT", "derived from prefix timings")
    assert_layers_on(text, "onnxruntime-int8", "onnxruntime", "onnxruntime CPU profiler")
    assert "CONV_2D" in text and "FULLY_CONNECTED" in text  # TFLite operators, by name
    # what really ran (issue 43): each timed candidate's shares per unit and precision, as its
    # runtime said on this host, and on the device in its history's "ran" column
    timed = [c for c in manifest["candidates"] if (c.get("bench") or {}).get("observed")]
    assert timed and "What really ran each timed candidate" in text
    for c in timed:
        for share in _shares(c["bench"]["observed"]):
            assert f'<td class="num">{share}</td>' in text
    assert "<th>ran</th>" in text and "of MACs (" in text


def test_bundle_report_breaks_down_openvino_candidates(openvino_bundle: Path) -> None:
    text = render_bundle_report(openvino_bundle)
    assert_self_contained(text)
    assert _plots(text)["plot-layers"] == BUNDLE_PLOTS["plot-layers"]
    for candidate in ("openvino-int8", "openvino-fp32"):
        assert_layers_on(text, candidate, "OpenVINO", "performance counters (PERF_COUNT")
    assert_layers_on(text, "onnxruntime-int8", "onnxruntime", "onnxruntime CPU profiler")
    assert ">Convolution<" in text or "(Convolution)" in text  # OpenVINO's node types
    # every measurable candidate, up to six (openvino-int8-mixed is one when the per-layer
    # plan found a kind int8 does not speed up on this CPU)
    assert len(_layer_panels(text)) == min(6, _measurable(openvino_bundle)) >= 5


def test_a_candidate_that_cannot_be_measured_is_a_note(openvino_bundle: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = report_layers.measure_layers

    def refuse_openvino(path: Path, **kwargs: int) -> LayerProfile:
        if path.suffix == ".xml":
            raise RuntimeError("no CPU plugin <here>\nsecond line")
        return real(path, **kwargs)

    monkeypatch.setattr(report_layers, "measure_layers", refuse_openvino)
    text = render_bundle_report(openvino_bundle)
    assert ("openvino-int8: per-layer times not available for openvino - no CPU plugin "
            "&lt;here&gt;") in text and "second line" not in text and "RuntimeError" not in text
    shown = layer_candidates(read_bundle(openvino_bundle), openvino_bundle)[:MAX_LAYER_PLOTS]
    panels = {t.split(" \u2014 ")[0] for t in _layer_panels(text)}
    assert panels == {cid for cid, runtime, _ in shown if runtime != "openvino"}
    assert {"onnxruntime-int8", "onnxruntime-fp32"} <= panels  # (and the mixed one, if made)
    monkeypatch.setattr(report_layers, "measure_layers", lambda path, **kw: 1 / 0)
    text = render_bundle_report(openvino_bundle)
    assert "plot-layers" not in _plots(text) and "could be broken down" in text
    assert text.count("per-layer times not available for ") == min(6, _measurable(openvino_bundle))


def test_every_runtime_broken_down_on_the_embedded_device(openvino_bundle: Path,
                                                          tmp_path: Path) -> None:
    """`--on-device` without --host: the embedded local device's agent measures OpenVINO (its
    CPU plugin's counters) and ONNX Runtime (its profiler) itself; nothing falls back here."""
    html = tmp_path / "on-device.html"
    result = run_cli("report", str(openvino_bundle), "-o", str(html), "--on-device")
    assert result.status == 0, result.stderr
    text = html.read_text()
    label = "local:" + os.environ["EDGE_LOCAL_DEVICE"]
    assert f"Per-layer time (measured on {label})" in _plots(text).values()
    assert "by the edge agent from the OpenVINO CPU performance counters" in text
    assert re.search(rf"openvino-fp32 - OpenVINO [0-9.]+\S* on {re.escape(label)}", text), text
    assert re.search(rf"onnxruntime-fp32 - onnxruntime on {re.escape(label)}", text)
    models = Path(os.environ["EDGE_LOCAL_DEVICE"]) / ".edge" / "models"
    assert {p.suffix for p in models.iterdir()} >= {".xml", ".bin", ".onnx"}


def test_layer_candidates_put_the_chosen_first_then_new_runtimes() -> None:
    from types import SimpleNamespace as NS

    from edge.flows.report.layers import layer_candidates as _layer_candidates

    def result(cid: str, status: str, runtime: str | None) -> NS:
        artifact = NS(runtime=runtime, file=f"artifacts/{cid}.x") if runtime else None
        return NS(candidate=NS(id=cid), status=status, artifact=artifact)

    bundle = NS(candidates=[
        result("ort-fp32", "passed", "onnxruntime"), result("ort-int8", "passed", "onnxruntime"),
        result("tfl-fp32", "passed", "tflite"), result("ov-int8", "passed", "openvino"),
        result("tfl-int8", "chosen", "tflite"), result("ov-fp16", "rejected", "openvino"),
        result("ov-fp32", "failed", "openvino"), result("ort-fp16", "skipped", None)])
    picked = _layer_candidates(bundle, Path("/b"))
    # chosen; passed, a runtime not shown yet before a second of one shown; rejected last
    assert [c for c, _, _ in picked] == ["tfl-int8", "ort-fp32", "ov-int8", "ort-int8",
                                         "tfl-fp32", "ov-fp16"]
    assert picked[0] == ("tfl-int8", "tflite", Path("/b/artifacts/tfl-int8.x"))


@pytest.mark.slow
def test_bundle_report_without_results_or_layers_and_with_a_rejected_candidate(
        bundle: Path, tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    victim = next(c for c in manifest["candidates"] if c["status"] == "passed")
    victim["status"], victim["reason"] = "rejected", "cosine 0.91 < 0.98 <script>x</script>"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    empty = tmp_path / "no-results"
    empty.mkdir()
    text = render_bundle_report(copy, layers=False, results=empty)
    assert_self_contained(text)
    assert list(_plots(text)) == ["plot-candidates", "plot-fidelity"]  # the rejected one too
    assert "cosine 0.91 &lt; 0.98 &lt;script&gt;x&lt;/script&gt;" in text
    assert '<tr class="rejected">' in text and ">rejected</text>" in text  # table + legend
    assert "No measurements kept on this host" in text


def test_partition_report_of_digits(split: Path) -> None:
    text = render_partition_report(split)
    assert_self_contained(text)
    assert _plots(text) == SPLIT_PLOTS
    assert text.count("<svg") == 1
    # the digits CNN is best on the device at every bandwidth: one regime, both cuts drawn
    assert ">c0 all-edge (edge " in text and ">c1 all-cloud (edge " in text
    assert "best cut (envelope)" in text and "link 40 Mbit/s, RTT 15 ms" in text


def test_partition_report_shades_every_regime_and_escapes_text(three_regimes: Path) -> None:
    text = render_partition_report(three_regimes / "split.yaml")
    assert_self_contained(text)
    assert _plots(text) == SPLIT_PLOTS
    svg = text[text.index("<svg"):text.index("</svg>")]
    # the regimes' labels, left to right: the cut, then its kind
    assert re.findall(r">(c\d)</text>", svg) == ["c1", "c0", "c2"]
    assert re.findall(r">(all-edge|split|all-cloud)</text>", svg) == [
        "all-edge", "split", "all-cloud"]
    assert "<b>estimated</b>" not in text and "edge &lt;b&gt;estimated&lt;/b&gt; &amp;" in text
    rows = re.findall(r"<tr><td>([\d.]+ - [\d.]+)</td><td>(c\d)</td>", text)
    assert rows == [("0.1 - 5", "c1"), ("6 - 500", "c0"), ("600 - 10000", "c2")]


# ---------------------------------------------------------------- the command
def test_report_command_writes_the_file(split: Path, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "split.html"
    result = run_cli("report", str(split), "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    assert result.json() == {"report": str(out), "kind": "split", "plots": 1,
                             "bytes": len(out.read_text(encoding="utf-8")), "warnings": []}
    assert [p.name for p in out.parent.iterdir()] == ["split.html"]  # no temp file left


def test_report_command_refuses_what_it_cannot_report(tmp_path: Path) -> None:
    result = run_cli("report", str(tmp_path), "-o", str(tmp_path / "r.html"))
    assert result.status == 2 and len(result.error_lines) == 1
    assert "not a bundle" in result.stderr and not (tmp_path / "r.html").exists()


def _shares(observed: dict) -> list[str]:
    """The share cells the report shows for an observation ("99.5%")."""
    from edge.core.values import Observed

    return [f"{100 * s.share:.1f}%" for s in Observed.from_json(observed).shares()]


def test_report_of_a_results_folder(tmp_path: Path) -> None:
    device = tmp_path / "results" / "pi_10.0.0.7"
    device.mkdir(parents=True)
    bench = {"where": "pi@10.0.0.7", "runtime": "tflite", "runs": 50, "warmup": 5,
             "threads": 4, "p50_ms": 1.0, "p90_ms": 1.2, "p99_ms": 1.5, "mean_ms": 1.1}
    lines = []
    for i, (sha, p50, regressed) in enumerate([("a" * 64, 1.0, False), ("a" * 64, 1.05, False),
                                               ("b" * 64, 1.4, True)]):
        report = {"target": "pi@10.0.0.7", "transport": "ssh", "profile": "rpi4",
                  "candidate": "tflite-int8", "artifact_sha256": sha, "release": sha[:16],
                  "bench": bench | {"p50_ms": p50}}
        lines.append(json.dumps({"kept_at": f"2026-01-0{i + 1}T10:00:00+0000",
                                 "regressed": regressed, "report": report}))
    (device / ("a" * 16 + ".jsonl")).write_text("\n".join(lines[:2]) + "\n{torn\n")
    (device / ("b" * 16 + ".jsonl")).write_text(lines[2] + "\n")
    out = tmp_path / "history.html"
    result = run_cli("report", str(tmp_path / "results"), "-o", str(out), "--json")
    assert result.status == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert _plots(text) == {"plot-history-0": "History on pi@10.0.0.7"}
    assert text.count("<td>REGRESSION</td>") == 1 and "failed baseline check" in text
    assert text.index("2026-01-01 10:00:00") < text.index("2026-01-03 10:00:00")


def test_report_help_imports_no_plotting_library() -> None:
    code = ("import sys; from edge.cli import main; main(['report', '--help']); "
            "print('\\nLOADED', 'matplotlib' in sys.modules, 'onnxruntime' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.rsplit("LOADED", 1)[1].split() == ["False", "False"]
    assert "Example" in done.stdout


# ---------------------------------------------------------------- a real browser
#: Runs in a copy of the report (its CSP dropped so this script may run): what was fetched,
#: each plot's rendered size and drawn elements, written into the DOM that --dump-dom prints.
PROBE = """<script>window.addEventListener('load', function () {
  var out = {resources: performance.getEntriesByType('resource').map(function (e) {
    return e.name; }), plots: [], images: []};
  document.querySelectorAll('svg.plot').forEach(function (s) {
    var r = s.getBoundingClientRect();
    out.plots.push({id: s.id, title: s.querySelector('title').textContent, w: r.width,
      h: r.height, drawn: s.querySelectorAll('path,use,rect,text').length});
  });
  document.querySelectorAll('img').forEach(function (i) {
    out.images.push({src: i.src, ok: i.complete && i.naturalWidth > 0}); });
  var pre = document.createElement('pre'); pre.id = 'edge-probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});</script>"""
CHROMIUM_NOISE = ("dbus", "vaapi", "sandbox_linux", "idle_linux", "unexpected operator")


def _chromium() -> str:
    """Debian's chromium, installed with apt when missing and allowed (root, apt-get);
    skipped otherwise (a failure under EDGE_TEST_STRICT=1, as in CI)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "chromium is not installed (apt-get install chromium)"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900,
                              check=False)
        if done.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env,
                           timeout=300, check=False)
            done = subprocess.run(install, capture_output=True, text=True, env=env,
                                  timeout=900, check=False)
        found = shutil.which("chromium")
        if found:
            return found
        why = f"apt-get could not install chromium: {done.stderr.strip()[-300:]}"
    pytest.skip(why)


def _browse(page: Path) -> tuple[str, list[str]]:
    """The DOM headless Chromium built from ``page`` and its console messages."""
    done = subprocess.run(
        [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={page.parent / 'chromium-profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def _check_in_browser(text: str, tmp_path: Path, want: dict[str, str]) -> None:
    page = write_report(text, tmp_path / "report.html")
    dom, console = _browse(page)
    assert console == []  # no script errors and no load the page's CSP had to refuse
    assert _plots(dom) == want  # the parsed DOM kept every plot, with its title
    probe_page = write_report(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "",
                                     text).replace("</body>", PROBE + "</body>"),
                              tmp_path / "probe.html")
    dom, console = _browse(probe_page)
    assert console == []
    probe = json.loads(re.search(r'<pre id="edge-probe">(.*?)</pre>', dom, re.S).group(1)
                       .replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                       .replace("&gt;", ">"))
    assert probe["resources"] == [] and probe["images"] == []  # nothing fetched at all
    assert {p["id"]: p["title"] for p in probe["plots"]} == want
    for plot in probe["plots"]:  # laid out and drawn, not an empty box
        assert plot["w"] > 200 and plot["h"] > 100 and plot["drawn"] > 20, plot


@pytest.mark.slow
def test_bundle_report_renders_in_headless_chromium(bundle: Path, tmp_path: Path) -> None:
    text = render_bundle_report(bundle)
    _check_in_browser(text, tmp_path, _plots(text))
    assert set(BUNDLE_PLOTS) < set(_plots(text))


def test_split_report_renders_in_headless_chromium(split: Path, three_regimes: Path,
                                                   tmp_path: Path) -> None:
    _check_in_browser(render_partition_report(split), tmp_path / "digits", SPLIT_PLOTS)
    _check_in_browser(render_partition_report(three_regimes), tmp_path / "three", SPLIT_PLOTS)


def test_the_browser_check_sees_errors_and_fetches(tmp_path: Path) -> None:
    """The checks above can fail: a script error and a refused fetch reach the console."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
                    "content=\"default-src 'none'; script-src 'unsafe-inline'\"></head><body>"
                    '<img src="http://example.invalid/x.png"><script>missingFn();</script>'
                    "</body></html>")
    _, console = _browse(page)
    text = "\n".join(console)
    assert "missingFn is not defined" in text and "example.invalid/x.png" in text


# ---------------------------------------------------------------- what a reader sees
#: Runs in a copy of the report (CSP dropped): the text of every drawn label and table cell.
TEXT_PROBE = """<script>window.addEventListener('load', function () {
  var grab = function (sel) { return Array.prototype.map.call(document.querySelectorAll(sel),
    function (n) { return n.textContent.trim(); }).filter(function (t) { return t; }); };
  var pre = document.createElement('pre'); pre.id = 'edge-text';
  pre.textContent = JSON.stringify({labels: grab('svg.plot text'), cells: grab('td, th'),
    rows: Array.prototype.map.call(document.querySelectorAll('table'), function (t) {
      return Array.prototype.map.call(t.querySelectorAll('tr'), function (r) {
        return r.textContent.trim(); }); })});
  document.body.appendChild(pre);
});</script>"""
#: What no label or cell may show: TeX that was never typeset, a Python repr, an exception's
#: name, matplotlib's offset notation (an axis reading "1e-8+1").
UNREADABLE = {
    "raw TeX": re.compile(r"\$|\\math|\^\{|_\{"),
    "a Python repr": re.compile(r"\{'|\['|'\}|'\]|\bNone\b|object at 0x|array\(|np\.\w+\("),
    "an exception": re.compile(r"\b[A-Z]\w*(Error|Exception)\b|Traceback"),
    "offset notation": re.compile(r"\de[−-]?\d+[+−-]\d|^[+−]\d+(\.\d+)?$"),
}


def _seen(text: str, tmp_path: Path) -> dict[str, list[Any]]:
    """The labels, cells and table rows headless Chromium shows for a report."""
    page = write_report(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
                        .replace("</body>", TEXT_PROBE + "</body>"), tmp_path / "text.html")
    dom, console = _browse(page)
    assert console == []
    found = re.search(r'<pre id="edge-text">(.*?)</pre>', dom, re.S)
    assert found is not None
    return json.loads(html.unescape(found.group(1)))


def _unreadable(seen: dict[str, list[Any]]) -> list[str]:
    return [f"{kind}: {t!r}" for t in [*seen["labels"], *seen["cells"]]
            for kind, pattern in UNREADABLE.items() if pattern.search(t)]


def test_the_reader_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check below can fail: raw TeX, a dict, an exception and an offset are found."""
    page = ('<!DOCTYPE html><html><body><svg class="plot"><text>$\\mathdefault{10^{2}}$</text>'
            "<text>1e\u22128+1</text></svg><table><tr><td>{'energy': 1.0}</td>"
            "<td>UsageError: no profiler</td></tr></table></body></html>")
    found = _unreadable(_seen(page, tmp_path))
    assert [f.split(":")[0] for f in found] == [
        "raw TeX", "offset notation", "a Python repr", "an exception"], found


@pytest.mark.slow
def test_every_report_reads_plainly_in_chromium(bundle: Path, split: Path,
                                                three_regimes: Path, tmp_path: Path) -> None:
    """The bundle (every candidate, layers, history), split and device-history reports as
    Chromium shows them: no raw TeX, Python repr, exception text or offset notation in any
    axis label or table cell, and no table row twice."""
    results = Path(os.environ["EDGE_CACHE_DIR"]) / "results"
    reports = {"bundle": render_bundle_report(bundle),
               "split": render_partition_report(split),
               "regimes": render_partition_report(three_regimes / "split.yaml"),
               "history": render_results_report(results)}
    for name, text in reports.items():
        seen = _seen(text, tmp_path / name)
        assert seen["labels"] and seen["cells"], name
        assert _unreadable(seen) == [], name
        for rows in seen["rows"]:
            assert len(rows) == len(set(rows)), (name, rows)


def test_a_one_point_history_stays_on_its_day(tmp_path: Path) -> None:
    """One kept result: the time axis spans that day, not 2025-2029 (matplotlib's default
    range around a single date)."""
    device = tmp_path / "results" / "pi_10.0.0.7"
    device.mkdir(parents=True)
    bench = {"where": "pi@10.0.0.7", "runtime": "tflite", "runs": 50, "warmup": 5,
             "threads": 4, "p50_ms": 1.0, "p90_ms": 1.2, "p99_ms": 1.5, "mean_ms": 1.1}
    report = {"target": "pi@10.0.0.7", "transport": "ssh", "profile": "rpi4",
              "candidate": "tflite-int8", "artifact_sha256": "a" * 64, "release": "a" * 16,
              "bench": bench}
    (device / ("a" * 16 + ".jsonl")).write_text(json.dumps(
        {"kept_at": "2026-11-30T10:00:00+0000", "regressed": False, "report": report}) + "\n")
    text = render_results_report(tmp_path / "results")
    svg = text[text.index("<svg"):text.index("</svg>")]
    labels = re.findall(r">([^<>]+)</text>", svg)
    years = {y for label in labels for y in re.findall(r"\b20\d\d\b", label)}
    assert years <= {"2026"}, labels
