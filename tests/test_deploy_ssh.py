"""edge deploy over SSH to a real OpenSSH sshd on 127.0.0.1, measured by the agent there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import run_edge
from tests.support.digits import DigitsModel
from tests.support.profiles import one_runtime, same_file
from tests.support.sshd import SSHDevice

pytestmark = pytest.mark.slow


def _deploy_args(model: DigitsModel, device: SSHDevice, out: Path, *extra: str) -> list[str]:
    return ["deploy", str(model.onnx), "--profile", "rpi4", "--host", device.target,
            "--identity", str(device.identity), "--known-hosts", str(device.known_hosts),
            "--device-python", device.python, "--calib", str(model.calib),
            "--eval", str(model.eval), "-o", str(out), "--runs", "30", *extra]


@pytest.fixture  # per test: other tests here deploy to the same device (any order)
def deployed(digits: DigitsModel, ssh_device: SSHDevice, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("deploy") / "digits-rpi4.bundle"
    # the bundle's choice, measured alone (the default measures every candidate there:
    # tests/devices/test_deploy_choice.py); --exhaustive: every candidate converted, as the
    # tests below check, bench and compare the ones not chosen
    result = run_edge(*_deploy_args(digits, ssh_device, out), "--no-on-device", "--json",
                      "--exhaustive")
    assert result.status == 0, result.stderr
    return result.json(), out


def test_report_is_measured_on_the_device(deployed, ssh_device: SSHDevice) -> None:
    report, _ = deployed
    bench = report["bench"]
    assert report["transport"] == "ssh"
    assert report["target"] == f"ssh://{ssh_device.target}"
    assert bench["runs"] == 30 and bench["warmup"] == 5
    assert 0 < bench["p50_ms"] <= bench["p90_ms"] <= bench["p99_ms"]
    assert bench["mean_ms"] > 0 and bench["load_ms"] > 0 and bench["peak_rss_mb"] > 10
    # The agent ran under the device's own python (Debian's 3.11.x venv, not this pytest's).
    device_version = subprocess.run(
        [ssh_device.python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert bench["device"]["python"] == device_version
    assert bench["device"]["machine"] and bench["device"]["cpu"]
    assert bench["device"]["runtime_version"] == "2.3.0"  # ai-edge-litert on the device


def test_release_is_installed_and_active_on_the_device(deployed, ssh_device: SSHDevice) -> None:
    report, _ = deployed
    work = ssh_device.home / ".edge"
    release = work / "releases" / report["release"]
    model = release / "model.tflite"
    assert model.is_file()
    assert (work / "current").resolve() == release.resolve()
    assert model.owner() == ssh_device.user
    assert not list((work / "incoming").iterdir())  # no partial upload left behind


def test_int8_keeps_accuracy_on_held_out_digits(deployed, digits: DigitsModel) -> None:
    report, bundle = deployed
    import json

    manifest = json.loads((bundle / "manifest.json").read_text())
    assert report["candidate"] == manifest["chosen"] == "tflite-int8"
    data = np.load(digits.eval)
    fp32 = _accuracy_onnx(digits.onnx, data)
    assert fp32 == pytest.approx(digits.float_accuracy)
    checked = []
    for result in manifest["candidates"]:
        if result["candidate"]["precision"] != "int8" or result["artifact"] is None:
            continue  # a mixed plan is not made for an aarch64 device from this host's times
        if result["artifact"]["runtime"] not in ("tflite", "onnxruntime"):
            continue  # ExecuTorch's .pte: its own tests check it against the reference
        checked.append(result["candidate"]["target"])
        artifact = bundle / result["artifact"]["file"]
        accuracy = (_accuracy_tflite(artifact, data) if artifact.suffix == ".tflite"
                    else _accuracy_onnx(artifact, data))
        assert fp32 - accuracy <= 0.01, (result["candidate"], fp32, accuracy)
        assert result["fidelity"]["accuracy"] == pytest.approx(accuracy)
    assert {"tflite", "onnxruntime"} <= set(checked), checked


def _accuracy_onnx(path: Path, data) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    preds = [int(np.argmax(session.run(None, {"input": x[None]})[0])) for x in data["input"]]
    return float(np.mean(np.array(preds) == data["labels"]))


def _accuracy_tflite(path: Path, data) -> float:
    """Independent of edge's runner: NHWC input, int8 internals, float I/O."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    assert any(t["dtype"] == np.int8 for t in interpreter.get_tensor_details())
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    preds = []
    for x in data["input"]:
        interpreter.set_tensor(inp["index"], x.transpose(1, 2, 0)[None].astype(np.float32))
        interpreter.invoke()
        preds.append(int(np.argmax(interpreter.get_tensor(out["index"]))))
    return float(np.mean(np.array(preds) == data["labels"]))


