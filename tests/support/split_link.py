"""A slow device and a fast cloud joined by an emulated link, running edge's split for real.

The device is the ``edge`` side of a ``tests.support.netem.EmulatedLink``: its own network
namespace and a cgroup that gives it a fraction of one CPU. The cloud is the other namespace,
unthrottled. The whole product path runs, as a user would run it:

1. ``edge partition --on-device --device-python WRAPPER`` -- per-node costs of the edge
   side measured ON the emulated device by its agent (WRAPPER runs python inside the device's
   namespace and cgroup), the cloud side's measured on this host; bandwidth and RTT are the link's.
2. ``edge serve-cloud`` in the cloud namespace serves every cut's tail.
3. ``edge run-split`` in the device namespace runs all-edge, all-cloud and edge's own choice
   (``--cut auto``: it measures the link and switches), interleaved, several rounds.

Used by tests/partition/test_link_emulated.py and bench/split_link.py.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.netem import EmulatedLink, LinkSpec

EDGE = str(Path(sys.executable).with_name("edge"))
PORT = 8000
TOKEN = "bench-token-not-secret"
PLACEMENTS = ("all-edge", "all-cloud", "auto")


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """Medians over every timed run of one placement on one link, with edge's prediction."""

    placement: str  # all-edge, all-cloud, or auto (edge's choice, switching by itself)
    cuts: dict[str, int]  # cut ids used, and how often
    measured_ms: float
    predicted_ms: float  # at the link's nominal rate and RTT, for the cut(s) actually used
    runs: int
    samples_ms: list[float] = field(default_factory=list)
    parts_ms: dict[str, float] = field(default_factory=dict)  # measured medians: edge/link/cloud
    predicted_parts_ms: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """measured / predicted."""
        return self.measured_ms / self.predicted_ms


@dataclass(frozen=True, slots=True)
class Device:
    """Profiles and the python wrapper of one emulated device on one link."""

    link: EmulatedLink
    root: Path
    edge_profile: Path
    cloud_profile: Path
    python: Path
    env: dict[str, str]


@contextmanager
def emulated_device(spec: LinkSpec, root: Path, cpu_fraction: float) -> Iterator[Device]:
    """An emulated device (netns + cgroup CPU share) and cloud joined by ``spec``."""
    root.mkdir(parents=True, exist_ok=True)
    with EmulatedLink(spec, edge_cpu_fraction=cpu_fraction) as link:
        python = root / "device-python"
        python.write_text("#!/bin/sh\nexec " + shlex.join(link.argv("edge", [sys.executable]))
                          + ' "$@"\n')
        python.chmod(0o755)
        env = dict(os.environ, EDGE_LOCAL_DEVICE=str(root / "device-home"),
                   EDGE_CLOUD_TOKEN=TOKEN, OMP_NUM_THREADS="1")
        yield Device(link, root, _profile(root, "emulated-edge", "rpi4", spec),
                     _profile(root, "emulated-cloud", "cloud-c7i", None), python, env)


