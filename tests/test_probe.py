"""edge.flows.probe: a profile written from a live device (a real sshd, the local device, fakes)."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import pytest
import yaml

from devices.connect import DeviceTarget
from devices.transport import Completed
from edge.core.errors import DeviceError, UsageError
from edge.core.profile import load_profile
from edge.flows.probe import (
    ProbeResult,
    normalize_arch,
    probe_device,
    probe_to_file,
    profile_id_from,
    render_profile,
    write_profile,
)
from tests.support.cli import run_cli
from tests.support.sshd import SSHDevice

UNREACHABLE = "nobody@127.0.0.1:1"  # connecting here fails: tests that must not connect use it


def _target(device: SSHDevice, **overrides: object) -> DeviceTarget:
    fields = {"host": device.target, "identity": device.identity,
              "known_hosts": device.known_hosts, "python": device.python} | overrides
    return DeviceTarget(**fields)  # type: ignore[arg-type]


def _mem_total_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def _split_source(source: str) -> tuple[str, str]:
    """(the 'Read from the device' part, the 'Assumed or estimated' part) of a source text."""
    read, sep, rest = source.partition("Assumed or estimated, edit these:")
    assert sep and "Read from the device:" in read, source
    return read, rest.partition(" Also found:")[0]


@pytest.fixture(scope="module")
def ssh_probe(ssh_device: SSHDevice,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[ProbeResult, Path]:
    result = probe_device(_target(ssh_device))
    path = write_profile(result, tmp_path_factory.mktemp("probe") / "probed.yaml")
    return result, path


# ---------------------------------------------------------------- the real sshd device


def test_ssh_probe_writes_a_profile_that_validates(ssh_probe) -> None:
    result, path = ssh_probe
    loaded = load_profile(path)
    assert loaded == result.profile
    assert loaded.id == profile_id_from(platform.node())
    assert loaded.compute.arch == normalize_arch(platform.machine())
    assert loaded.compute.cores == os.cpu_count()
    assert abs(loaded.memory.ram_mb - _mem_total_mb()) <= 0.10 * _mem_total_mb()
    assert 0 < loaded.memory.model_budget_mb <= loaded.memory.ram_mb
    assert loaded.compute.clock_ghz > 0 and loaded.compute.cpu not in ("", "unknown")
    assert loaded.storage.capacity_gb > 0
    assert loaded.power.idle_w <= loaded.power.max_w
    for accel in loaded.accelerators:
        assert accel.runtime in loaded.runtimes


def test_ssh_probe_records_runtimes_python_and_access(ssh_probe, ssh_device: SSHDevice) -> None:
    result, _ = ssh_probe
    profile = result.profile
    # The device venv has onnxruntime and ai-edge-litert (tflite); openvino is not installed.
    assert {"onnxruntime", "tflite"} <= set(profile.runtimes)
    assert "openvino" not in profile.runtimes
    assert result.device["runtimes"]["onnxruntime"] == "1.31.1"
    access = profile.access
    assert (access.transport, access.user, access.host, access.port) == (
        "ssh", ssh_device.user, ssh_device.host, ssh_device.port)
    assert access.python == ssh_device.python and access.work_dir == "~/.edge"
    assert result.where == f"ssh://{ssh_device.target}"
    device_python = result.device["device"]["python"]
    assert f"python {device_python}" in profile.source


def test_ssh_probe_source_names_what_was_read_and_what_was_assumed(ssh_probe) -> None:
    result, path = ssh_probe
    read, assumed = _split_source(result.profile.source)
    for key in ("compute.arch", "compute.cpu", "compute.cores", "compute.clock_ghz",
                "compute.isa", "memory.ram_mb", "storage.capacity_gb", "runtimes", "access"):
        assert key in read and key in result.measured, key
        assert key not in assumed, key
    for key in ("compute.peak_gops", "memory.model_budget_mb", "power.idle_w", "power.max_w",
                "link.kind", "link.uplink_mbps", "link.downlink_mbps", "link.rtt_ms"):
        assert key in assumed and key in result.assumed, key
        assert key not in read, key
    text = path.read_text()
    assert "  cores: " in text and "# read: os.cpu_count() on the device" in text
    assert "  max_w: " in text and "# ASSUMED:" in text.split("  max_w: ")[1].splitlines()[0]
    assert yaml.safe_load(text)["source"] == result.profile.source


def test_a_probed_profile_names_its_device_for_deploy(ssh_probe, ssh_device: SSHDevice) -> None:
    _, path = ssh_probe
    result = run_cli("deploy", "sample:digits", "--profile", str(path), "--dry-run", "--json")
    assert result.status == 0, result.stderr
    assert result.json()["target"] == f"{ssh_device.user}@{ssh_device.host}:{ssh_device.port}"


def test_write_refuses_to_overwrite_unless_forced(ssh_probe, tmp_path: Path) -> None:
    result, _ = ssh_probe
    out = tmp_path / "mine.yaml"
    out.write_text("# my edits\n")
    with pytest.raises(UsageError, match="exists"):
        write_profile(result, out)
    assert out.read_text() == "# my edits\n"
    with pytest.raises(UsageError, match="exists"):  # checked before connecting anywhere
        probe_to_file(DeviceTarget(host=UNREACHABLE), out)
    assert out.read_text() == "# my edits\n"
    write_profile(result, out, force=True)
    assert load_profile(out) == result.profile
    assert [p.name for p in tmp_path.iterdir()] == ["mine.yaml"]  # no temp file left


def test_probe_to_file_writes_id_yaml_by_default(ssh_device: SSHDevice, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, path = probe_to_file(_target(ssh_device), profile_id="lab-pi")
    assert path == Path("lab-pi.yaml") and result.profile.id == "lab-pi"
    assert load_profile(tmp_path / "lab-pi.yaml").id == "lab-pi"
    assert "id" not in result.measured  # given, not read


def test_unknown_host_key_is_one_line_and_writes_nothing(ssh_device: SSHDevice,
                                                         tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    out = tmp_path / "probed.yaml"
    with pytest.raises(DeviceError) as caught:
        probe_to_file(_target(ssh_device, known_hosts=empty), out)
    message = str(caught.value)
    assert "unknown host key" in message and len(message.splitlines()) == 1
    assert not out.exists()
    assert empty.read_text() == ""


@pytest.mark.parametrize("bad", ["My Pi", "-pi", "pi/4", "Pi", ""])
def test_bad_profile_id_is_a_usage_error_before_connecting(bad: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--id"):
        probe_device(DeviceTarget(host=UNREACHABLE), profile_id=bad)
    with pytest.raises(UsageError, match="--id"):
        probe_to_file(DeviceTarget(host=UNREACHABLE), tmp_path / "x.yaml", profile_id=bad)
    assert not (tmp_path / "x.yaml").exists()


# ---------------------------------------------------------------- the embedded local device


def test_local_device_probe(tmp_path: Path) -> None:
    result = probe_device(DeviceTarget(), profile_id="this-host")
    path = write_profile(result, tmp_path / "this-host.yaml")
    loaded = load_profile(path)
    assert loaded == result.profile and loaded.id == "this-host"
    assert loaded.compute.arch == normalize_arch(platform.machine())
    assert loaded.compute.cores == os.cpu_count()
    assert abs(loaded.memory.ram_mb - _mem_total_mb()) <= 0.10 * _mem_total_mb()
    assert "onnxruntime" in loaded.runtimes
    assert loaded.access.transport == "local" and loaded.access.host is None
    assert loaded.access.python == sys.executable
    assert result.where.startswith("local:")


# ---------------------------------------------------------------- helpers


def test_normalize_arch() -> None:
    assert normalize_arch("x86_64") == normalize_arch("AMD64") == "x86_64"
    assert normalize_arch("arm64") == normalize_arch("aarch64") == "aarch64"
    assert normalize_arch("armv7l") == "armv7l" and normalize_arch("riscv64") == "riscv64"
    with pytest.raises(DeviceError, match="i686"):
        normalize_arch("i686")


def test_profile_id_from_host_names() -> None:
    assert profile_id_from("raspberrypi") == "raspberrypi"
    assert profile_id_from("Kitchen_Pi.local") == "kitchen_pi"
    assert profile_id_from("--Lab Box 2--") == "lab-box-2"
    assert profile_id_from("") == profile_id_from("!!!") == "device"


# ---------------------------------------------------------------- fake boards (no hardware)


class FakeBoard:
    """A transport answering the agent and the probe's commands from canned files."""

    is_local = False

    def __init__(self, *, machine: str, cores: int, files: dict[str, str],
                 dirs: dict[str, list[str]], df: str, runtimes: dict[str, str],
                 hostname: str = "board", extra: dict[str, bool] | None = None) -> None:
        self.label = "ssh://pi@board.local:22"
        self.files, self.dirs, self.df, self.extra = files, dirs, df, extra or {}
        self.probe = {"agent": 1, "runtimes": runtimes, "device": {
            "hostname": hostname, "machine": machine, "system": "Linux", "cpu": "?",
            "cores": cores, "mem_total_mb": 3794, "python": "3.11.2"}}
        self.commands: list[list[str]] = []

    def home(self) -> str:
        return "/home/pi"

    def mkdir(self, remote: str) -> None:
        pass

    def exists(self, remote: str) -> bool:
        return True

    def put(self, local: Path, remote: str) -> None:
        raise AssertionError("nothing is uploaded: the agent is there")

    def close(self) -> None:
        pass

    def run(self, argv: list[str], *, timeout: float = 600.0) -> Completed:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        self.commands.append(argv)
        out = ""
        if argv[1:2] == ["-c"] and "version_info" in argv[2]:
            out = "True\n"
        elif argv[-1] == "probe":
            out = json.dumps(self.probe)
        elif argv[1:2] == ["-c"]:
            out = json.dumps(self.extra)
        elif argv[0] == "cat":
            out = self.files.get(argv[1], "")
        elif argv[0] == "nproc":
            out = f"{self.probe['device']['cores']}\n"
        elif argv[0] == "df":
            out = "Filesystem 1024-blocks Used Available Capacity Mounted on\n" + self.df + "\n"
        elif argv[0] == "ls":
            out = "\n\n".join(f"{d}:\n" + "\n".join(self.dirs[d])
                              for d in argv[3:] if d in self.dirs)
        elif argv[0] == "head":
            paths = argv[4:]
            out = "\n".join(f"==> {p} <==\n{self.files[p]}" for p in paths if p in self.files)
        return Completed(status=0, stdout=out, stderr="")


