"""``edge partition`` on the command line: objectives, the cuts it writes, costs measured on a
real SSH device, and one-line errors for bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge.core.errors import UsageError
from edge.core.profile import load_profile
from edge.flows.partition import PartitionOptions, partition
from partition.split import model_outputs, read_split_yaml, run_split
from tests.support.cli import run_cli
from tests.support.splitnet import SplitNet
from tests.support.sshd import SSHDevice

#: (profile, --bandwidth, --rtt). RADIO: rpi-zero-2w whose radio costs 100 uJ per bit, on a
#: fast link; SLOW: the stock rpi-zero-2w on a 6 Mbit/s uplink.
RADIO = ("radio", 1000.0, 1.0)
ZERO = ("zero", 1000.0, 1.0)
SLOW = ("zero", 6.0, 20.0)
OBJECTIVES = ("latency", "energy", "throughput")

Run = Callable[..., tuple[dict[str, Any], Path]]


@pytest.fixture(scope="module")
def run(splitnet: SplitNet, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``edge partition splitnet ... --json``, each distinct command run once per module."""
    root = tmp_path_factory.mktemp("partition-cli")
    radio = root / "zero-radio.yaml"
    radio.write_text("extends: rpi-zero-2w\nid: zero-radio\nlink:\n  tx_nj_per_bit: 100000\n")
    profiles = {"radio": str(radio), "zero": "rpi-zero-2w"}
    done: dict[tuple[Any, ...], tuple[dict[str, Any], Path]] = {}

    def partition_cmd(scenario: tuple[str, float, float],
                      objective: str) -> tuple[dict[str, Any], Path]:
        profile, bandwidth, rtt = scenario
        key = (*scenario, objective)
        if key not in done:
            out = root / f"{profile}-{bandwidth:g}-{rtt:g}-{objective}"
            result = run_cli("partition", str(splitnet.onnx), "--profile", profiles[profile],
                             "--cloud", "cloud-t4", "--bandwidth", str(bandwidth), "--rtt",
                             str(rtt), "--objective", objective, "-o", str(out), "--json")
            assert result.status == 0, result.stderr
            done[key] = result.json(), out
        return done[key]

    return partition_cmd


def _scores(cut: dict[str, Any], report: dict[str, Any], downlink: float) -> dict[str, float]:
    """Latency, device energy and pipeline stage of one written cut, from its summary."""
    up, rtt = report["bandwidth_mbps"], report["rtt_ms"]
    energy = report["energy"]
    remote = cut["kind"] != "all-edge"
    link = (cut["up_bytes"] * 8 / (up * 1e3) + cut["down_bytes"] * 8 / (downlink * 1e3)
            if remote else 0.0)
    wait = link + cut["cloud_ms"] + (rtt if remote else 0.0)
    return {"latency": cut["edge_ms"] + wait,
            "energy": energy["max_w"] * cut["edge_ms"] + energy["idle_w"] * wait
            + energy["tx_nj_per_bit"] * cut["up_bytes"] * 8e-6,
            "throughput": max(cut["edge_ms"], link, cut["cloud_ms"])}


CHOSEN_SCORE = {"latency": "total_ms", "energy": "energy_mj", "throughput": "stage_ms"}


# ---------------------------------------------------------------- objectives


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_each_objective_is_reported_recorded_and_minimised(run: Run, objective: str) -> None:
    report, out = run(RADIO, objective)
    chosen = report["chosen"]
    assert report["objective"] == objective
    assert chosen["energy_mj"] > 0 and chosen["stage_ms"] > 0 and chosen["exact"] is True
    plan = read_split_yaml(out)
    assert plan.predicted["objective"] == objective
    assert plan.predicted["energy_mj"] == pytest.approx(chosen["energy_mj"])
    assert plan.predicted["stage_ms"] == pytest.approx(chosen["stage_ms"])
    # The chosen cut (c0) costs what the report says, and no other written cut does better.
    scores = {c["id"]: _scores(c, report, plan.predicted["downlink_mbps"])
              for c in report["cuts"]}
    assert chosen["cut_id"] == "c0"
    for name, key in CHOSEN_SCORE.items():
        assert scores["c0"][name] == pytest.approx(chosen[key], rel=1e-3, abs=1e-3), name
    best = min(s[objective] for s in scores.values())
    assert chosen[CHOSEN_SCORE[objective]] <= best * (1 + 1e-6) + 1e-3


