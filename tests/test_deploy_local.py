"""The embedded default: deploy without --host runs the same agent on a local device dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge.core.values import Candidate
from targets import artifact_suffixes
from tests.support.cli import run_cli
from tests.support.profiles import one_runtime, same_file

pytestmark = pytest.mark.slow


def test_sample_deploys_to_the_local_device(tmp_path: Path) -> None:
    out = tmp_path / "digits.bundle"
    result = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(out),
                     "--runs", "20", "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    device_dir = Path(os.environ["EDGE_LOCAL_DEVICE"]).resolve()
    assert report["transport"] == "local"
    assert report["target"] == f"local:{device_dir}"
    assert report["bench"]["runs"] == 20 and report["bench"]["p50_ms"] > 0
    release = device_dir / ".edge" / "releases" / report["release"]
    assert (device_dir / ".edge" / "current").resolve() == release
    manifest = json.loads((out / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"] if c["status"] == "chosen")
    assert chosen["artifact"]["sha256"] == report["artifact_sha256"]
    assert (release / f"model{Path(chosen['artifact']['file']).suffix}").is_file()


def test_text_report_says_where_it_was_measured(tmp_path: Path) -> None:
    result = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o",
                     str(tmp_path / "b"), "--runs", "5")
    assert result.status == 0, result.stderr
    assert "(local)" in result.stdout and "p50" in result.stdout and "peak RSS" in result.stdout


def test_no_faithful_candidate_exits_1_and_deploy_refuses(tmp_path: Path) -> None:
    profile = tmp_path / "pi-tflite.yaml"
    profile.write_text("extends: rpi4\nid: pi-tflite\nruntimes: [tflite]\n")
    out = tmp_path / "strict.bundle"
    # No converted artifact reproduces fp32 ONNX Runtime bit for bit: cosine 1.0 on the logits
    # judged as plain values rejects all.
    result = run_cli("optimize", "sample:digits", "--profile", str(profile), "--min-cosine",
                     "1.0", "--metric", "*=values", "-o", str(out), "--json")
    assert result.status == 1, result.stderr
    document = result.json()
    assert document["chosen"] is None
    rejected = [c for c in document["candidates"] if c["status"] == "rejected"]
    converted = [c for c in document["candidates"] if c["artifact"]]
    assert len(rejected) == len(converted) >= 2
    assert all("cosine" in c["reason"] for c in rejected)
    deploy = run_cli("deploy", str(out), "--profile", str(profile))
    assert deploy.status == 1 and "no chosen candidate" in deploy.stderr


def test_x86_choice_is_measured_and_budget_rejects(tmp_path: Path) -> None:
    result = run_cli("optimize", "sample:digits", "--profile", "x86-64", "-o",
                     str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    doc = result.json()
    timed = {Candidate(**c["candidate"]).id: c["bench"]["p50_ms"]
             for c in doc["candidates"] if c["bench"]}
    assert len(timed) >= 3 and doc["chosen"] in timed
    # the figures the choice is made from: each candidate's median paired with the leader's in
    # the same interleaved rounds (a plain p50 moves with a load spike in its own blocks)
    paired = {s["candidate"]: s["paired_ms"] for s in (doc.get("contest") or {}).get(
        "standings", ())} or timed
    same = same_file(doc["candidates"], doc["chosen"]) & set(paired)
    assert min(paired[k] for k in same) <= min(paired.values()) * 1.10 + 1e-9
    assert "measured on this host" in doc["reason"]
    budget = min(timed.values()) / 100
    strict = run_cli("optimize", "sample:digits", "--profile", "x86-64", "-o",
                     str(tmp_path / "c"), "--latency-budget", str(budget), "--json")
    assert strict.status == 1
    assert all("--latency-budget" in c["reason"] for c in strict.json()["candidates"]
               if c["status"] == "rejected")


def test_bench_installs_without_activating(tmp_path: Path) -> None:
    out = tmp_path / "b"
    # --exhaustive: onnxruntime-fp32 (benched below) is converted too; the full rpi4 plan, where
    # LiteRT comes first by order, so it is never the one chosen (with onnxruntime alone, host
    # timings may keep the original, whose release is the same)
    deployed = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(out),
                       "--runs", "3", "--json", "--exhaustive")
    assert deployed.status == 0, deployed.stderr
    current = (Path(os.environ["EDGE_LOCAL_DEVICE"]) / ".edge" / "current").resolve()
    result = run_cli("bench", str(out), "--candidate", "onnxruntime-fp32", "--runs", "7",
                     "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    assert report["active"] is False and report["candidate"] == "onnxruntime-fp32"
    assert report["bench"]["runs"] == 7 and report["bench"]["runtime"] == "onnxruntime"
    assert (Path(os.environ["EDGE_LOCAL_DEVICE"]) / ".edge" / "current").resolve() == current
    again = run_cli("bench", str(out), "--runs", "3")  # the chosen one: the current release
    assert again.status == 0, again.stderr
    assert f"{deployed.json()['release']}  (active)" in again.stdout
    missing = run_cli("bench", str(out), "--candidate", "tflite-fp16")
    assert missing.status == 2 and "choose one of" in missing.stderr


def test_device_without_the_chosen_runtime_gets_the_next_faithful_one(tmp_path: Path) -> None:
    profile = tmp_path / "pixel-local.yaml"  # pixel-8 is reached over adb, which edge lacks
    profile.write_text("extends: pixel-8\nid: pixel-local\naccess: {transport: local}\n")
    # --exhaustive: the faithful candidates after nnapi-int8 are converted, to fall back on
    result = run_cli("deploy", "sample:digits", "--profile", str(profile), "-o",
                     str(tmp_path / "b"), "--runs", "3", "--json", "--exhaustive")
    assert result.status == 0, result.stderr
    report = result.json()
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["chosen"] == "nnapi-int8"  # NNAPI first for a Pixel 8
    assert report["candidate"] != "nnapi-int8"  # this machine has no NNAPI
    assert "no nnapi runtime" in report["reason"] and report["candidate"] in report["reason"]


def test_a_profile_file_extending_a_catalog_profile_keeps_its_power_estimate(
        tmp_path: Path) -> None:
    # issue 26: the deploy re-read the profile by its id ("rpi4-tmp", in no catalog), printed
    # "profile rpi4-tmp unavailable" and lost the power estimate
    profile = tmp_path / "rpi4-tmp.yaml"
    profile.write_text("extends: rpi4\nid: rpi4-tmp\npower: {idle_w: 2.5, max_w: 7.5}\n")
    result = run_cli("deploy", "sample:digits", "--profile", str(profile), "-o",
                     str(tmp_path / "b"), "--runs", "5", "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    assert report["profile"] == "rpi4-tmp"
    metrics = report["bench"]["metrics"]
    if metrics["power_source"].startswith("estimated"):  # no power sensor on this host
        threads = report["bench"]["threads"]
        assert metrics["power_w"] == pytest.approx(2.5 + 5.0 * min(1.0, threads / 4))
        assert metrics["power_source"] == ("estimated from the profile (2.5..7.5 W), "
                                           "not measured")
    assert metrics["power_w"] is not None
    assert "unavailable" not in result.stdout + result.stderr


def test_an_adb_profile_is_refused_in_one_line_before_any_work(tmp_path: Path) -> None:
    result = run_cli("deploy", "sample:digits", "--profile", "pixel-8", "-o",
                     str(tmp_path / "b"), "--runs", "3")
    assert result.status == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: access.transport 'adb' is not implemented yet")
    assert "--host" in lines[-1]
    assert not (tmp_path / "b").exists()


def test_measure_on_device_times_every_candidate_in_one_interleaved_bench(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devices.device import Device
    from edge.core.profile import load_profile
    from edge.core.settle import settle
    from edge.core.values import Bundle

    benches: list[tuple[str, ...]] = []
    real = Device.call

    def spy(self: Device, *args: str, timeout: float = 600.0) -> dict:
        if args[0] == "bench":
            benches.append(args)
        return real(self, *args, timeout=timeout)

    monkeypatch.setattr(Device, "call", spy)
    out = tmp_path / "b"
    result = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(out),
                     "--measure-on-device", "--runs", "6", "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    bundle = Bundle.from_json(json.loads((out / "manifest.json").read_text()))
    # every faithful artifact the local device's agent runs (this host: all but NNAPI's)
    runnable = {c.candidate.id for c in bundle.candidates if c.status in ("chosen", "passed")
                and c.artifact and c.artifact.runtime != "nnapi"}
    compared = {c["candidate"]: c["bench"] for c in report["compared"]}
    assert len(runnable) >= 4 and set(compared) == runnable
    # ONE agent bench over all of them (interleaved), more rounds of just the contenders while
    # the winner was not clear, then the chosen one's own bench
    together, *extra, alone = benches
    suffixes = artifact_suffixes()
    models = [a for a in together[1:] if a.endswith(suffixes)]
    assert len(models) == len(runnable) and "--rounds" in together
    assert len([a for a in alone[1:] if a.endswith(suffixes)]) == 1
    contest = report["contest"]
    assert bool(extra) == bool(contest["extra_rounds"]) and len(extra) <= 2
    for more in extra:
        assert len([a for a in more[1:] if a.endswith(suffixes)]) <= len(
            contest["contenders"]) < len(runnable)
    assert {b["runs"] for b in compared.values()} == {6}
    assert all(b["device"]["interleaved_rounds"] == 5 and b["peak_rss_mb"] is None
               for b in compared.values())
    # chosen by edge.core.select from the device's round medians, with its reason
    label = report["target"]
    rounds = {s["candidate"]: s["round_ms"] for s in contest["standings"]}
    assert set(rounds) == runnable
    assert all(rounds[k][:len(b["round_ms"])] == b["round_ms"] for k, b in compared.items())
    # each shown with the paired figure the choice compared (issue 41: like for like)
    paired = {s["candidate"]: s["paired_ms"] for s in contest["standings"]}
    assert {k: b["paired_ms"] for k, b in compared.items()} == paired
    choice, _, _ = settle(bundle.candidates, load_profile("rpi4").runtimes, rounds, None,
                          where=f"{label} in one interleaved bench")
    assert report["candidate"] == choice.id
    assert f"measured on {label} in one interleaved bench" in report["reason"]
    assert report["active"] and report["bench"]["peak_rss_mb"] > 10  # its own bench
    device_dir = Path(os.environ["EDGE_LOCAL_DEVICE"]).resolve()
    assert (device_dir / ".edge" / "current").resolve().name == report["release"]


def test_on_device_falls_back_to_one_by_one_when_the_device_cannot_hold_them_together(
        tmp_path: Path) -> None:
    """A device that kills the agent when it loads several models at once (as the OOM killer
    would on a small board): every candidate is then timed in its own agent process, the
    choice says so, and the deploy still succeeds."""
    import sys

    python = tmp_path / "python-small-board"
    python.write_text("#!/bin/sh\nmodels=0\nbench=0\nfor arg in \"$@\"; do\n"
                      "  case \"$arg\" in bench) bench=1;; *.onnx|*.tflite|*.xml) "
                      "models=$((models+1));; esac\ndone\n"
                      "if [ $bench = 1 ] && [ $models -gt 1 ]; then kill -9 $$; fi\n"
                      f"exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    result = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(tmp_path / "b"),
                     "--on-device", "--runs", "4", "--device-python", str(python), "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    assert len(report["compared"]) >= 4
    assert "one after another" in report["reason"]
    assert any("could not time the" in w and "together" in w for w in report["warnings"])
    assert report["active"]


def test_on_device_a_latency_budget_is_judged_by_the_devices_own_timings(
        tmp_path: Path) -> None:
    """rpi4 on this x86_64 host: optimize cannot judge the budget, the device's bench does."""
    current = Path(os.environ["EDGE_LOCAL_DEVICE"]).resolve() / ".edge" / "current"
    before = current.resolve() if current.exists() else None
    profile = one_runtime(tmp_path)  # one runtime's candidates: fp32 and lossier ones
    strict = run_cli("deploy", "sample:digits", "--profile", str(profile), "-o",
                     str(tmp_path / "a"), "--on-device", "--runs", "4", "--latency-budget",
                     "0.000001")
    assert strict.status == 1, strict.stderr
    assert "applies it to the device's own timings" in strict.stderr
    assert "no faithful candidate runs within --latency-budget 1e-06 ms on" in strict.stderr
    assert "nothing was activated" in strict.stderr
    assert (current.resolve() if current.exists() else None) == before
    loose = run_cli("deploy", "sample:digits", "--profile", str(profile), "-o", str(tmp_path / "b"),
                    "--on-device", "--runs", "4", "--latency-budget", "1000", "--json")
    assert loose.status == 0, loose.stderr
    report = loose.json()
    assert report["reason"].startswith("on the device, the budget leaves")
    assert "least fidelity loss within it is 0% of the allowance" in report["reason"]
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    used = {Candidate(**c["candidate"]).id: c["fidelity"]["allowance_used"]
            for c in manifest["candidates"] if c["status"] in ("passed", "chosen")}
    assert used[report["candidate"]] <= min(used.values()) + 0.1  # the least loss, within 10


