#!/usr/bin/env python
"""Wall time of a fleet deploy: one emulated device vs N in parallel (default 8, --forks N).

    sudo python bench/fleet.py [--devices 8] [--rounds 3] [--cpus share|N] [--runs 20]
                               [--warmup 2] [--max-load 1.0] [--out FILE]

The bundle is built ONCE before anything is timed (the sample digits CNN optimized for an
emulated x86-64 profile: 1 core, 1 GB), so conversion time is excluded: every timed run is
``edge.flows.fleet.run_fleet`` deploying that prebuilt bundle -- read the inventory, connect over
SSH, push the agent and the artifact (sha256-checked), benchmark on the device (``--runs``
runs after ``--warmup``), switch the release. Every device's home is wiped before each timed
run, so each run is a first-time deploy (nothing already installed).

The devices are network namespaces with their own sshd and home, each capped by a cgroup, v1 or
v2 (tests/support/fleet_devices.py) to 1 GB and to ``--cpus`` CPUs. Real devices do not share CPUs,
so by default (``--cpus share``) each device gets 0.8 x this host's CPUs / N (at most 1): the
devices together never need more CPU than the host has, and a device is as fast alone as among
N. With ``--cpus 1`` on a host with fewer than N CPUs the devices compete for the host's CPUs
and the fleet's wall time is bounded below by their total CPU work / host CPUs (printed as the
"CPU-bound floor"): that measures the host, not the fleet deploy.

The single-device and the fleet deploys alternate (round r: single first when r is even, fleet
first when odd); medians and their ratio are reported, with each run's CPU use (devices, edge
itself, and the rest of the machine -- "other" shows when something else competed). The script
first waits (up to ``--quiet-timeout``) for the load average to drop below ``--max-load``. The
issue's target: fleet wall time <= 3x the single device's.

Prints a table and writes JSON (default bench/results/fleet.json, with the git sha and the
machine under "provenance"). Needs root, iproute2, OpenSSH's sshd and cgroup cpu + memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402  (bench/ is this script's directory)

from devices.connect import DeviceTarget  # noqa: E402
from edge.flows.fleet import FleetReport, FleetRequest, run_fleet  # noqa: E402
from tests.support.fleet_devices import EmulatedFleet, running_fleet, unavailable  # noqa: E402

CACHE = ROOT / "bench" / ".cache" / "fleet"
SAMPLES = ROOT / "edge" / "samples"
TARGET_RATIO = 3.0
SHARE = 0.8  # of the host's CPUs given to the devices together; the rest is edge's own
PROFILE = """\
extends: x86-64
id: emu-x86
name: Emulated x86-64 device (1 CPU, 1 GB)
compute: {{cores: 1, threads: 1}}
memory: {{ram_mb: 1024, model_budget_mb: 256}}
runtimes: [tflite, onnxruntime]
access: {{user: edgeuser, python: {python}}}
"""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    why = unavailable()
    if why is not None:
        print(f"error: cannot emulate devices here: {why}", file=sys.stderr)
        return 2
    started = time.time()
    CACHE.mkdir(parents=True, exist_ok=True)
    _wait_for_quiet(args.max_load, args.quiet_timeout)  # before taking the devices' lock
    cpus = _cpus(args)
    with running_fleet(args.devices, cpus=cpus, memory_mb=1024) as fleet:
        profile = CACHE / "emu-x86.yaml"
        profile.write_text(PROFILE.format(python=fleet.python))
        bundle = _bundle(profile)
        inventory = fleet.write_inventory(CACHE / "hosts.yml", profile=str(profile))
        device = DeviceTarget(known_hosts=fleet.known_hosts, runs=args.runs, warmup=args.warmup)

        def deploy(limit: str | None) -> dict[str, Any]:
            fleet.wipe()
            before = _cpu_counters(fleet)
            t0 = time.perf_counter()
            report = run_fleet(FleetRequest(source=bundle, inventory=inventory, limit=limit,
                                            forks=args.devices, device=device,
                                            measure_on_device=False))  # one artifact each
            wall = time.perf_counter() - t0
            return _measure(report, wall, before, _cpu_counters(fleet))

        deploy(None)  # warm-up, untimed: page cache, first imports on client and devices
        rounds = []
        for r in range(args.rounds):
            order = ("single", "fleet") if r % 2 == 0 else ("fleet", "single")
            done = {kind: deploy(fleet.devices[0].name if kind == "single" else None)
                    for kind in order}
            rounds.append({"round": r + 1, "order": list(order), **done,
                           "loadavg_after": os.getloadavg()[0],
                           "ratio": done["fleet"]["wall_s"] / done["single"]["wall_s"]})
            print(f"round {r + 1}: 1 device {done['single']['wall_s']:.2f} s, "
                  f"{args.devices} devices {done['fleet']['wall_s']:.2f} s", file=sys.stderr)
        doc = _document(args, fleet, rounds, started)
    doc["provenance"] = provenance.record("bench/fleet.py", argv)
    _print(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"json: {args.out}")
    return 0 if doc["verdict"] == "ok" else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=8, help="fleet size (and --forks)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--runs", type=int, default=20, help="benchmark runs on each device")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up runs on each device")
    parser.add_argument("--cpus", default="share",
                        help="CPU cap of each device: a number, or 'share' (default): "
                             f"{SHARE:g} x this host's CPUs / --devices, at most 1, so the "
                             "devices together never need more CPU than the host has")
    parser.add_argument("--max-load", type=float, default=1.0,
                        help="wait until the 1-minute load average is below this before timing")
    parser.add_argument("--quiet-timeout", type=float, default=300,
                        help="seconds to wait for --max-load (then time anyway, and say so)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fleet.json")
    return parser


def _bundle(profile: Path) -> Path:
    """The sample digits CNN optimized once for the emulated profile (cached across runs)."""
    from edge.core.bundle import is_bundle, read_bundle
    from edge.core.profile import load_profile
    from edge.flows.optimize import OptimizeOptions, optimize

    out = CACHE / "digits-emu-x86.bundle"
    spec = load_profile(profile)
    if is_bundle(out) and read_bundle(out).profile_spec == spec.to_json():
        return out
    os.environ.setdefault("EDGE_CACHE_DIR", str(CACHE / "convert-cache"))
    print("building the bundle (not timed)...", file=sys.stderr)
    optimize(SAMPLES / "digits.onnx", spec, out,
             OptimizeOptions(calib=SAMPLES / "digits_calib.npy",
                             eval=SAMPLES / "digits_eval.npz"))
    return out


def _cpus(args: argparse.Namespace) -> float:
    if args.cpus == "share":
        return min(1.0, round(SHARE * (os.cpu_count() or 1) / args.devices, 3))
    try:
        value = float(args.cpus)
    except ValueError:
        raise SystemExit(f"error: --cpus {args.cpus!r}: give a number or 'share'") from None
    if not value > 0:
        raise SystemExit("error: --cpus must be > 0")
    return value


def _wait_for_quiet(max_load: float, timeout: float) -> None:
    """Give other work on this machine a chance to finish: the fleet is CPU-bound."""
    deadline = time.monotonic() + timeout
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5)
    if os.getloadavg()[0] > max_load:
        print(f"warning: load average still {os.getloadavg()[0]:.2f} > {max_load}: "
              "other work competes for the CPUs", file=sys.stderr)


def _cpu_counters(fleet: EmulatedFleet) -> dict[str, float]:
    """CPU seconds so far: the whole machine (/proc/stat), this process, every device."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    me = os.times()
    devices = [d.cpu_seconds() for d in fleet.devices]
    return {"machine": (user + nice + system + irq + softirq + steal) / tick,
            "client": me.user + me.system,
            "devices": sum(d for d in devices if d is not None)}


