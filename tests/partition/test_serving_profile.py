"""The cloud profile says how its side serves: ``serving`` (max batch, max delay, processes) is
recorded in split.yaml by ``edge partition --cloud`` and used by ``serve-cloud`` unless a flag
says otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge.core.errors import UsageError
from edge.core.profile import load_profile
from edge.flows.serve_cloud import chosen_serving, default_processes, split_serving
from tests.support.cli import run_cli
from tests.support.splitnet import SplitNet

CLOUD = "extends: cloud-t4\nid: my-cloud\nserving:\n  max_batch: 4\n  max_delay_ms: 7\n"


@pytest.fixture(scope="module")
def planned(splitnet: SplitNet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """splitnet partitioned for a cloud whose profile batches 4 requests, waiting 7 ms."""
    root = tmp_path_factory.mktemp("serving")
    (root / "my-cloud.yaml").write_text(CLOUD)
    out = root / "split"
    done = run_cli("partition", str(splitnet.onnx), "--profile", "rpi4", "--cloud",
                   str(root / "my-cloud.yaml"), "--bandwidth", "1000", "--rtt", "1",
                   "-o", str(out))
    assert done.status == 0, done.stderr
    return out


def test_partition_records_the_cloud_profiles_serving(planned: Path) -> None:
    serving = split_serving(planned)
    assert serving is not None
    assert (serving.cloud, serving.max_batch, serving.max_delay_ms, serving.processes) == (
        "my-cloud", 4, 7.0, None)


def test_serve_cloud_takes_the_profile_unless_a_flag_says(planned: Path) -> None:
    batching, processes, source = chosen_serving(planned, None, None, None)
    assert (batching.max_batch, batching.max_delay_ms) == (4, 7.0)
    assert processes == default_processes() and source == "cloud profile my-cloud"
    batching, processes, source = chosen_serving(planned, 2, None, 3)
    assert (batching.max_batch, batching.max_delay_ms, processes) == (2, 7.0, 3)
    assert source == "--max-batch, --processes, cloud profile my-cloud"


def test_without_a_recorded_profile_the_defaults_hold(tmp_path: Path) -> None:
    batching, processes, source = chosen_serving(tmp_path, None, None, None)
    assert (batching.max_batch, batching.max_delay_ms, source) == (16, 2.0, "defaults")
    assert processes == max(1, min(os.cpu_count() or 1, 8))


def test_the_exported_repository_batches_as_the_profile_says(planned: Path,
                                                             tmp_path: Path) -> None:
    """Every exported tail that batches at all batches up to the profile's 4, waiting 7 ms."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    done = run_cli("serve-cloud", str(planned), "--export-repository", str(tmp_path / "repo"))
    assert done.status == 0, done.stderr
    configs = [text_format.Parse(p.read_text(), model_config_pb2.ModelConfig())
               for p in (tmp_path / "repo").glob("*/config.pbtxt")]
    batched = [c for c in configs if c.max_batch_size]
    assert batched, "no tail of the split batches"
    assert {(c.max_batch_size, c.dynamic_batching.max_queue_delay_microseconds)
            for c in batched} == {(4, 7000)}


@pytest.mark.parametrize("serving", ["max_batch: 0", "max_delay_ms: .nan", "processes: 0",
                                     "max_batch: 5000", "batch: 4"])
def test_a_bad_serving_section_is_refused(tmp_path: Path, serving: str) -> None:
    (tmp_path / "c.yaml").write_text(f"extends: cloud-t4\nid: c\nserving:\n  {serving}\n")
    with pytest.raises(UsageError, match="serving"):
        load_profile(tmp_path / "c.yaml")