def test_deploy_candidate_makes_a_second_release_to_roll_back_from(tmp_path: Path) -> None:
    # issue 42: tutorial section 8 needs a second release of the same model; --candidate
    # deploys another faithful candidate of the bundle as asked (no contest), rollback undoes it
    out = tmp_path / "digits.bundle"
    first = run_cli("deploy", "sample:digits", "--profile", "rpi4", "-o", str(out), "--runs",
                    "3", "--json")
    assert first.status == 0, first.stderr
    chosen = first.json()["candidate"]
    second = run_cli("deploy", str(out), "--candidate", "original", "--runs", "3", "--json")
    assert second.status == 0, second.stderr
    report = second.json()
    assert report["candidate"] == "original" != chosen
    assert report["release"] != first.json()["release"]
    assert report["reason"].startswith(f"asked for with --candidate original (the bundle chose "
                                       f"{chosen})")
    back = run_cli("rollback", "--json")
    assert back.status == 0, back.stderr
    assert back.json()["release"] == first.json()["release"]


@pytest.fixture(scope="module")
def rpi4_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One optimized sample bundle (and a fleet inventory beside it) for the refusals below."""
    out = tmp_path_factory.mktemp("refusals") / "digits.bundle"
    made = run_cli("optimize", "sample:digits", "--profile", "rpi4", "-o", str(out))
    assert made.status == 0, made.stderr
    (out.parent / "hosts.yml").write_text("all:\n  hosts:\n    a: {ansible_host: 192.0.2.1}\n")
    return out


@pytest.mark.parametrize(("flags", "words"), [
    (("--candidate", "tflite-fp99"), "has no such candidate (deployable: "),
    (("--candidate", "tflite-fp32"), "it was skipped: "),
    (("--candidate", "original", "--on-device"), "give one of them"),
    (("--candidate", "original", "--inventory", "hosts.yml"), "--candidate deploys to one"),
])
def test_a_bad_candidate_is_refused_before_connecting(rpi4_bundle: Path, flags: tuple[str, ...],
                                                      words: str) -> None:
    flags = tuple(str(rpi4_bundle.parent / f) if f == "hosts.yml" else f for f in flags)
    result = run_cli("deploy", str(rpi4_bundle), "--host", "pi@192.0.2.1", *flags)
    assert result.status == 2, result.stderr
    assert words in result.stderr and result.stderr.count("\n") == 1