def _probe_fake(board: FakeBoard, monkeypatch: pytest.MonkeyPatch) -> ProbeResult:
    import edge.flows.probe

    monkeypatch.setattr(edge.flows.probe, "transport_for", lambda target, profile: _Ctx(board))
    result = probe_device(DeviceTarget(host="pi@board.local"))
    for argv in board.commands:
        assert argv[0] not in ("sh", "bash") and not any("*" in a for a in argv), argv
    return result


class _Ctx:
    def __init__(self, board: FakeBoard) -> None:
        self.board = board

    def __enter__(self) -> FakeBoard:
        return self.board

    def __exit__(self, *exc: object) -> None:
        pass


def _arm_cpuinfo(parts: list[str], features: str, tail: str = "") -> str:
    blocks = [f"processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: {features}\n"
              f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
              f"CPU part\t: {part}\nCPU revision\t: 3\n" for i, part in enumerate(parts)]
    return "\n".join(blocks) + ("\n" + tail if tail else "")


def _freq(khz: list[int]) -> dict[str, str]:
    return {f"/sys/devices/system/cpu/cpu{i}/cpufreq/cpuinfo_max_freq": str(k)
            for i, k in enumerate(khz)}


ROUTE = ("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
         "{iface}\t00000000\t0100A8C0\t0003\t0\t0\t600\t00000000\n")


