"""Offline runtime provisioning, and an ARM board that gets a runnable artifact and runtime.

The device is Debian bookworm arm64 under qemu-user (tests/support/arm_device.py): python3,
no numpy, no runtime, and a network namespace with only loopback, so no internet. The host
fetches aarch64 wheels, provisioning installs onnxruntime into a venv on the device, and the
agent health-checks and benchmarks the int8 artifact of a digits bundle there; its predictions
on held-out digits match the host's fp32 model. Emulation proves compatibility, not speed.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from devices import provision
from devices.provision import NUMPY, PIP, ProvisionReport, parse_platform
from devices.transport import Completed
from edge.core.errors import DeviceError, UsageError
from edge.core.model import sha256_file
from targets.provision import provision_runtime, provisionable, runtime_for_bundle
from tests.support.digits import DigitsModel

ROOT = Path(__file__).resolve().parents[1]


def _requirements(runtime: str) -> tuple[str, ...]:
    """What provisioning installs for a runtime: its folder's pins, and numpy."""
    return (*provisionable()[runtime].requirements, NUMPY)

PI_FACTS = {"machine": "aarch64", "system": "Linux", "libc": "glibc 2.36", "bits": 64,
            "python": "3.11.2", "implementation": "cpython", "executable": "/usr/bin/python3",
            "prefix": "/usr", "base_prefix": "/usr", "venv": True}


# ---------------------------------------------------------------- fast: no device


def test_pins_match_the_project() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = set(deps["dependencies"]) | set(deps["optional-dependencies"]["tflite"])
    assert set(_requirements("onnxruntime")) <= pins | {NUMPY}
    assert "ai-edge-litert==2.3.0" in pins and _requirements("tflite")[0] == "ai-edge-litert==2.3.0"
    assert "numpy>=2.4,<2.5" in pins and NUMPY == "numpy>=2.4,<2.5"
    assert PIP.startswith("pip==")


def test_platform_tags_of_a_raspberry_pi() -> None:
    platform = parse_platform(PI_FACTS)
    assert platform.tag == "cp311-manylinux_2_36_aarch64"
    assert platform.python_version == "3.11" and platform.python_tag == "cp311"
    tags = platform.platforms()
    assert tags[0] == "manylinux_2_36_aarch64" and tags[-1] == "manylinux2014_aarch64"
    assert "manylinux_2_28_aarch64" in tags and "manylinux_2_16_aarch64" not in tags
    x86 = parse_platform({**PI_FACTS, "machine": "x86_64", "libc": "glibc 2.31"}).platforms()
    assert x86[-1] == "manylinux1_x86_64" and "manylinux2010_x86_64" in x86


@pytest.mark.parametrize("facts, expected", [
    ({"libc": ""}, "glibc"),
    ({"system": "Windows"}, "Linux"),
    ({"implementation": "pypy"}, "CPython"),
    ({"machine": "mips"}, "not supported"),
])
def test_unsupported_devices_fail_in_one_line(facts: dict, expected: str) -> None:
    with pytest.raises(DeviceError) as info:
        parse_platform({**PI_FACTS, **facts}, "ssh://pi@pi:22")
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_32_bit_userland_on_a_64_bit_kernel_is_armv7l() -> None:
    assert parse_platform({**PI_FACTS, "bits": 32}).arch == "armv7l"


def test_unknown_runtime_is_a_usage_error() -> None:
    with pytest.raises(UsageError,
                       match="cannot provision runtime 'tensorrt': choose one of .*onnxruntime"):
        provision_runtime(_FakeDevice(), device_python="python3", work_dir="~/.edge",
                          runtime="tensorrt")


def test_missing_venv_module_names_the_apt_package(tmp_path: Path) -> None:
    cache = _fake_cache(tmp_path, "onnxruntime")
    device = _FakeDevice(venv_error="/usr/bin/python3: No module named venv")
    with pytest.raises(DeviceError) as info:
        provision_runtime(device, device_python="python3", work_dir="~/.edge",
                          runtime="onnxruntime", host_cache=cache)
    message = str(info.value)
    assert "\n" not in message and "apt-get install python3-venv" in message
    assert len(device.puts) == 2  # both wheels were uploaded before the venv step
    venv = [argv for argv in device.runs if argv[1:3] == ["-m", "venv"]]
    assert venv == [["python3", "-m", "venv", "--clear", "--without-pip",
                     "/home/pi/.edge/venv"]]