def test_an_expensive_radio_keeps_energy_on_the_edge_while_latency_offloads(run: Run) -> None:
    latency, _ = run(RADIO, "latency")
    energy, _ = run(RADIO, "energy")
    cheap_radio, _ = run(ZERO, "energy")
    assert energy["energy"]["tx_nj_per_bit"] == 100000 and energy["energy"]["assumed"] is False
    assert energy["chosen"]["kind"] == "all-edge" and energy["chosen"]["cloud_nodes"] == 0
    assert latency["chosen"]["cloud_nodes"] > 0 and latency["chosen"]["kind"] != "all-edge"
    assert latency["chosen"]["total_ms"] < energy["chosen"]["total_ms"]
    assert energy["chosen"]["energy_mj"] < latency["chosen"]["energy_mj"]
    # It is the radio: at the catalog's assumed 20 nJ/bit the same link offloads for energy too.
    assert cheap_radio["energy"]["tx_nj_per_bit"] == 20.0
    assert cheap_radio["chosen"]["cloud_nodes"] > 0


def test_throughput_pipelines_a_split_where_latency_stays_on_the_edge(run: Run) -> None:
    latency, _ = run(SLOW, "latency")
    throughput, _ = run(SLOW, "throughput")
    assert latency["chosen"]["kind"] == "all-edge"
    assert throughput["chosen"]["kind"] == "split" and throughput["chosen"]["cloud_nodes"] > 0
    assert throughput["chosen"]["stage_ms"] < latency["chosen"]["stage_ms"]
    assert latency["chosen"]["total_ms"] < throughput["chosen"]["total_ms"]


# ---------------------------------------------------------------- the written cuts


@pytest.mark.parametrize(("scenario", "objective"),
                         [(RADIO, "energy"), (RADIO, "latency"), (SLOW, "throughput")],
                         ids=["all-edge-chosen", "split-fast", "split-slow"])
def test_split_yaml_holds_both_baselines_and_every_cut_on_disk(
    run: Run, splitnet: SplitNet, scenario: tuple[str, float, float], objective: str
) -> None:
    report, out = run(scenario, objective)
    plan = read_split_yaml(out)
    ids = [c.id for c in plan.cuts]
    kinds = {c.id: c.kind for c in plan.cuts}
    assert len(set(ids)) == len(ids) and ids[0] == "c0" == report["chosen"]["cut_id"]
    assert [c["id"] for c in report["cuts"]] == ids
    assert {"all-edge", "all-cloud"} <= set(kinds.values())
    assert kinds["c0"] == report["chosen"]["kind"] and plan.split == plan.cuts[0].split
    assert sorted(p.name for p in (out / "cuts").iterdir()) == sorted(ids[1:])
    assert not (out / ".reference.onnx").exists()
    feed = {"frame": np.load(splitnet.samples)[:1]}
    want = model_outputs(splitnet.onnx, feed)["logits"]
    for cut in plan.cuts:
        where = out if cut.id == "c0" else out / "cuts" / cut.id
        halves = {"head": cut.split.head, "tail": cut.split.tail}
        assert (halves["head"] is None) == (cut.kind == "all-cloud"), cut.id
        assert (halves["tail"] is None) == (cut.kind == "all-edge"), cut.id
        for half in filter(None, halves.values()):
            assert half.parent == where and half.is_file(), (cut.id, half)
        got = run_split(cut.split, feed)["logits"]
        assert np.max(np.abs(got - want)) <= 1e-4, cut.id
    rows = plan.bandwidth_table
    assert rows and rows == report["bandwidth_table"]
    for row in rows:
        assert row["cut_id"] in kinds and row["kind"] == kinds[row["cut_id"]], row
    assert [r["min_mbps"] for r in rows] == sorted(r["min_mbps"] for r in rows)
    assert rows[0]["min_mbps"] == 0.1 and rows[-1]["max_mbps"] == 10000


# ---------------------------------------------------------------- costs measured on the device


def _ssh_args(splitnet: SplitNet, device: SSHDevice, out: Path, identity: Path,
              known_hosts: Path) -> list[str]:
    return ["partition", str(splitnet.onnx), "--profile", "rpi-zero-2w", "--cloud", "cloud-t4",
            "--host", device.target, "--identity", str(identity), "--known-hosts",
            str(known_hosts), "--device-python", device.python, "--runs", "3", "-o", str(out),
            "--json"]


