"""What edge 0.1 wrote before the layered architecture (tests/fixtures/edge-0.1, see its README)
still reads, round-trips through the document models, deploys, serves and rolls back."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from edge.core.bundle import read_bundle
from edge.core.documents import dump, read_json, read_yaml
from edge.flows.serve_cloud import EdgeCloudServer, serve
from partition.split import read_split_yaml
from tests.support.cli import run_cli

OLD = Path(__file__).parent / "fixtures" / "edge-0.1"
TOKEN = "compat-token"


def test_an_old_manifest_round_trips_unchanged() -> None:
    raw = json.loads((OLD / "tiny.bundle" / "manifest.json").read_text())
    bundle = read_bundle(OLD / "tiny.bundle")
    assert bundle.chosen == "onnxruntime-int8" and len(bundle.candidates) == 4
    assert dump("manifest", bundle) == raw


def test_an_old_split_yaml_round_trips_unchanged() -> None:
    raw = yaml.safe_load((OLD / "digits-split" / "split.yaml").read_text())
    assert dump("split", read_yaml("split", OLD / "digits-split" / "split.yaml")) == raw
    plan = read_split_yaml(OLD / "digits-split")
    assert plan.split.head is None and plan.split.tail is not None and plan.split.tail.is_file()
    assert [c.kind for c in plan.cuts] == ["all-cloud", "all-edge"]


def test_an_old_manifest_with_an_unknown_format_is_refused(tmp_path: Path) -> None:
    raw = json.loads((OLD / "tiny.bundle" / "manifest.json").read_text())
    (tmp_path / "m.json").write_text(json.dumps(raw | {"format": 9}))
    with pytest.raises(Exception, match="manifest format 9 is not one this edge reads"):
        read_json("manifest", tmp_path / "m.json")


def _local_device(written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded local device holding the releases and history of ``written``/device."""
    home = tmp_path / "device"
    shutil.copytree(written / "device", home / ".edge", symlinks=True)
    monkeypatch.setenv("EDGE_LOCAL_DEVICE", str(home))
    return home / ".edge"


@pytest.fixture
def old_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded local device holding edge 0.1's releases and history."""
    return _local_device(OLD, tmp_path, monkeypatch)


def _current(work: Path) -> str:
    return (work / "current").resolve().name


def test_an_old_bundle_deploys_onto_an_old_device_which_then_rolls_back(
        old_device: Path, tmp_path: Path) -> None:
    assert _current(old_device) == "522030b29ff125b4"
    bundle = shutil.copytree(OLD / "tiny.bundle", tmp_path / "tiny.bundle")
    deployed = run_cli("deploy", str(bundle), "--runs", "3", "--warmup", "1", "--json")
    assert deployed.status == 0, deployed.stderr
    assert deployed.json()["release"] == "969e8eadd5e7c109" == _current(old_device)
    assert deployed.json()["bytes_sent"] == 0  # the old device already held those files
    back = run_cli("rollback", "--json")
    assert back.status == 0, back.stderr
    assert back.json()["release"] == "522030b29ff125b4" == _current(old_device)
    listed = run_cli("releases", "--json")
    assert listed.status == 0, listed.stderr
    assert {r["release"] for r in listed.json()["releases"]} >= {
        "522030b29ff125b4", "60ca0709e2dcafcd", "969e8eadd5e7c109"}


@pytest.fixture
def old_split_server() -> Iterator[EdgeCloudServer]:
    server = serve(OLD / "digits-split", token=TOKEN)
    yield server
    server.close()