def _profile(root: Path, name: str, base: str, spec: LinkSpec | None) -> Path:
    """A profile file extending a catalog one: one thread, and the emulated link's numbers."""
    doc: dict[str, Any] = {"extends": base, "id": name, "name": f"{name} (emulated)",
                           "compute": {"threads": 1}}
    if spec is not None:
        doc["link"] = {"kind": "emulated", "uplink_mbps": spec.rate_mbit,
                       "downlink_mbps": spec.rate_mbit, "rtt_ms": spec.rtt_ms}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def partition(device: Device, model: Path, samples: Path, out: Path,
              compress: str = "int8") -> dict[str, Any]:
    """``edge partition`` with the edge side measured on the emulated device."""
    spec = device.link.spec
    argv = [EDGE, "partition", str(model), "--profile", str(device.edge_profile), "--cloud",
            str(device.cloud_profile), "--bandwidth", str(spec.rate_mbit), "--rtt",
            str(spec.rtt_ms), "--compress", compress, "--calib", str(samples), "--measure",
            "--on-device", "--device-python", str(device.python), "--runs", "50",
            "-o", str(out), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=device.env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"edge partition failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


@contextmanager
def cloud_server(device: Device, split_dir: Path) -> Iterator[str]:
    """``edge serve-cloud`` in the cloud namespace; yields its URL."""
    argv = [EDGE, "serve-cloud", str(split_dir), "--bind",
            device.link.cloud_ip, "--port", str(PORT), "--threads", "1"]
    server = device.link.popen("cloud", argv, env=device.env, stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True)
    try:
        _wait_serving(server)
        yield f"http://{device.link.cloud_ip}:{PORT}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_serving(server: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    assert server.stderr is not None
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        if "serving" in line:
            return
        if not line and server.poll() is not None:
            raise RuntimeError(f"serve exited with {server.returncode}")
    raise RuntimeError("the cloud server did not start")


def run_split(device: Device, split_dir: Path, url: str, samples: Path, placement: str,
              runs: int, warmup: int = 3) -> dict[str, Any]:
    """``edge run-split --json`` inside the device's namespace and cgroup."""
    argv = [EDGE, "run-split", str(split_dir), "--url", url, "--input", str(samples), "--runs",
            str(runs), "--warmup", str(warmup), "--cut", placement, "--threads", "1",
            "--probe-every", "1", "--json"]
    done = device.link.run("edge", argv, env=device.env, capture_output=True, text=True,
                           timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"edge run-split --cut {placement} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def measure(device: Device, split_dir: Path, url: str, samples: Path, *, rounds: int,
            runs: int) -> dict[str, Measured]:
    """Every placement, interleaved (order rotates each round); medians and predictions."""
    from partition.split import read_split_yaml

    plan = read_split_yaml(split_dir)
    spec = device.link.spec
    predicted = {c.id: _parts(c, spec) for c in plan.cuts}
    got: dict[str, list[dict[str, Any]]] = {p: [] for p in PLACEMENTS}
    for r in range(rounds):
        order = PLACEMENTS[r % 3:] + PLACEMENTS[:r % 3]
        for placement in order:
            got[placement] += run_split(device, split_dir, url, samples, placement, runs)["runs"]
    return {p: _summarise(p, rows, predicted) for p, rows in got.items()}


def _parts(cut: Any, spec: LinkSpec) -> dict[str, float]:
    """Predicted ms of a cut at the link's nominal numbers: edge, link (incl. RTT), cloud."""
    remote = cut.split.tail is not None
    link = cut.link_ms(spec.rate_mbit, spec.rate_mbit) + spec.rtt_ms if remote else 0.0
    return {"edge": cut.edge_ms, "link": link, "cloud": cut.cloud_ms if remote else 0.0,
            "total": cut.predicted_ms(spec.rate_mbit, spec.rate_mbit, spec.rtt_ms)}


def _summarise(placement: str, rows: list[dict[str, Any]],
               predicted: dict[str, dict[str, float]]) -> Measured:
    cuts: dict[str, int] = {}  # where the client chose to run (a probe of the cloud is not)
    for row in rows:
        if not row["probe"]:
            cuts[row["cut_id"]] = cuts.get(row["cut_id"], 0) + 1
    totals = [row["total_ms"] for row in rows]

    def median(key: str, table: list[dict[str, float]]) -> float:
        return statistics.median(t[key] for t in table)

    wanted = [predicted[row["cut_id"]] for row in rows]
    measured = [{"edge": r["edge_ms"], "link": r["link_ms"], "cloud": r["cloud_ms"]}
                for r in rows]
    return Measured(placement=placement, cuts=cuts, measured_ms=statistics.median(totals),
                    predicted_ms=median("total", wanted), runs=len(rows), samples_ms=totals,
                    parts_ms={k: round(median(k, measured), 3) for k in ("edge", "link", "cloud")},
                    predicted_parts_ms={k: round(median(k, wanted), 3)
                                        for k in ("edge", "link", "cloud")})