def test_wheels_are_uploaded_checked_and_installed_without_an_index(tmp_path: Path) -> None:
    cache = _fake_cache(tmp_path, "onnxruntime")
    device = _FakeDevice()
    report = provision_runtime(device, device_python="/usr/bin/python3", work_dir="~/.edge",
                               runtime="onnxruntime", host_cache=cache)
    assert report.python == "/home/pi/.edge/venv/bin/python" and report.installed
    assert report.downloaded is False and report.files_sent == 2
    pip = next(argv for argv in device.runs if "install" in argv)
    assert pip[0] == report.python and pip[2] == provision._PIP
    assert pip[3] == "/home/pi/.edge/wheels/pip-26.3-py3-none-any.whl"
    assert "--no-index" in pip and pip[pip.index("--find-links") + 1] == "/home/pi/.edge/wheels"
    assert "--no-deps" not in pip  # a runtime's dependencies come with it unless it says no
    assert not any(a.startswith(("http:", "https:", "--index-url")) for a in pip)
    every_argv = [a for argv in device.runs for a in argv]
    assert not any(a in ("sh", "bash", "/bin/sh") for a in every_argv)  # no shell, ever


def test_a_no_deps_set_is_cached_apart_and_installed_without_dependencies(
        tmp_path: Path) -> None:
    cache = _fake_cache(tmp_path, "onnxruntime", no_deps=True)
    device = _FakeDevice()
    report = provision.install_runtime(
        device, device_python="/usr/bin/python3", work_dir="~/.edge", runtime="onnxruntime",
        requirements=provisionable()["onnxruntime"].requirements, module="onnxruntime",
        distribution="onnxruntime", host_cache=cache, no_deps=True)
    assert report.downloaded is False and report.installed  # from the no-deps manifest
    pip = next(argv for argv in device.runs if "install" in argv)
    assert "--no-deps" in pip and "--no-index" in pip


@pytest.mark.slow
def test_a_no_deps_fetch_gets_only_the_listed_wheels(tmp_path: Path) -> None:
    """A real pip download (the index, as the board's provisioning uses) for the Pi's
    platform: requests alone, none of its dependencies."""
    folder, wheels, downloaded = provision.fetch_wheels(
        parse_platform(PI_FACTS), ["requests==2.34.2"], cache=tmp_path, no_deps=True)
    assert downloaded and list(wheels) == ["requests-2.34.2-py3-none-any.whl"]
    (manifest,) = folder.glob("manifest-*.json")
    assert json.loads(manifest.read_text())["no_deps"] is True
    again = provision.fetch_wheels(parse_platform(PI_FACTS), ["requests==2.34.2"],
                                   cache=tmp_path, no_deps=True)
    assert again[2] is False  # cached: the manifest answers


def test_runtime_for_bundle_prefers_the_chosen_provisionable_runtime() -> None:
    def result(cid: str, runtime: str, status: str = "passed") -> SimpleNamespace:
        return SimpleNamespace(candidate=SimpleNamespace(id=cid), status=status,
                               artifact=SimpleNamespace(runtime=runtime))

    ov, ort = result("openvino-int8", "openvino", "chosen"), result("onnxruntime-int8",
                                                                    "onnxruntime")
    bundle = SimpleNamespace(candidates=[ov, ort], chosen_result=lambda: ov)
    assert runtime_for_bundle(bundle) == "onnxruntime"
    tfl = result("tflite-int8", "tflite", "chosen")
    bundle = SimpleNamespace(candidates=[tfl, ort], chosen_result=lambda: tfl)
    assert runtime_for_bundle(bundle) == "tflite"
    assert runtime_for_bundle(bundle, runtimes={"onnxruntime"}) == "onnxruntime"


