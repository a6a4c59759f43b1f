"""Push a bundle's artifact to a device, health-check it there, switch to it, benchmark it.

Device layout under the profile's work dir (default ``~/.edge``)::

    agent/edge_agent-<sha12>.py     the agent, by content
    incoming/                       uploads in flight (never run from here)
    releases/<sha16>/model.<ext>    one directory per artifact, verified by sha256
    models/<sha16>.onnx             models pushed for per-node profiling, by content
    current -> releases/<sha16>     switched atomically after the health check
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from devices.transport import Transport
from edge.errors import DeviceError, UsageError
from edge.model import sha256_file
from edge.values import (
    Artifact,
    BenchResult,
    Bundle,
    CandidateResult,
    DeployReport,
    MeasuredCandidate,
)

__all__ = ["AGENT_PATH", "BenchOptions", "Device", "deploy_bundle", "deploy_fastest",
           "measure_on_device", "open_device", "profile_on_device"]

AGENT_PATH = Path(__file__).with_name("agent.py")


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchOptions:
    """How the agent measures on the device."""

    runs: int = 50
    warmup: int = 5
    threads: int = 0  # 0: all of the device's cores


@dataclass(frozen=True, slots=True)
class Device:
    """A prepared device: where the agent is and which runtimes it found."""

    transport: Transport
    python: str
    work: str
    agent: str
    runtimes: frozenset[str] = frozenset()

    def call(self, *args: str, timeout: float = 600.0) -> dict:
        """Run an agent command; its JSON or a DeviceError with the agent's message."""
        done = self.transport.run([self.python, self.agent, *args], timeout=timeout)
        try:
            reply = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise DeviceError(f"{self.transport.label}: agent {args[0]} failed "
                              f"(exit {done.status}): {tail}") from None
        if done.status != 0 or "error" in reply:
            raise DeviceError(f"{self.transport.label}: {reply.get('error', 'agent failed')}")
        return reply


def deploy_bundle(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    bench: BenchOptions, activate: bool = True,
) -> DeployReport:
    """Deploy the bundle's chosen artifact (or the best one the device can run) and measure it.

    The benchmark is the health check: only an artifact that loads and runs becomes current.
    """
    device = open_device(transport, python=python, work_dir=work_dir)
    result = _pick(bundle, device.runtimes, transport.label)
    assert result.artifact is not None
    report = measure_on_device(device, bundle_dir, result.artifact, profile=bundle.profile,
                               bench=bench, activate=activate)
    if result.candidate.id == bundle.chosen:
        return replace(report, reason=f"the bundle's choice: {bundle.reason}")
    chosen = bundle.chosen_result()
    need = chosen.artifact.runtime if chosen and chosen.artifact else "?"
    return replace(report, reason=(
        f"the bundle chose {bundle.chosen}, but the device has no {need} runtime; deployed "
        f"{result.candidate.id}, the first faithful candidate it can run"))


def deploy_fastest(
    bundle_dir: Path, bundle: Bundle, transport: Transport, *, python: str, work_dir: str,
    bench: BenchOptions, tie: float = 0.10,
) -> DeployReport:
    """Measure every faithful candidate the device can run ON the device; activate the fastest.

    Candidates within ``tie`` of the fastest p50 count as equal; the bundle's order decides.
    """
    device = open_device(transport, python=python, work_dir=work_dir)
    usable = _usable(bundle, device.runtimes, transport.label)
    reports, errors = [], []
    for result in usable:
        assert result.artifact is not None
        try:
            reports.append(measure_on_device(device, bundle_dir, result.artifact,
                                             profile=bundle.profile, bench=bench,
                                             activate=False))
        except DeviceError as exc:  # this candidate does not run there; the others compete
            errors.append(exc)
    if not reports:
        raise errors[0]
    fastest = min(r.bench.p50_ms for r in reports)
    best = next(r for r in reports if r.bench.p50_ms <= fastest * (1 + tie))
    device.call("activate", device.work, best.release)
    compared = tuple(MeasuredCandidate(candidate=r.candidate, bench=r.bench) for r in reports)
    slowest = max(reports, key=lambda r: r.bench.p50_ms)
    reason = (f"fastest of {len(reports)} faithful candidates measured on the device "
              f"(p50 {best.bench.p50_ms:.3f} ms; slowest {slowest.candidate} "
              f"{slowest.bench.p50_ms:.3f} ms)")
    return replace(best, active=True, compared=compared, reason=reason)


def measure_on_device(
    device: Device, root: Path, artifact: Artifact, *, profile: str, bench: BenchOptions,
    activate: bool,
) -> DeployReport:
    """Install an artifact's files under ``root`` on the device, benchmark, maybe activate."""
    release = artifact.release_id[:16]
    model = _install(device, root, artifact, release)
    measured = device.call("bench", model, "--runs", str(bench.runs), "--warmup",
                           str(bench.warmup), "--threads", str(bench.threads))
    if activate:
        device.call("activate", device.work, release)
    transport = device.transport
    return DeployReport(
        target=transport.label, transport="local" if transport.is_local else "ssh",
        profile=profile, candidate=artifact.candidate.id, artifact_sha256=artifact.sha256,
        release=release, active=activate, bench=_bench_result(measured, transport.label))


