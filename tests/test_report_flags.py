"""``--report FILE`` on ``edge optimize``, ``edge partition`` and ``edge deploy``: the same HTML
report ``edge report`` writes, produced right after the work, and refused up front when FILE
cannot be written (before a minute of conversion is spent)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.sshd import SSHDevice


def _plot_ids(path: Path) -> set[str]:
    return set(re.findall(r'<svg[^>]*\bid="([^"]+)"[^>]*class="plot"', path.read_text()))


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    where = tmp_path_factory.mktemp("flags")
    bundle, html = where / "digits.bundle", where / "reports" / "optimize.html"
    result = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o", str(bundle),
                     "--report", str(html), "--json")
    assert result.status == 0, result.stderr
    return bundle, html, result.json()


def test_optimize_writes_the_bundle_report(optimized: tuple[Path, Path, dict]) -> None:
    bundle, html, document = optimized
    assert document["report"] == str(html) and html.is_file()
    assert {"plot-candidates", "plot-layers"} <= _plot_ids(html)
    text = html.read_text()
    assert document["chosen"] and document["chosen"] in text
    assert not list(html.parent.glob(".*.tmp")), "a temp file was left beside the report"


def test_deploy_report_shows_the_measurement_it_just_made(
        optimized: tuple[Path, Path, dict], tmp_path: Path) -> None:
    bundle, _, _ = optimized
    html = tmp_path / "deploy.html"
    result = run_cli("deploy", str(bundle), "--runs", "5", "--warmup", "1", "--report", str(html),
                     "--json")
    assert result.status == 0, result.stderr
    document = result.json()
    assert document["report"] == str(html)
    ids = _plot_ids(html)
    assert "plot-candidates" in ids and any(i.startswith("plot-history-") for i in ids), ids
    text = html.read_text()
    assert f"{document['bench']['p50_ms']:.3f}" in text, "the deploy's p50 is not in the history"
    assert document["release"] in text
    bench = document["bench"]  # what the agent measured on the device is in the history table
    assert f"<td class=\"num\">{bench['load_ms']:.1f}</td>" in text
    assert f"<td class=\"num\">{bench['peak_rss_mb']:.1f}</td>" in text
    assert f"{bench['metrics']['power_w']:.2f} est." in text  # the embedded device: estimated


def test_partition_writes_the_split_report(tmp_path: Path) -> None:
    out, html = tmp_path / "split", tmp_path / "split.html"
    result = run_cli("partition", "sample:digits", "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(out), "--report", str(html))
    assert result.status == 0, result.stderr
    assert f"report: {html}" in result.stdout
    assert "plot-partition" in _plot_ids(html)
    assert (out / "split.yaml").is_file()


@pytest.mark.parametrize("command", [
    ("optimize", "sample:digits", "--profile", "rpi4"),
    ("partition", "sample:digits", "--profile", "rpi4", "--cloud", "cloud-t4"),
    ("deploy", "sample:digits", "--profile", "rpi4"),
])
def test_a_report_path_that_is_a_directory_is_refused_before_any_work(
        command: tuple[str, ...], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(*command, "-o", str(out), "--report", str(tmp_path))
    assert result.status == 2
    assert len(result.error_lines) == 1 and "--report" in result.error_lines[0]
    assert "directory" in result.error_lines[0]
    assert not out.exists(), "work was done (and written) before the --report check"


def test_fleet_reports_one_file_per_bundle(optimized: tuple[Path, Path, dict],
                                          tmp_path: Path) -> None:
    """The naming of fleet reports (a real fleet needs root and namespaces: tests/test_fleet.py);
    here the same real bundle stands for two profiles' bundles."""
    from edge.cli.deploy import _fleet_reports
    from edge.flows.fleet import FleetBundle, FleetReport

    bundle, _, _ = optimized

    def fleet(*bundles: FleetBundle) -> FleetReport:
        return FleetReport(inventory="hosts.yaml", limit=None, forks=2, hosts=(), seconds=1.0,
                           bundles=bundles)

    rpi4 = FleetBundle(profile="rpi4", hosts=2, bundle=str(bundle), chosen="x")
    failed = FleetBundle(profile="jetson-nano", hosts=1, error="no faithful candidate")
    zero = FleetBundle(profile="pi-zero", hosts=1, bundle=str(bundle), chosen="x")
    one, two = fleet(rpi4, failed), fleet(rpi4, zero)
    assert _fleet_reports(one, tmp_path / "fleet.html") == [str(tmp_path / "fleet.html")]
    written = _fleet_reports(two, tmp_path / "fleet.html")
    assert written == [str(tmp_path / "fleet-rpi4.html"), str(tmp_path / "fleet-pi-zero.html")]
    assert all("plot-candidates" in _plot_ids(Path(p)) for p in written)


def test_report_measures_onnx_layers_on_the_device(optimized: tuple[Path, Path, dict],
                                                   ssh_device: SSHDevice,
                                                   tmp_path: Path) -> None:
    """`edge report BUNDLE --host`: the ONNX Runtime and TFLite candidates' per-layer times come
    from the device's agent over a real sshd (the device's venv has both runtimes)."""
    bundle, _, _ = optimized
    html = tmp_path / "device.html"
    models = ssh_device.home / ".edge" / "models"
    before = set(models.glob("*")) if models.is_dir() else set()
    result = run_cli("report", str(bundle), "-o", str(html), "--host", ssh_device.target,
                     "--identity", str(ssh_device.identity), "--known-hosts",
                     str(ssh_device.known_hosts), "--device-python", ssh_device.python, "--json")
    assert result.status == 0, result.stderr
    text = html.read_text()
    label = f"ssh://{ssh_device.target}"
    assert f"onnxruntime on {label}" in text and f"measured ON {label} by the edge agent" in text
    assert f"timed ON {label} by the edge agent with the TFLite interpreter" in text
    assert re.search(rf"tflite-int8 - tflite [0-9.]+ on {re.escape(label)}", text), "chosen"
    assert f"measured on {label}," in text  # every candidate: none fell back to this host
    assert "LiteRT 2" not in text
    pushed = set(models.glob("*")) - before
    assert {p.suffix for p in pushed} == {".onnx", ".tflite"}, pushed  # profiled / timed there


def test_on_device_needs_a_bundle(tmp_path: Path) -> None:
    split = tmp_path / "split"
    split.mkdir()
    (split / "split.yaml").write_text("version: 2\n")
    result = run_cli("report", str(split), "-o", str(tmp_path / "r.html"), "--on-device")
    assert result.status == 2 and "give a bundle" in result.error_lines[0]
    assert not (tmp_path / "r.html").exists()