def test_fake_raspberry_pi_4(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    board = FakeBoard(
        machine="aarch64", cores=4, hostname="kitchen-pi", runtimes={"tflite": "2.3.0"},
        files={"/proc/cpuinfo": _arm_cpuinfo(["0xd08"] * 4, "fp asimd evtstrm crc32 cpuid",
                                             "Hardware\t: BCM2835\nModel\t: Raspberry Pi 4\n"),
               **_freq([1800000] * 4),
               "/proc/device-tree/model": "Raspberry Pi 4 Model B Rev 1.4\x00",
               "/proc/net/route": ROUTE.format(iface="wlan0"),
               "/sys/class/net/wlan0/uevent": "DEVTYPE=wlan\nINTERFACE=wlan0",
               "/sys/block/mmcblk0/device/type": "SD",
               "/sys/class/drm/renderD128/device/uevent": "DRIVER=v3d\nOF_NAME=v3d"},
        dirs={"/dev": ["null", "vchiq", "dri", "mmcblk0", "mmcblk0p2"],
              "/dev/dri": ["card0", "renderD128"],
              "/sys/block": ["loop0", "mmcblk0", "mmcblk0boot0", "ram0"]},
        df="/dev/root 30358348 4529012 24534904 16% /")
    result = _probe_fake(board, monkeypatch)
    compute = result.profile.compute
    assert (compute.cpu, compute.cores, compute.clock_ghz, compute.isa) == (
        "Cortex-A72", 4, 1.8, ("neon",))
    assert compute.peak_gops == {"fp32": 57.6, "int8": 115.2}  # rpi4's 8 FLOP/cycle rule
    assert result.profile.id == "kitchen-pi"
    assert result.profile.name.startswith("Raspberry Pi 4 Model B Rev 1.4")
    assert result.profile.power == load_profile("rpi4").power
    assert "catalog profile rpi4" in result.assumed["power.max_w"]
    assert result.profile.storage.kind == "microsd"
    assert result.profile.link.kind == "wifi"
    [gpu] = result.profile.accelerators  # the v3d GPU: NCNN's Vulkan candidates reach it
    assert (gpu.kind, gpu.runtime, gpu.precisions) == ("gpu", "ncnn-vulkan", ("fp32",))
    assert result.profile.runtimes == ("ncnn-vulkan", "tflite")
    assert "ncnn-vulkan listed for the accelerator found, but not found" in result.assumed[
        "runtimes"]  # the device python has no ncnn
    assert any("vchiq" in n for n in result.notes)
    loaded = load_profile(write_profile(result, tmp_path / "pi.yaml"))
    assert loaded == result.profile


def test_fake_rk3588_big_little_with_mali_and_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    features = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp"
    board = FakeBoard(
        machine="aarch64", cores=8, runtimes={"onnxruntime": "1.31.1"},
        files={"/proc/cpuinfo": _arm_cpuinfo(["0xd05"] * 4 + ["0xd0b"] * 4, features),
               **_freq([1800000] * 4 + [2400000] * 4),
               "/proc/device-tree/model": "Radxa ROCK 5B\x00",
               "/proc/device-tree/compatible": "radxa,rock-5b\x00rockchip,rk3588\x00",
               "/proc/net/route": ROUTE.format(iface="enP4p65s0"),
               "/sys/class/net/enP4p65s0/uevent": "INTERFACE=enP4p65s0",
               "/sys/class/net/enP4p65s0/device/uevent": "DRIVER=r8169",
               "/sys/class/net/enP4p65s0/speed": "2500",
               "/sys/class/drm/renderD128/device/uevent": "DRIVER=panfrost"},
        dirs={"/dev": ["null", "dri"], "/dev/dri": ["renderD128"],
              "/sys/class/misc": ["rknpu", "watchdog"], "/sys/block": ["nvme0n1", "mmcblk0"]},
        df="/dev/nvme0n1p2 245107676 3000000 232000000 2% /")
    result = _probe_fake(board, monkeypatch)
    compute = result.profile.compute
    assert compute.cpu == "4x Cortex-A76 + 4x Cortex-A55" and compute.clock_ghz == 2.4
    assert compute.isa == ("neon", "fp16", "dotprod")
    assert compute.peak_gops == load_profile("rock5b").compute.peak_gops  # same estimate rule
    npu, gpu = result.profile.accelerators
    # the RKNPU driver is the rknn runtime's NPU, built for the SoC the device tree names
    assert (npu.kind, npu.runtime, dict(npu.options)) == ("npu", "rknn", {"platform": "rk3588"})
    assert npu.cores == 3  # a pack places a model on each (rknn core mask)
    assert npu.name == "Rockchip RK3588 NPU" and npu.precisions == ("int8", "fp16")
    assert (gpu.kind, gpu.runtime, gpu.precisions) == ("gpu", "tflite", ("fp32", "fp16"))
    # rknn and tflite reach the NPU and GPU but are not installed: listed first, and flagged.
    assert result.profile.runtimes == ("rknn", "tflite", "onnxruntime")
    assert "rknn, tflite" in result.assumed["runtimes"]
    assert not any("Rockchip NPU" in n for n in result.notes)
    assert result.profile.storage.kind == "nvme"
    assert result.profile.link.uplink_mbps == 2350.0  # 2.5 GbE x 0.94
    assert "an upper bound" in result.assumed["link.uplink_mbps"]


def test_fake_jetson_with_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    board = FakeBoard(
        machine="aarch64", cores=6, runtimes={"onnxruntime": "1.31.1"},
        extra={"tensorrt": True, "edgetpu": False},
        files={"/proc/cpuinfo": _arm_cpuinfo(["0xd42"] * 6, "fp asimd asimdhp asimddp"),
               **_freq([1728000] * 6),
               "/proc/device-tree/model": "NVIDIA Jetson Orin Nano Developer Kit\x00"},
        dirs={"/dev": ["nvhost-ctrl-gpu", "nvhost-gpu", "null"], "/sys/block": ["mmcblk0"]},
        df="/dev/mmcblk0p1 61255492 20000000 38000000 35% /")
    result = _probe_fake(board, monkeypatch)
    [gpu] = result.profile.accelerators
    assert (gpu.kind, gpu.runtime) == ("gpu", "tensorrt")
    assert result.profile.runtimes == ("tensorrt", "onnxruntime")
    assert "runtimes" not in result.assumed  # tensorrt was found in the device python
    assert result.profile.compute.cpu == "Cortex-A78AE"
    assert result.profile.power == load_profile("jetson-orin-nano").power
    assert result.profile.storage.kind == "emmc"  # mmcblk without device/type: a guess
    assert result.profile.link.kind == "ethernet"  # no default route: placeholder
    assert "no default route" in result.assumed["link.kind"]
    text = render_profile(result)
    assert "runtime: tensorrt" in text and yaml.safe_load(text)["id"] == "board"


def test_cli_probe_over_ssh_and_its_errors(ssh_device: SSHDevice, tmp_path: Path) -> None:
    """`edge devices probe` end to end: writes a valid profile; refuses to overwrite; an
    unknown host key is a one-line device error with nothing written."""
    from tests.support.cli import run_cli

    out = tmp_path / "probed.yaml"
    args = ("devices", "probe", ssh_device.target, "--identity", str(ssh_device.identity),
            "--known-hosts", str(ssh_device.known_hosts), "--device-python", ssh_device.python,
            "--id", "probed-board", "-o", str(out))
    done = run_cli(*args, "--json")
    assert done.status == 0, done.stderr
    assert done.json()["file"] == str(out)
    assert load_profile(out).id == "probed-board"
    again = run_cli(*args)
    assert again.status == 2 and again.stderr.count("\n") == 1
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = run_cli("devices", "probe", ssh_device.target, "--identity",
                       str(ssh_device.identity), "--known-hosts", str(empty), "-o",
                       str(tmp_path / "never.yaml"))
    assert stranger.status == 3 and stranger.stderr.count("\n") == 1
    assert not (tmp_path / "never.yaml").exists() and empty.read_text() == ""


def test_fake_x86_server_with_intel_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = "".join(f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ "
                      f"2.40GHz\nphysical id\t: 0\ncore id\t: {i // 2}\ncpu MHz\t\t: 2400.0\n"
                      "flags\t\t: fpu avx avx2 fma avx512f avx512_vnni\n\n" for i in range(4))
    board = FakeBoard(
        machine="x86_64", cores=4, runtimes={"onnxruntime": "1.31.1", "openvino": "2026.4.1"},
        files={"/proc/cpuinfo": cpuinfo, "/sys/devices/virtual/dmi/id/sys_vendor": "Dell Inc.",
               "/sys/devices/virtual/dmi/id/product_name": "PowerEdge R740",
               "/proc/net/route": ROUTE.format(iface="eth0"),
               "/sys/class/net/eth0/device/uevent": "DRIVER=virtio_net",
               "/sys/class/net/eth0/speed": "10000",
               "/sys/block/sda/queue/rotational": "1",
               "/sys/class/drm/renderD128/device/uevent": "DRIVER=i915"},
        dirs={"/dev": ["null", "dri"], "/dev/dri": ["card0", "renderD128"],
              "/sys/block": ["sda", "loop0"]},
        df="/dev/sda1 976762584 1000 975000000 1% /")
    result = _probe_fake(board, monkeypatch)
    profile = result.profile
    assert profile.name == "Dell Inc. PowerEdge R740 (pi@board.local)"
    assert profile.compute.cpu == "Intel Xeon Gold 6148" and profile.compute.clock_ghz == 2.4
    assert profile.compute.peak_gops == {"fp32": 307.2, "int8": 1228.8}  # 2 physical cores
    assert (profile.power.idle_w, profile.power.max_w) == (15.0, 27.0)  # +6 W per core
    [gpu] = profile.accelerators
    # the GPU's target, as the plan names it; OpenVINO installed reaches it
    assert (gpu.name, gpu.runtime) == ("Intel GPU (i915)", "openvino-gpu")
    assert profile.runtimes == ("openvino-gpu", "onnxruntime", "openvino")
    assert "runtimes" not in result.assumed
    assert profile.storage.kind == "hdd" and profile.storage.capacity_gb == 1000.2
    assert profile.link.uplink_mbps == 100.0  # a virtio NIC's speed says nothing: placeholder
    assert (profile.access.user, profile.access.host) == ("pi", "board.local")


def test_rockchip_npu_without_a_named_soc_is_a_note_saying_what_to_add() -> None:
    """An RKNPU driver whose device tree names no Rockchip SoC: rknn's platform is unknown, so
    the NPU is not listed; the note says to add it with options.platform."""
    from devices.gather import Facts
    from edge.flows.probe_accel import accelerators
    from edge.flows.probe_result import Ledger

    ledger = Ledger()
    facts = Facts(where="ssh://x", python="python3", work="/tmp/w", probe={},
                  listing={"/dev": ["rknpu"]}, files={"/proc/device-tree/compatible": "acme,x"},
                  extra_runtimes={})
    assert accelerators(facts, None, ledger) == []
    assert any("options.platform" in n for n in ledger.notes)
    facts = Facts(where="ssh://x", python="python3", work="/tmp/w", probe={},
                  listing={"/dev": ["rknpu"]}, extra_runtimes={},
                  files={"/proc/device-tree/compatible": "xunlong,orangepi-5\x00rockchip,rk3588s"})
    [npu] = accelerators(facts, None, Ledger())
    assert npu["options"] == {"platform": "rk3588"} and npu["runtime"] == "rknn"
