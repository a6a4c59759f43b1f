"""One document model: every kind validates, round-trips, carries a version and a JSON Schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from edge.core.docfile import MAX_DEPTH
from edge.core.documents import (
    KINDS,
    ResultRecord,
    dump,
    parse,
    read_json,
    read_yaml,
    schema,
    write_json,
    write_yaml,
)
from edge.core.errors import UsageError
from edge.core.values import BenchResult, DeployReport

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "tests" / "fixtures" / "edge-0.1"


def _report() -> DeployReport:
    bench = BenchResult(where="local", runtime="onnxruntime", runs=5, warmup=1, threads=1,
                        p50_ms=1.0, p90_ms=1.5, p99_ms=2.0, mean_ms=1.1)
    return DeployReport(target="local:/x", transport="local", profile="rpi4",
                        candidate="onnxruntime-fp32", artifact_sha256="ab" * 32,
                        release="ab" * 8, bench=bench)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_a_schema_with_its_version_field(kind: str) -> None:
    doc = schema(kind)
    assert doc["title"].startswith("edge ") and doc["type"] == "object"
    assert KINDS[kind].version_key in doc["properties"]


def test_the_committed_schemas_are_fresh() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "schemas.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_result_record_round_trips_with_its_version() -> None:
    record = ResultRecord(kept_at="2026-11-23T10:00:00+0000", regressed=True, report=_report())
    data = json.loads(json.dumps(dump("result", record)))
    assert data["version"] == 1
    assert parse("result", data, "r") == record


def test_a_result_line_written_before_versions_reads_as_version_1() -> None:
    line = {"kept_at": "", "regressed": False, "report": _report().to_json()}
    assert parse("result", line, "r").report == _report()


def test_manifest_and_split_round_trip_through_files(tmp_path: Path) -> None:
    bundle = read_json("manifest", OLD / "tiny.bundle" / "manifest.json")
    assert read_json("manifest", write_json("manifest", tmp_path / "m.json", bundle)) == bundle
    split = read_yaml("split", OLD / "digits-split" / "split.yaml")
    assert read_yaml("split", write_yaml("split", tmp_path / "s.yaml", split)) == split


@pytest.mark.parametrize("kind, key, version", [("manifest", "format", 2),
                                                ("split", "version", 3),
                                                ("result", "version", 2),
                                                ("split", "version", "2"),
                                                ("result", "version", True)])
def test_an_unknown_version_is_refused_by_name(kind: str, key: str, version: object) -> None:
    with pytest.raises(UsageError, match=rf"{key} {version!r} is not one this edge reads"):
        parse(kind, {key: version}, "doc")


def test_a_bad_field_is_named_without_echoing_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load((OLD / "digits-split" / "split.yaml").read_text())
    data["cuts"][0]["up_bytes"] = "s3cret-value"
    with pytest.raises(UsageError, match=r"cuts\.0\.up_bytes") as caught:
        parse("split", data, "split.yaml")
    assert "s3cret" not in str(caught.value)


def test_not_a_mapping_and_too_deep_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="expected a mapping"):
        parse("manifest", ["x"], "m")
    deep: dict = {}
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(UsageError, match="nested deeper"):
        parse("result", deep, "r")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="nested deeper|not valid JSON"):
        read_json("manifest", tmp_path / "deep.json")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(UsageError, match="not valid JSON"):
        read_json("manifest", tmp_path / "bad.json")


def test_a_profile_is_read_by_the_same_reader_and_its_version_checked(tmp_path: Path) -> None:
    from edge.core.profile import load_profile

    (tmp_path / "future.yaml").write_text("extends: rpi4\nversion: 2\n")
    with pytest.raises(UsageError, match="profile version 2 is not one this edge reads"):
        load_profile(tmp_path / "future.yaml")
    (tmp_path / "broken.yaml").write_text("extends: rpi4\nname: [oops\n")
    with pytest.raises(UsageError, match=r"broken.yaml: not valid YAML \(line \d+\)"):
        load_profile(tmp_path / "broken.yaml")
    assert load_profile("rpi4").version == 1