def test_redeploy_of_bundle_reuses_release(deployed, ssh_device: SSHDevice) -> None:
    report, bundle = deployed
    result = run_edge("deploy", str(bundle), "--host", ssh_device.target, "--identity",
                      str(ssh_device.identity), "--known-hosts", str(ssh_device.known_hosts),
                      "--device-python", ssh_device.python, "--runs", "5", "--no-on-device",
                      "--json")
    assert result.status == 0, result.stderr
    assert result.json()["release"] == report["release"]


@pytest.mark.parametrize("case", ["unknown-host", "changed-host-key", "wrong-identity"])
def test_transport_failures_are_one_line_and_write_nothing(
    case: str, digits: DigitsModel, ssh_device: SSHDevice, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    identity, known = {
        "unknown-host": (ssh_device.identity, empty),
        "changed-host-key": (ssh_device.identity, ssh_device.changed_known_hosts),
        "wrong-identity": (ssh_device.wrong_identity, ssh_device.known_hosts),
    }[case]
    releases = _device_releases(ssh_device)
    out = tmp_path / "bundle"
    args = _deploy_args(digits, ssh_device, out)
    args[args.index("--identity") + 1] = str(identity)
    args[args.index("--known-hosts") + 1] = str(known)
    result = run_edge(*args)
    assert result.status == 3, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    expected = {"unknown-host": "unknown host key", "changed-host-key": "does not match",
                "wrong-identity": "authentication failed"}[case]
    assert result.stderr.startswith("error: ") and expected in result.stderr
    assert not out.exists()
    assert _device_releases(ssh_device) == releases
    assert empty.read_text() == ""  # an unknown key is never recorded without --trust-new-host


def test_trust_new_host_records_the_key(ssh_device: SSHDevice, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    result = run_edge("deploy", "sample:digits", "--profile", str(one_runtime(tmp_path)),
                      "--host", ssh_device.target, "--identity", str(ssh_device.identity),
                      "--known-hosts", str(known), "--trust-new-host", "--device-python",
                      ssh_device.python, "--runs", "3", "-o", str(tmp_path / "b"), "--json")
    assert result.status == 0, result.stderr
    assert "trusted new host key" in result.stderr
    recorded = known.read_text().split()
    expected = ssh_device.known_hosts.read_text().split()
    assert recorded[:3] == expected[:3]  # [127.0.0.1]:PORT ssh-ed25519 AAAA...


def _device_releases(device: SSHDevice) -> list[str]:
    root = device.home / ".edge" / "releases"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_bench_measures_another_candidate_on_the_device(deployed, ssh_device: SSHDevice) -> None:
    _, bundle = deployed
    work = ssh_device.home / ".edge"
    current = (work / "current").resolve().name  # other tests of this device deploy too
    result = run_edge("bench", str(bundle), "--candidate", "onnxruntime-int8", "--host",
                      ssh_device.target, "--identity", str(ssh_device.identity),
                      "--known-hosts", str(ssh_device.known_hosts), "--device-python",
                      ssh_device.python, "--runs", "9", "--json")
    assert result.status == 0, result.stderr
    measured = result.json()
    assert measured["active"] is False and measured["bench"]["runtime"] == "onnxruntime"
    assert measured["bench"]["runs"] == 9
    assert (work / "releases" / measured["release"] / "model.onnx").is_file()
    assert (work / "current").resolve().name == current  # bench never switches


def test_measure_on_device_compares_every_faithful_candidate(deployed,
                                                             ssh_device: SSHDevice) -> None:
    _, bundle = deployed
    result = run_edge("deploy", str(bundle), "--on-device", "--host", ssh_device.target,
                      "--identity", str(ssh_device.identity), "--known-hosts",
                      str(ssh_device.known_hosts), "--device-python", ssh_device.python,
                      "--runs", "15", "--json")
    assert result.status == 0, result.stderr
    report = result.json()
    compared = {c["candidate"]: c["bench"]["p50_ms"] for c in report["compared"]}
    assert {"tflite-int8", "tflite-fp32", "onnxruntime-int8", "onnxruntime-fp32"} <= set(compared)
    # chosen from the device's rounds (paired round medians, settled by more rounds of the
    # contenders while unclear): within the 10 % tie band of the fastest by those figures
    paired = {s["candidate"]: s["paired_ms"] for s in report["contest"]["standings"]}
    assert set(paired) == set(compared)
    manifest = json.loads((bundle / "manifest.json").read_text())
    same = same_file(manifest["candidates"], report["candidate"]) & set(paired)
    assert min(paired[k] for k in same) <= min(paired.values()) * 1.10 + 1e-9, report["contest"]
    assert all(c["bench"]["where"] == f"ssh://{ssh_device.target}" for c in report["compared"])
    assert (ssh_device.home / ".edge" / "current").resolve().name == report["release"]


def test_a_user_profile_names_its_device(ssh_device: SSHDevice, tmp_path: Path) -> None:
    profile = tmp_path / "my-pi.yaml"
    profile.write_text(
        "extends: rpi4\nid: my-pi\naccelerators: []\nruntimes: [onnxruntime]\naccess:\n"
        f"  host: {ssh_device.host}\n  port: {ssh_device.port}\n  user: {ssh_device.user}\n"
        f"  python: {ssh_device.python}\n  work_dir: ~/.edge-my-pi\n")
    result = run_edge("deploy", "sample:digits", "--profile", str(profile), "--identity",
                      str(ssh_device.identity), "--known-hosts", str(ssh_device.known_hosts),
                      "-o", str(tmp_path / "b"), "--runs", "3", "--no-on-device", "--json",
                      "--exhaustive")  # onnxruntime-fp32, benched below, is converted too
    assert result.status == 0, result.stderr
    report = result.json()
    assert report["target"] == f"ssh://{ssh_device.target}" and report["profile"] == "my-pi"
    assert (ssh_device.home / ".edge-my-pi" / "current").is_symlink()
    # The bundle keeps the user profile's numbers; how to reach the device comes from the
    # profile file or the command line, never from a bundle (issue 14).
    again = run_edge("deploy", str(tmp_path / "b"), "--profile", str(profile), "--identity",
                     str(ssh_device.identity), "--known-hosts", str(ssh_device.known_hosts),
                     "--runs", "3", "--no-on-device", "--json")
    assert again.status == 0, again.stderr
    assert again.json()["release"] == report["release"]
    measured = run_edge("bench", str(tmp_path / "b"), "--candidate", "onnxruntime-fp32",
                        "--profile", str(profile), "--identity", str(ssh_device.identity),
                        "--known-hosts",
                        str(ssh_device.known_hosts), "--runs", "3", "--json")
    assert measured.status == 0, measured.stderr
    assert measured.json()["target"] == f"ssh://{ssh_device.target}"


FIXTURES = Path(__file__).parent / "fixtures"


def test_three_models_on_one_device_apart(ssh_device: SSHDevice, digits: DigitsModel,
                                          tmp_path: Path) -> None:
    """The sshd device holds three models at once, each in its slot (the first in the work
    dir's own): a deploy, a rollback and a bench of one leave the others where they were."""
    profile = tmp_path / "three.yaml"
    profile.write_text(
        "extends: rpi4\nid: three\naccelerators: []\nruntimes: [onnxruntime, tflite]\n"
        f"access:\n  host: {ssh_device.host}\n  port: {ssh_device.port}\n"
        f"  user: {ssh_device.user}\n  python: {ssh_device.python}\n  work_dir: ~/.edge-three\n")
    access = ["--profile", str(profile), "--identity", str(ssh_device.identity),
              "--known-hosts", str(ssh_device.known_hosts)]
    work = ssh_device.home / ".edge-three"

    def deploy(source: Path | str, *extra: str) -> dict:
        done = run_edge("deploy", str(source), *access, "--runs", "3", "--no-on-device",
                        "--json", *extra)
        assert done.status == 0, done.stderr
        return done.json()

    def currents() -> dict[str, str]:
        listed = run_edge("releases", *access, "--json")
        assert listed.status == 0, listed.stderr
        return {s["name"]: s["active"] for s in listed.json()["slots"]}

    sample = deploy(FIXTURES / "edge-0.2" / "x86.bundle")  # the shipped digits: "digits"
    tiny = deploy(FIXTURES / "edge-0.1" / "tiny.bundle")
    other = deploy(digits.onnx, "--calib", str(digits.calib), "--eval", str(digits.eval),
                   "-o", str(tmp_path / "kws.bundle"), "--name", "kws")
    before = {"digits": sample["release"], "tiny": tiny["release"], "kws": other["release"]}
    assert currents() == before
    assert (work / "current").resolve().name == sample["release"]  # the first model's
    assert (work / "slots" / "tiny" / "current").resolve().name == tiny["release"]
    assert (work / "slots" / "kws" / "current").resolve().name == other["release"]
    assert (work / "slots" / "kws" / "current").resolve().owner() == ssh_device.user

    swapped = deploy(tmp_path / "kws.bundle", "--name", "tiny")  # tiny's slot, another model
    assert swapped["bytes_sent"] == 0 and currents() == before | {"tiny": other["release"]}
    back = run_edge("rollback", "--name", "tiny", *access, "--json")
    assert back.status == 0 and back.json()["release"] == tiny["release"], back.stderr
    assert currents() == before
    measured = run_edge("bench", str(FIXTURES / "edge-0.2" / "x86.bundle"), "--candidate",
                        "onnxruntime-int8", "--name", "digits", *access, "--runs", "3",
                        "--json")
    assert measured.status == 0 and measured.json()["active"] is False, measured.stderr
    assert currents() == before
