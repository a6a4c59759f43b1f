"""Edge's split over real emulated links: a slow device (its own network namespace, the share
of a CPU that runs the model in ~80 ms on this host) and a cloud namespace joined by a
userspace netem link. Edge's prediction is made by `edge partition` from costs measured ON that
device; the measurement is `edge run-split` in the device's namespace against
`edge serve-cloud` in the cloud's.

These tests check behaviour, and only timings with margins no busy host can eat: which
placement edge picks, that the client uses it and switches when the link changes, that all-cloud
is slower than all-edge where the emulated link alone makes it several times slower (2 Mbit/s),
and that a chosen split beats both baselines where it is predicted at half of either. Speed
claims that depend on how much CPU the throttled device gets from a shared host -- how close
measured latency comes to predicted, all-cloud vs all-edge at 10 Mbit/s (predicted 1.5x; a
busy host measured 1.23x) -- are bench/split_link.py's (more rounds, interleaved, medians, its
"claims" and exit status) and docs/benchmarks.md reports them.

Needs root, /dev/net/tun, iproute2 and a cgroup cpu controller, v1 or v2 (skipped otherwise,
with the reason; a failure under EDGE_TEST_STRICT=1).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.netem import LinkSpec, available
from tests.support.split_link import (
    EDGE,
    Device,
    cloud_server,
    emulated_device,
    measure,
    partition,
)
from tests.support.splitnet import SplitNet

pytestmark = [pytest.mark.slow, pytest.mark.exclusive,  # timings: no other test beside them
              pytest.mark.skipif(available() is not None, reason=str(available()))]

#: How long the device runs the whole model, the figure the links below are chosen for: at
#: 10 Mbit/s and 20 ms a split wins (~40 ms), at 2 Mbit/s and 100 ms the device alone.
DEVICE_MS = 80.0


@pytest.fixture
def cpu_fraction(splitnet: SplitNet) -> float:
    """The share of one core that makes the device run the model in ~DEVICE_MS on this host:
    a fixed share (an eighth) made a quiet, fast host's device run it in 29 ms, where the
    device alone beats every split and the links below no longer test a split. Measured once,
    inside the first test (an ``exclusive`` one: no other test loads the host meanwhile)."""
    return _cpu_fraction(splitnet.onnx, splitnet.samples)


@functools.cache
def _cpu_fraction(onnx: Path, samples: Path) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
    frame = np.load(samples)[:1]
    feed = {session.get_inputs()[0].name: frame}
    times = []
    for _ in range(30):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1000)
    return min(0.5, max(1 / 64, float(np.median(times[5:])) / DEVICE_MS))


@pytest.mark.parametrize(("rate", "rtt", "expected"),
                         [(10, 20, "split"), (2, 100, "all-edge")])
def test_edge_picks_and_runs_the_right_placement_over_an_emulated_link(
        rate: float, rtt: float, expected: str, splitnet: SplitNet, cpu_fraction: float,
        tmp_path: Path) -> None:
    with emulated_device(LinkSpec(rate, rtt), tmp_path, cpu_fraction) as device:
        report, earlier = _placement(device, splitnet, tmp_path / "split", expected)
        assert report["costs"].startswith("edge measured on local:")
        assert report["chosen"]["kind"] == expected, (report["chosen"], earlier)
        assert report["max_abs_diff"] <= 1e-5
        kinds = {c["id"]: c["kind"] for c in report["cuts"]}
        with cloud_server(device, tmp_path / "split") as url:
            results, first = _measured(device, tmp_path / "split", url, splitnet, kinds,
                                       expected)
    assert {kinds[c] for c in results["auto"].cuts} == {expected}, (results["auto"].cuts, first)
    measured = {k: round(v.measured_ms, 1) for k, v in results.items()}
    if expected == "all-edge":  # the link alone: ~540 ms to ship the float frame vs ~80 ms
        assert measured["all-cloud"] > 1.3 * measured["all-edge"], measured
    if expected == "split":  # predicted ~40 ms vs ~80 (all-edge) and ~120 (all-cloud)
        assert measured["auto"] < 0.8 * min(measured["all-edge"], measured["all-cloud"]), measured


def _measured(device: Device, split_dir: Path, url: str, splitnet: SplitNet,
              kinds: dict[str, str], expected: str) -> tuple[dict, object | None]:
    """The split's runs over the link, measured once more when the running client's own cut
    (it times the link and the device as it goes) is not ``expected`` (with the first cuts,
    for the failure message): on a share of a shared core a load spike passes for the
    device's speed, as in ``_placement``. A wrong cut in two independent runs is edge's."""
    results = measure(device, split_dir, url, splitnet.samples, rounds=1, runs=5)
    if {kinds[c] for c in results["auto"].cuts} == {expected}:
        return results, None
    again = measure(device, split_dir, url, splitnet.samples, rounds=1, runs=5)
    return again, results["auto"].cuts


def _placement(device: Device, splitnet: SplitNet, out: Path,
               expected: str) -> tuple[dict, dict | None]:
    """``edge partition``'s report, measured once more when its choice is not ``expected``
    (with the first choice, for the failure message). The edge side is measured on a share
    of a core of a shared host: a load spike during its runs passes for the device's speed
    (CI once measured all-edge at 94.8 ms where it takes ~80, and the split lost). A wrong
    choice from two independent measurements is edge's."""
    report = partition(device, splitnet.onnx, splitnet.samples, out)
    if report["chosen"]["kind"] == expected:
        return report, None
    shutil.rmtree(out)
    return partition(device, splitnet.onnx, splitnet.samples, out), report["chosen"]