def test_an_old_split_is_served_and_run(old_split_server: EdgeCloudServer, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_CLOUD_TOKEN", TOKEN)
    url = f"http://127.0.0.1:{old_split_server.port}"
    result = run_cli("run-split", str(OLD / "digits-split"), "--url", url, "--cut", "all-cloud",
                     "--runs", "2", "--warmup", "0", "--json")
    assert result.status == 0, result.stderr
    runs = result.json()["runs"]
    assert len(runs) == 2 and all(r["kind"] == "all-cloud" for r in runs)


def test_a_baseline_timed_by_the_old_method_is_compared_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """edge 0.1 timed runs one after another on the device; a baseline it kept still compares,
    and the comparison says the methods differ."""
    from dataclasses import replace

    from edge.core.results import compare
    from edge.core.values import BenchResult, DeployReport

    bench = BenchResult(where="ssh://pi@pi:22", runtime="tflite", runs=50, warmup=5, threads=4,
                        p50_ms=2.0, p90_ms=2.2, p99_ms=2.5, mean_ms=2.1)
    old = DeployReport(target="ssh://pi@pi:22", transport="ssh", profile="rpi4",
                       candidate="tflite-int8", artifact_sha256="ab" * 32, release="ab" * 8,
                       bench=bench)
    new = replace(old, bench=replace(bench, p50_ms=2.1, device={"interleaved_rounds": 5}))
    with caplog.at_level("WARNING", logger="edge"):
        result = compare(new, old, "last kept", 10.0)
    assert not result.regressed and round(result.change_pct) == 5
    assert "one run after another" in caplog.text and "5 interleaved rounds" in caplog.text


# ---- edge 0.2: written before runtimes became plug-in folders (tests/fixtures/edge-0.2) ----
V02 = Path(__file__).parent / "fixtures" / "edge-0.2"


@pytest.fixture
def device_02(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded local device holding edge 0.2's releases (TFLite and OpenVINO) and history."""
    return _local_device(V02, tmp_path, monkeypatch)


@pytest.mark.parametrize("candidate", ["onnxruntime-int8", "openvino-int8", "tflite-int8",
                                       "original"])
def test_every_runtime_of_an_02_bundle_runs_on_the_device(device_02: Path, tmp_path: Path,
                                                          candidate: str) -> None:
    bundle = shutil.copytree(V02 / "x86.bundle", tmp_path / "x86.bundle")
    measured = run_cli("bench", str(bundle), "--candidate", candidate, "--runs", "3",
                       "--warmup", "1", "--json")
    assert measured.status == 0, measured.stderr
    assert measured.json()["candidate"] == candidate
    assert measured.json()["bench"]["p50_ms"] > 0
    assert _current(device_02) == "29336b8883aabc5b"  # measured, never activated


def test_an_02_device_rolls_back_to_its_openvino_release_and_takes_an_02_bundle(
        device_02: Path, tmp_path: Path) -> None:
    back = run_cli("rollback", "--to", "44cfa6fbfa078009", "--json")  # the OpenVINO release
    assert back.status == 0, back.stderr
    assert _current(device_02) == "44cfa6fbfa078009"
    assert (device_02 / "current" / "model.xml").is_file()
    bundle = shutil.copytree(V02 / "x86.bundle", tmp_path / "x86.bundle")
    deployed = run_cli("deploy", str(bundle), "--runs", "3", "--warmup", "1", "--json")
    assert deployed.status == 0, deployed.stderr
    assert deployed.json()["release"] == "f422af2ad684db58" == _current(device_02)
    assert deployed.json()["bytes_sent"] == 0  # the device already held the chosen file
    again = run_cli("rollback", "--json")
    assert again.status == 0, again.stderr
    assert _current(device_02) == "44cfa6fbfa078009"


def test_an_02_split_cut_is_served_and_run(monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(V02 / "digits-split", token=TOKEN)
    try:
        monkeypatch.setenv("EDGE_CLOUD_TOKEN", TOKEN)
        result = run_cli("run-split", str(V02 / "digits-split"), "--url",
                         f"http://127.0.0.1:{server.port}", "--cut", "c3", "--runs", "2",
                         "--warmup", "0", "--json")
    finally:
        server.close()
    assert result.status == 0, result.stderr
    runs = result.json()["runs"]
    assert len(runs) == 2 and all(r["kind"] == "split" for r in runs)