def _fake_cache(root: Path, runtime: str, *, no_deps: bool = False) -> Path:
    """A host cache whose manifest already lists (fake) wheels: no pip download."""
    platform = parse_platform(PI_FACTS)
    folder = root / platform.tag
    folder.mkdir(parents=True)
    names = ("onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_aarch64.whl",
             "pip-26.3-py3-none-any.whl")
    wheels = {}
    for name in names:
        (folder / name).write_bytes(name.encode())
        wheels[name] = sha256_file(folder / name)
    requirements = (*_requirements(runtime), PIP)
    listed = sorted(requirements) + (["--no-deps"] if no_deps else [])
    key = provision.hashlib.sha256("\n".join(listed).encode()).hexdigest()[:16]
    (folder / f"manifest-{key}.json").write_text(json.dumps(
        {"requirements": sorted(requirements), "wheels": wheels, "no_deps": no_deps}))
    return root


class _FakeDevice:
    """Answers provisioning's fixed programs like a Raspberry Pi with python3 would."""

    label = "ssh://pi@pi:22"
    is_local = False

    def __init__(self, venv_error: str | None = None) -> None:
        self.venv_error = venv_error
        self.runs: list[list[str]] = []
        self.puts: list[tuple[Path, str]] = []
        self.files: set[str] = set()

    def home(self) -> str:
        return "/home/pi"

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        self.runs.append(list(argv))
        program = argv[2] if len(argv) > 2 else ""
        if program == provision._FACTS:
            return _ok(PI_FACTS)
        if program == provision._HASHES:
            return _ok({name: None for name in argv[4:]})
        if program == provision._MOVE:
            return _ok({"bad": []})
        if argv[1:3] == ["-m", "venv"]:
            if self.venv_error:
                return Completed(status=1, stdout="", stderr=self.venv_error + "\n")
            self.files.add(argv[-1] + "/bin/python")
            return Completed(status=0, stdout="", stderr="")
        if program == provision._READ:
            return _ok({})
        if program == provision._CHECK:
            return _ok({"version": "1.31.1", "numpy": "2.4.6", "python": "3.11.2",
                        "machine": "aarch64"})
        return Completed(status=0, stdout="", stderr="")

    def put(self, local: Path, remote: str) -> None:
        self.puts.append((local, remote))

    def exists(self, remote: str) -> bool:
        return remote in self.files

    def mkdir(self, remote: str) -> None:
        pass

    def close(self) -> None:
        pass


def _ok(reply: dict) -> Completed:
    return Completed(status=0, stdout=json.dumps(reply) + "\n", stderr="")


# ---------------------------------------------------------------- slow: the aarch64 device

NO_NETWORK = """\
import json, socket
routes = open("/proc/net/route").read().splitlines()[1:]
links = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
try:
    socket.create_connection(("151.101.0.223", 443), timeout=5).close()  # pypi.org
    reach = "connected"
except OSError as exc:
    reach = type(exc).__name__ + ": " + str(exc)
print(json.dumps({"routes": routes, "links": links, "reach": reach}))
"""

PREDICT = """\
import json, platform, sys
import numpy as np
import onnxruntime as ort
model, data = sys.argv[1], np.load(sys.argv[2])
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
preds = [int(np.argmax(session.run(None, {name: x[None]})[0])) for x in data["input"]]
print(json.dumps({"preds": preds, "machine": platform.machine(),
                  "onnxruntime": ort.__version__, "providers": session.get_providers()}))
"""




def _device_json(transport, argv: list[str], timeout: float = 600) -> dict:
    done = transport.run(argv, timeout=timeout)
    assert done.status == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_offline(transport, python: str) -> None:
    net = _device_json(transport, [python, "-c", NO_NETWORK])
    assert net["routes"] == [] and net["links"] == ["lo"], net
    assert "unreachable" in net["reach"].lower(), net