def test_client_switches_cut_when_the_link_changes(splitnet: SplitNet, cpu_fraction: float,
                                                   tmp_path: Path) -> None:
    """10 Mbit/s, then 0.5 Mbit/s, then 10 again, under one running client."""
    fast, slow = LinkSpec(10, 20), LinkSpec(0.5, 20)
    with emulated_device(fast, tmp_path, cpu_fraction) as device:
        report, earlier = _placement(device, splitnet, tmp_path / "split", "split")
        # the client starts from the partition's choice: a failure below then says which erred
        assert report["chosen"]["kind"] == "split", (report["costs"], report["chosen"], earlier)
        with cloud_server(device, tmp_path / "split") as url:
            runs, changed = _runs_while_changing(device, tmp_path / "split", url, splitnet,
                                                 [slow, fast])
            if not _switched(*_phases(runs, changed)):
                # once more: on a share of a shared core a load spike passes for a slow link
                # (the client's own time is in its link time); wrong twice is edge's
                device.link.set_spec(fast)
                runs, changed = _runs_while_changing(device, tmp_path / "split", url,
                                                     splitnet, [slow, fast])
    before, slow_phase, after = _phases(runs, changed)
    assert before and slow_phase and after
    assert _count(before, "split") >= 0.9 * len(before), _why(before)
    # the device runs the whole model; every 0.5 s one probe still tries the split
    assert _count(slow_phase, "all-edge") >= 0.7 * len(slow_phase), _why(slow_phase)
    assert _count(after, "split") >= 0.7 * len(after), _why(after)


def _phases(runs: list[dict], changed: list[float]) -> tuple[list[dict], ...]:
    """The runs before the link slowed, while slow (after 1.5 s), and after (2.5 s on)."""
    def phase(start: float, end: float) -> list[dict]:
        return [r for r in runs if start <= r["started"] < end]
    return (phase(0, changed[0]), phase(changed[0] + 1.5, changed[1]),
            phase(changed[1] + 2.5, float("inf")))


def _switched(before: list[dict], slow_phase: list[dict], after: list[dict]) -> bool:
    """The client ran the split, then the device alone, then the split again (the asserts)."""
    return bool(before and slow_phase and after) and \
        _count(before, "split") >= 0.9 * len(before) and \
        _count(slow_phase, "all-edge") >= 0.7 * len(slow_phase) and \
        _count(after, "split") >= 0.7 * len(after)


def _count(runs: list[dict], kind: str) -> int:
    return sum(r["kind"] == kind for r in runs)


def _why(runs: list[dict]) -> str:
    """Each run of a phase that went wrong: its cut (P: a probe, F: fell back to the device), the
    uplink estimate after it, its time on the link and in all (so a failure says why)."""
    return " ".join(f"{r['kind']}{'P' if r['probe'] else ''}{'F' if r['fell_back'] else ''}"
                    f"({r['uplink_mbps']:.2g}Mb {r['link_ms']:.0f}/{r['total_ms']:.0f}ms)"
                    for r in runs)


def _runs_while_changing(device: Device, split_dir: Path, url: str, splitnet: SplitNet,
                         specs: list[LinkSpec]) -> tuple[list[dict], list[float]]:
    """One `edge run-split --cut auto` process; the link changes every 4 s under it. Run once
    more, with as many runs as the first one's pace needs, when the client finished before the
    last phase could be seen (a quiet host runs the device's head faster than a busy one)."""
    count = 300
    for _ in range(2):
        runs, changed = _client_runs(device, split_dir, url, splitnet, specs, count)
        if runs[-1]["started"] > changed[-1] + 4:
            return runs, changed
        pace = (runs[-1]["started"] - runs[0]["started"]) / max(len(runs) - 1, 1)
        count = int((changed[-1] + 8 - runs[0]["started"]) / max(pace, 1e-3)) + 50
    raise AssertionError("the client finished before the last phase, twice")


def _client_runs(device: Device, split_dir: Path, url: str, splitnet: SplitNet,
                 specs: list[LinkSpec], count: int) -> tuple[list[dict], list[float]]:
    """The runs of one client of ``count`` runs, and when the link changed under it."""
    argv = [EDGE, "run-split", str(split_dir), "--url", url, "--input", str(splitnet.samples),
            "--runs", str(count), "--cut", "auto", "--threads", "1", "--probe-every", "0.5",
            "--json"]
    client = device.link.popen("edge", argv, env=device.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    changed = []
    _wait_until_sending(device, client)
    for spec in specs:
        time.sleep(4.0)
        device.link.set_spec(spec)
        changed.append(time.time())
    out, err = client.communicate(timeout=600)
    assert client.returncode == 0, err
    return json.loads(out)["runs"], changed


def _wait_until_sending(device: Device, client: subprocess.Popen[str],
                        timeout_s: float = 180.0) -> None:
    """Until the client is in its run loop: ~5 split requests (9 KB each) crossed the link.

    Its start-up (Python, numpy, onnxruntime, the heads) on its share of a CPU takes seconds,
    more on a busy host, so a fixed sleep left the first phase empty there."""
    start = device.link.stats()["edge_to_cloud"]["bytes"]
    deadline = time.monotonic() + timeout_s
    while device.link.stats()["edge_to_cloud"]["bytes"] < start + 50_000:
        assert client.poll() is None, "the client exited before sending anything"
        assert time.monotonic() < deadline, f"the client sent nothing in {timeout_s:.0f} s"
        time.sleep(0.1)