def _measure(report: FleetReport, wall: float, before: dict[str, float],
             after: dict[str, float]) -> dict[str, Any]:
    failed = [f"{h.host}: {h.error}" for h in report.failed]
    if failed:
        raise SystemExit("error: a deploy failed: " + "; ".join(failed))
    seconds = [h.seconds for h in report.hosts]
    used = {k: after[k] - before[k] for k in before}
    return {"wall_s": wall, "deploy_s": report.deploy_seconds, "hosts": len(report.hosts),
            "host_s": seconds, "host_s_sum": sum(seconds),
            "client_cpu_s": used["client"], "device_cpu_s": used["devices"],
            "other_cpu_s": max(0.0, used["machine"] - used["client"] - used["devices"]),
            "candidate": report.hosts[0].candidate, "release": report.hosts[0].release}


def _document(args: argparse.Namespace, fleet: EmulatedFleet, rounds: list[dict[str, Any]],
              started: float) -> dict[str, Any]:
    single = statistics.median(r["single"]["wall_s"] for r in rounds)
    many = statistics.median(r["fleet"]["wall_s"] for r in rounds)
    ratio = many / single
    busy = statistics.median(r["fleet"]["host_s_sum"] / r["fleet"]["wall_s"] for r in rounds)
    cpus = os.cpu_count() or 1
    demand = statistics.median(r["fleet"]["device_cpu_s"] + r["fleet"]["client_cpu_s"]
                               for r in rounds)
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": _host(),
        "devices": args.devices, "forks": args.devices, "rounds": args.rounds,
        "runs": args.runs, "warmup": args.warmup,
        "device_caps": {"cpus": fleet.cpus, "memory_mb": fleet.memory_mb,
                        "cpus_option": args.cpus},
        "conversion_excluded": True,
        "candidate": rounds[0]["fleet"]["candidate"],
        "median_single_s": single, "median_fleet_s": many, "ratio": ratio,
        "median_parallelism": busy, "target_ratio": TARGET_RATIO,
        "median_fleet_cpu_s": demand,
        "cpu_bound_floor_s": demand / cpus,  # the fleet's CPU work spread over every host CPU
        "verdict": "ok" if ratio <= TARGET_RATIO else "missed",
        "rounds_detail": rounds, "seconds": round(time.time() - started, 1),
    }