@pytest.mark.slow
def test_device_is_aarch64_with_no_runtime_and_no_network(arm_device, transport) -> None:
    assert transport.run(["uname", "-m"]).stdout.strip() == "aarch64"
    done = transport.run([arm_device.python, "-c", "import platform; print(platform.machine())"])
    assert done.stdout.strip() == "aarch64"
    for module in ("numpy", "onnxruntime", "ai_edge_litert", "pip"):
        missing = transport.run([arm_device.python, "-c", f"import {module}"])
        assert missing.status != 0 and "ModuleNotFoundError" in missing.stderr, module
    _assert_offline(transport, arm_device.python)


@pytest.mark.slow
def test_provisioning_installs_onnxruntime_from_host_fetched_wheels(
    provisioned: ProvisionReport, arm_device, transport, wheel_cache: Path
) -> None:
    report = provisioned
    assert report.python == "/home/edgeuser/.edge/venv/bin/python"
    assert report.platform.arch == "aarch64" and report.platform.python.startswith("3.11.")
    assert report.platform.tag == "cp311-manylinux_2_36_aarch64"
    assert report.runtime_version == "1.31.1" and report.installed and report.venv_created
    assert report.cache == str(wheel_cache / report.platform.tag)
    ort_wheel = next(w for w in report.wheels if w.startswith("onnxruntime-"))
    assert ort_wheel.endswith("aarch64.whl") and any(w.startswith("numpy-") for w in report.wheels)
    assert report.files_sent == len(report.wheels) and report.files_reused == 0  # a new device
    for name in report.wheels:  # what the device holds is byte for byte what the host fetched
        on_device = arm_device.device_path(f"/home/edgeuser/.edge/wheels/{name}")
        assert on_device.read_bytes() == (Path(report.cache) / name).read_bytes()
    check = _device_json(transport, [report.python, "-c", provision._CHECK, "onnxruntime",
                                     "onnxruntime"])
    assert check["machine"] == "aarch64" and check["version"] == "1.31.1"
    assert check["numpy"].startswith("2.4.")
    # Only the venv has it: the system python is untouched. And the device was offline all
    # along, so every byte came from the host.
    done = transport.run([arm_device.python, "-c", "import onnxruntime"])
    assert done.status != 0
    _assert_offline(transport, report.python)
    assert report.to_json()["platform"]["arch"] == "aarch64"


@pytest.mark.slow
def test_provisioning_again_sends_and_installs_nothing(
    provisioned: ProvisionReport, arm_device, transport, wheel_cache: Path
) -> None:
    again = provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                              runtime="onnxruntime", host_cache=wheel_cache)
    assert again.python == provisioned.python and again.downloaded is False
    assert again.files_sent == 0 and again.files_reused == len(provisioned.wheels)
    assert not again.installed and not again.venv_created
    assert again.runtime_version == "1.31.1"