@pytest.mark.slow
def test_host_measures_the_edge_costs_on_the_device(
    splitnet: SplitNet, ssh_device: SSHDevice, tmp_path: Path
) -> None:
    out = tmp_path / "split"
    result = run_cli(*_ssh_args(splitnet, ssh_device, out, ssh_device.identity,
                                ssh_device.known_hosts))
    assert result.status == 0, result.stderr
    report = result.json()
    assert report["costs"].startswith(f"edge measured on ssh://{ssh_device.target}; ")
    assert report["costs"].endswith("cloud estimated from MACs and peak")
    assert read_split_yaml(out).predicted["costs"] == report["costs"]
    assert not (out / ".reference.onnx").exists()


def _failing(case: str, splitnet: SplitNet, device: SSHDevice,
             tmp_path: Path) -> tuple[Any, Path, Path]:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    identity, known = {"wrong-identity": (device.wrong_identity, device.known_hosts),
                       "unknown-host": (device.identity, empty)}[case]
    out = tmp_path / "split"
    return run_cli(*_ssh_args(splitnet, device, out, identity, known)), out, empty


FAILURES = {"wrong-identity": "authentication failed", "unknown-host": "unknown host key"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_device_that_refuses_us_is_exit_3_one_line_and_writes_nothing(
    case: str, splitnet: SplitNet, ssh_device: SSHDevice, tmp_path: Path
) -> None:
    result, out, empty = _failing(case, splitnet, ssh_device, tmp_path)
    assert result.status == 3, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert FAILURES[case] in result.stderr
    assert empty.read_text() == ""  # never records an unknown key without --trust-new-host
    # No split directory, and no temporary one left beside where it would have gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["known_hosts"]
    assert not out.exists()


# ---------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-node model: enough for the CLI to get past its model argument."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("extra", "model", "expected"), [
    (["--objective", "speed"], "tiny", "'--objective': 'speed' is not one of"),
    (["--compress", "bogus"], "tiny", "'--compress': 'bogus' is not one of"),
    ([], "missing", "does not exist"),
], ids=["objective", "compress", "missing-model"])
def test_bad_input_is_exit_2_with_one_error_line(
    tiny: Path, tmp_path: Path, extra: list[str], model: str, expected: str
) -> None:
    path = tiny if model == "tiny" else tmp_path / "missing.onnx"
    out = tmp_path / "split"
    result = run_cli("partition", str(path), "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(out), *extra)
    assert result.status == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == result.error_lines and len(result.error_lines) == 1
    assert expected in result.stderr
    assert list(tmp_path.iterdir()) == []  # no split, no temporary directory


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_failed_rerun_keeps_the_earlier_split(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "split"
    args = ["partition", str(tiny), "--profile", "rpi4", "--cloud", "cloud-t4", "-o", str(out)]
    assert run_cli(*args, "--json").status == 0
    before = _tree(out)
    assert "split.yaml" in before and "head.onnx" in before
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 7), np.float32))  # samples that do not fit x [1, 4]
    result = run_cli(*args, "--calib", str(bad))
    assert result.status == 2, result.stderr
    assert len(result.error_lines) == 1 and result.stderr.count("\n") == 1, result.stderr
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npy", "split"]


@pytest.mark.parametrize("kind", ["file", "other-directory"])
def test_out_that_is_not_a_split_is_refused_untouched(tiny: Path, tmp_path: Path,
                                                      kind: str) -> None:
    out = tmp_path / "taken"
    if kind == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    result = run_cli("partition", str(tiny), "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(out))
    assert result.status == 2, result.stderr
    assert len(result.error_lines) == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"-o {out}" in result.stderr
    assert _tree(tmp_path) == before and len(list(tmp_path.iterdir())) == 1


def test_the_same_model_partitions_when_the_input_is_good(tiny: Path, tmp_path: Path) -> None:
    """The bad-input cases above fail on their flag, not on the model or the profiles."""
    result = run_cli("partition", str(tiny), "--profile", "rpi4", "--cloud", "cloud-t4",
                     "-o", str(tmp_path / "split"), "--json")
    assert result.status == 0, result.stderr
    assert (tmp_path / "split" / "split.yaml").is_file()


def test_partition_refuses_an_unknown_objective_before_writing(tiny: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "split"
    with pytest.raises(UsageError, match="unknown objective 'speed'") as error:
        partition(tiny, load_profile("rpi4"), load_profile("cloud-t4"), out,
                  PartitionOptions(objective="speed"))
    assert "\n" not in str(error.value)
    assert not out.exists()