def _host() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "loadavg": os.getloadavg()}


def _print(doc: dict[str, Any]) -> None:
    from edge.core.tables import table

    n = doc["devices"]
    rows = [(r["round"], " then ".join(r["order"]), f"{r['single']['wall_s']:.2f}",
             f"{r['fleet']['wall_s']:.2f}", f"{r['ratio']:.2f}x",
             f"{r['fleet']['host_s_sum'] / r['fleet']['wall_s']:.1f}",
             f"{r['single']['device_cpu_s']:.2f}", f"{r['fleet']['device_cpu_s']:.2f}",
             f"{r['single']['other_cpu_s'] + r['fleet']['other_cpu_s']:.2f}")
            for r in doc["rounds_detail"]]
    rows.append(("median", "", f"{doc['median_single_s']:.2f}", f"{doc['median_fleet_s']:.2f}",
                 f"{doc['ratio']:.2f}x", f"{doc['median_parallelism']:.1f}", "", "", ""))
    print(f"deploy of a prebuilt bundle ({doc['candidate']}; conversion excluded) to 1 vs {n} "
          f"emulated devices (forks {n}; each capped at {doc['device_caps']['cpus']:g} CPU, "
          f"{doc['device_caps']['memory_mb']} MB) on {doc['host']['cpus']} host CPUs")
    print(table(("round", "order", "1 device s", f"{n} devices s", "ratio", "parallelism",
                 "device CPU s (1)", f"device CPU s ({n})", "other CPU s"), rows))
    print(f"CPU-bound floor for {n} devices: {doc['median_fleet_cpu_s']:.1f} CPU-s of work / "
          f"{doc['host']['cpus']} CPUs = {doc['cpu_bound_floor_s']:.2f} s")
    print(f"target: {n} devices <= {doc['target_ratio']:g}x one device -> {doc['verdict']} "
          f"({doc['ratio']:.2f}x)")


if __name__ == "__main__":
    raise SystemExit(main())