@pytest.mark.slow
def test_int8_artifact_runs_on_the_aarch64_device(
    provisioned: ProvisionReport, arm_bundle: Path, transport, arm_device, digits: DigitsModel
) -> None:
    from devices.deploy import measure_on_device
    from devices.device import open_device
    from devices.measure import Rounds
    from edge.core.bundle import read_bundle
    from edge.core.profile import load_profile

    manifest = read_bundle(arm_bundle)
    result = next(c for c in manifest.candidates if c.candidate.id == "onnxruntime-int8")
    assert result.status in ("chosen", "passed") and result.artifact is not None
    artifact = result.artifact
    assert _is_int8(arm_bundle / artifact.file)

    device = open_device(transport, python=provisioned.python, work_dir="~/.edge")
    assert "onnxruntime" in device.runtimes
    profile = load_profile(arm_bundle.parent / "rpi4-onnx.yaml")  # the bundle's own profile
    report = measure_on_device(device, arm_bundle, artifact, profile=profile,
                               rounds=Rounds(calls=5, warmup=1), threads=1, activate=True)
    assert report.active and report.candidate == "onnxruntime-int8"
    bench = report.bench
    assert bench.runtime == "onnxruntime" and bench.runs == 5 and bench.p50_ms > 0
    assert bench.device["machine"] == "aarch64" and bench.device["runtime_version"] == "1.31.1"
    # what ran, said by ONNX Runtime on the board through the agent (issue 43): every node on
    # the CPU, the convolutions' MACs in int8
    assert bench.observed is not None and bench.observed.observable, bench.observed
    assert {layer.unit for layer in bench.observed.layers} == {"CPU"}
    assert bench.observed.share_of(precision="f32") < 0.5
    assert bench.observed.planned == "int8" and bench.fell_back is None  # int8 as planned
    release = f"/home/edgeuser/.edge/releases/{report.release}"
    assert arm_device.device_path(f"{release}/model.onnx").read_bytes() == \
        (arm_bundle / artifact.file).read_bytes()
    # the release on the board keeps what ran it, with the versions (issue 43)
    kept = json.loads(arm_device.device_path(f"{release}/observed.json").read_text())
    assert kept["runtime_version"] == "1.31.1" and kept["observed"]["layers"]
    assert kept["observed"]["versions"] == {"onnxruntime": "1.31.1"}

    # Its outputs are right: the held-out digits, predicted ON the aarch64 device.
    eval_remote = "/home/edgeuser/.edge/digits_eval.npz"
    transport.put(digits.eval, eval_remote)
    predicted = _device_json(transport, [provisioned.python, "-c", PREDICT,
                                         f"{release}/model.onnx", eval_remote])
    assert predicted["machine"] == "aarch64" and predicted["onnxruntime"] == "1.31.1"
    data = np.load(digits.eval)
    device_preds = np.array(predicted["preds"])
    device_accuracy = float(np.mean(device_preds == data["labels"]))
    host_fp32 = _host_predictions(digits.onnx, data)
    host_int8 = _host_predictions(arm_bundle / artifact.file, data)
    fp32_accuracy = float(np.mean(host_fp32 == data["labels"]))
    assert fp32_accuracy == pytest.approx(digits.float_accuracy)
    assert abs(fp32_accuracy - device_accuracy) <= 0.02, (fp32_accuracy, device_accuracy)
    assert np.mean(device_preds == host_int8) >= 0.99  # ARM and x86 int8 kernels agree
    assert result.fidelity is not None


def _host_predictions(model: Path, data) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.array([int(np.argmax(session.run(None, {name: x[None]})[0]))
                     for x in data["input"]])


def _is_int8(model: Path) -> bool:
    import onnx

    graph = onnx.load(str(model)).graph
    ops = {node.op_type for node in graph.node}
    int8 = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}
    return bool(ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger"}) and \
        any(t.data_type in int8 for t in graph.initializer)


@pytest.mark.slow
def test_tflite_is_provisioned_into_the_same_venv(
    provisioned: ProvisionReport, arm_device, transport, wheel_cache: Path
) -> None:
    from devices.device import open_device

    report = provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                               runtime="tflite", host_cache=wheel_cache)
    assert report.python == provisioned.python and not report.venv_created
    assert report.runtime_version == "2.3.0" and report.installed
    litert = next(w for w in report.wheels if w.startswith("ai_edge_litert-"))
    assert litert.endswith("aarch64.whl")
    shared = set(report.wheels) & set(provisioned.wheels)  # numpy, pip...: not sent again
    assert shared and report.files_reused >= len(shared)
    device = open_device(transport, python=report.python, work_dir="~/.edge")
    assert {"onnxruntime", "tflite"} <= device.runtimes


@pytest.mark.slow
def test_a_missing_device_python_is_one_line(transport, wheel_cache: Path) -> None:
    with pytest.raises(DeviceError) as info:
        provision_runtime(transport, device_python="/usr/bin/python9", work_dir="~/.edge",
                          runtime="onnxruntime", host_cache=wheel_cache)
    message = str(info.value)
    assert "\n" not in message and "/usr/bin/python9" in message, message