def profile_on_device(device: Device, model: Path, *, threads: int = 1, runs: int = 10) -> dict:
    """Per-node kernel ms and the optimized whole-model ms of an ONNX model, measured ON the device.

    The model goes to ``models/<sha16>.onnx`` under the work dir (sha256-verified by the agent)
    unless that file is already there. The agent's JSON comes back with ``uploaded`` (whether
    this call pushed the model), ``model`` (its path on the device) and ``where``.
    """
    model = Path(model)
    if not model.is_file():
        raise UsageError(f"{model}: no such model file")
    if model.suffix != ".onnx":
        raise UsageError(f"{model}: per-node profiling needs an .onnx model")
    sha256 = sha256_file(model)
    remote = f"{device.work}/models/{sha256[:16]}.onnx"
    uploaded = not device.transport.exists(remote)
    if uploaded:
        _install_file(device, model, sha256, remote)
    reply = device.call("profile", "--model", remote, "--threads", str(threads),
                        "--runs", str(runs))
    return {**reply, "uploaded": uploaded, "model": remote, "where": device.transport.label}


def open_device(transport: Transport, *, python: str, work_dir: str) -> Device:
    """Prepare the work dir, push the agent if missing, check python, probe runtimes."""
    device = _prepare(transport, python, work_dir)
    probe = device.call("probe", timeout=120)
    return replace(device, runtimes=frozenset(probe.get("runtimes", {})))


def _prepare(transport: Transport, python: str, work_dir: str) -> Device:
    home = transport.home()
    work = _expand(work_dir, home)
    python = _expand(python, home)
    for sub in ("agent", "incoming", "releases"):
        transport.mkdir(f"{work}/{sub}")
    agent = f"{work}/agent/edge_agent-{sha256_file(AGENT_PATH)[:12]}.py"
    if not transport.exists(agent):
        _upload_atomic(transport, AGENT_PATH, agent, work)
    _check_python(transport, python)
    return Device(transport=transport, python=python, work=work, agent=agent)


def _expand(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def _check_python(transport: Transport, python: str) -> None:
    done = transport.run([python, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                         timeout=60)
    if done.status != 0 or done.stdout.strip() != "True":
        raise DeviceError(f"{transport.label}: no usable python at '{python}' (need >= 3.8); "
                          "set access.python in the profile or pass --device-python")


def _upload_atomic(transport: Transport, local: Path, remote: str, work: str) -> None:
    tmp = f"{work}/incoming/{Path(remote).name}.{secrets.token_hex(4)}.partial"
    transport.put(local, tmp)
    transport.run(["mv", "-f", tmp, remote], timeout=60)


def _pick(bundle: Bundle, runtimes: frozenset[str], label: str) -> CandidateResult:
    return _usable(bundle, runtimes, label)[0]


def _usable(bundle: Bundle, runtimes: frozenset[str], label: str) -> list[CandidateResult]:
    """Faithful candidates the device can run, the bundle's chosen one first."""
    chosen = bundle.chosen_result()
    if chosen is None:
        raise DeviceError("the bundle has no chosen candidate (none kept fidelity); "
                          "fix the model or relax --max-drop, then re-run edge optimize")
    faithful = [c for c in bundle.candidates
                if c.status in ("chosen", "passed") and c.artifact is not None]
    ordered = [chosen] + [c for c in faithful if c is not chosen]
    runnable = [r for r in ordered if r.artifact is not None and r.artifact.runtime in runtimes]
    if runnable:
        return runnable
    usable = faithful
    need = ", ".join(sorted({c.artifact.runtime for c in usable if c.artifact}))
    have = ", ".join(sorted(runtimes)) or "none"
    raise DeviceError(f"{label} has no runtime for this bundle (needs one of {need}; has "
                      f"{have}): install one into the device's python, e.g. pip install "
                      "ai-edge-litert, onnxruntime or openvino")


def _install(device: Device, bundle_dir: Path, artifact: Artifact, release: str) -> str:
    """Upload and verify every file; the main file goes last, so its presence means complete."""
    final = f"{device.work}/releases/{release}/model{Path(artifact.file).suffix}"
    if device.transport.exists(final):
        return final
    for companion in artifact.companions:
        _install_file(device, bundle_dir / companion.file, companion.sha256,
                      f"{device.work}/releases/{release}/model{Path(companion.file).suffix}")
    _install_file(device, bundle_dir / artifact.file, artifact.sha256, final)
    return final


def _install_file(device: Device, local: Path, sha256: str, final: str) -> None:
    tmp = f"{device.work}/incoming/{sha256[:16]}.{secrets.token_hex(4)}.partial"
    device.transport.put(local, tmp)
    device.call("install", tmp, final, "--sha256", sha256)


def _bench_result(reply: dict, where: str) -> BenchResult:
    keys = ("runtime", "runs", "warmup", "threads", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
            "load_ms", "peak_rss_mb")
    device = dict(reply.get("device", {}))
    device["runtime_version"] = reply.get("runtime_version")
    return BenchResult(where=where, device=device, **{k: reply[k] for k in keys})