@pytest.mark.slow
def test_three_models_on_the_aarch64_device_apart(
    provisioned: ProvisionReport, arm_bundle: Path, transport, arm_device
) -> None:
    """The emulated board holds three models at once, each in its slot: a deploy, a rollback
    and a bench of one leave the others' current releases where they were."""
    from devices.deploy import deploy_artifact, measure_on_device
    from devices.device import open_device
    from devices.measure import Rounds
    from devices.release import activate_release, list_releases, rollback
    from edge.core.bundle import read_bundle
    from edge.core.profile import load_profile

    tiny_root = Path(__file__).parent / "fixtures" / "edge-0.1" / "tiny.bundle"
    digits, tiny = read_bundle(arm_bundle), read_bundle(tiny_root)

    def artifact(bundle, candidate: str):
        found = next(c for c in bundle.candidates if c.candidate.id == candidate)
        assert found.artifact is not None
        return found.artifact

    work = "~/.edge-three"
    device = open_device(transport, python=provisioned.python, work_dir=work)
    profile = load_profile(arm_bundle.parent / "rpi4-onnx.yaml")
    plan = [(arm_bundle, artifact(digits, "onnxruntime-int8"), "digits"),
            (tiny_root, artifact(tiny, "onnxruntime-int8"), "tiny"),
            (arm_bundle, artifact(digits, "onnxruntime-fp32"), "kws")]
    for root, art, name in plan:
        done = deploy_artifact(device, root, art, profile=profile, name=name,
                               rounds=Rounds(calls=3, warmup=1), threads=1)
        assert done.report.name == name and done.report.active
    # digits' second release: kws's, already installed and checked there (a switch is enough)
    activate_release(device, plan[2][1].release_id[:16], "onnxruntime-fp32", "digits")
    plan.append((arm_bundle, plan[2][1], "digits"))
    listed = list_releases(transport, python=provisioned.python, work_dir=work)
    slots = {s.name: s.active for s in listed.slots}
    rel = {name: art.release_id[:16] for _, art, name in plan}
    assert listed.name is None and slots == rel
    back = rollback(transport, python=provisioned.python, work_dir=work, name="digits")
    assert back.changed and back.release == plan[0][1].release_id[:16]
    listed = list_releases(transport, python=provisioned.python, work_dir=work, name="tiny")
    assert {s.name: s.active for s in listed.slots} == rel | {"digits": back.release}
    assert listed.active == rel["tiny"] and listed.previous is None
    measured = measure_on_device(device, tiny_root, plan[1][1], profile=profile,
                                 rounds=Rounds(calls=3, warmup=1), threads=1, activate=False,
                                 name="tiny")  # bench one: nothing switches
    assert measured.active and measured.bench.p50_ms > 0
    listed = list_releases(transport, python=provisioned.python, work_dir=work)
    assert {s.name: s.active for s in listed.slots} == rel | {"digits": back.release}
    home = "/home/edgeuser/.edge-three"
    assert arm_device.device_path(f"{home}/slots/kws/current").resolve().name == rel["kws"]
    with pytest.raises(UsageError, match="holds 3 models"):
        rollback(transport, python=provisioned.python, work_dir=work)


@pytest.mark.slow
def test_calibrating_the_emulated_board_runs_end_to_end_but_never_fits(
        provisioned: ProvisionReport, transport, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44's calibration flow through the agent on the aarch64 board (one call per probe:
    a mechanism test): every probe timed and kept, marked emulated (an aarch64 python on this
    x86 CPU), so never fitted: qemu's timings are not a Pi's."""
    from devices.device import open_device
    from devices.measure import Rounds
    from edge.core.latency.probes import PROBES
    from edge.core.latency.store import fitted, keep, kept
    from edge.flows.calibrate import calibrate, summary

    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))
    device = open_device(transport, python=provisioned.python, work_dir="~/.edge")
    found = calibrate(device, "rpi4", threads=1, rounds=Rounds(rounds=1, calls=1, warmup=0),
                      pairs=(("onnxruntime", "fp32"),))  # int8's path: the local device's test
    assert found.machine == "aarch64" and found.emulated, found.cpu
    assert {k: len(v) for k, v in found.timed.items()} == {"onnxruntime|fp32": len(PROBES)}
    keep(found)
    assert kept("rpi4") == found and fitted(kept("rpi4"), "onnxruntime", "fp32") is None
    assert "never fitted" in summary(found)[0]
