"""Facts read from a live device for ``edge devices probe``, through a Transport.

The agent's ``probe`` (machine, cores, memory, python, importable runtimes), then read-only
commands run with a fixed argv (never a shell string): ``cat /proc/cpuinfo``, ``nproc``,
``df -Pk``, ``ls -1`` of device directories and ``head`` of sysfs files, in two rounds (the
second reads the files the first one's listings name). Only the agent is written, under the
work directory, as ``edge deploy`` does. Parsing the outputs: devices.readings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devices.readings import (
    MODEL_FILES,
    default_iface,
    disk_candidates,
    json_line,
    parse_head,
    parse_ls,
    to_int,
)
from edge.core.errors import DeviceError

if TYPE_CHECKING:
    from devices.transport import Transport

__all__ = ["CMD_TIMEOUT", "COMPATIBLE", "Facts", "gather", "second_round"]

CMD_TIMEOUT = 30.0
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_LISTED_DIRS = ("/dev", "/dev/dri", "/dev/accel", "/sys/class/misc", "/sys/block")
#: The SoC a device tree names ("rockchip,rk3588"): which NPU toolchain platform it is.
COMPATIBLE = "/proc/device-tree/compatible"
_RUNTIME_CHECK = (
    "import ctypes.util, importlib.util, json\n"
    "print(json.dumps({'tensorrt': importlib.util.find_spec('tensorrt') is not None,\n"
    "                  'edgetpu': bool(ctypes.util.find_library('edgetpu'))}))\n"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Facts:
    """Raw readings from one device (None or empty: could not be read)."""

    where: str  # the transport's label, e.g. ssh://pi@kitchen-pi.local:22
    python: str  # the device python that ran the agent
    work: str  # the agent's work directory, resolved on the device
    probe: dict[str, Any]  # the agent's probe reply
    cpuinfo: str | None = None
    nproc: int | None = None
    df: str | None = None  # df -Pk of the work directory
    listing: dict[str, list[str]]  # directory -> entries
    files: dict[str, str]  # path -> first lines
    extra_runtimes: dict[str, bool]  # tensorrt / edgetpu, checked only when their nodes exist
    gpu_names: tuple[str, ...] = ()  # nvidia-smi's names, when /dev/nvidiaN exist


def gather(transport: Transport, *, python: str, work_dir: str) -> Facts:
    """Start the agent with ``python`` (as deploy does), ask it to probe, read the rest."""
    from devices.device import open_device

    device = open_device(transport, python=python, work_dir=work_dir)
    reply = device.call("probe", timeout=120)
    cores = reply.get("device", {}).get("cores") or 1
    cpuinfo = _read(transport, ["cat", "/proc/cpuinfo"])
    nproc = to_int(_read(transport, ["nproc"]))
    df = _read(transport, ["df", "-Pk", "--", device.work])
    listing = parse_ls(_read(transport, ["ls", "-1", "--", *_LISTED_DIRS]) or "", _LISTED_DIRS)
    freq = [f"/sys/devices/system/cpu/cpu{i}/cpufreq/cpuinfo_max_freq"
            for i in range(min(int(cores), 512))]
    files = _head(transport, [*freq, *MODEL_FILES, COMPATIBLE, *_CGROUP_FILES, "/proc/net/route"])
    files.update(_head(transport, second_round(listing, df, files)))
    dev = set(listing.get("/dev", []))
    return Facts(where=transport.label, python=device.python, work=device.work, probe=reply,
                 cpuinfo=cpuinfo, nproc=nproc, df=df, listing=listing, files=files,
                 extra_runtimes=_extra_runtimes(transport, device.python, dev),
                 gpu_names=_gpu_names(transport, dev))


def second_round(listing: dict[str, list[str]], df: str | None,
                 files: dict[str, str]) -> list[str]:
    """sysfs files that depend on the first round: disks, GPU/NPU drivers, the route's NIC."""
    paths: list[str] = []
    for disk in disk_candidates(listing, df):
        paths += [f"/sys/block/{disk}/queue/rotational", f"/sys/block/{disk}/removable",
                  f"/sys/block/{disk}/device/type"]
    for node in listing.get("/dev/dri", []):
        if node.startswith("renderD"):
            paths.append(f"/sys/class/drm/{node}/device/uevent")
    for node in listing.get("/dev/accel", []):
        paths.append(f"/sys/class/accel/{node}/device/uevent")
    iface = default_iface(files.get("/proc/net/route", ""))
    if iface:
        paths += [f"/sys/class/net/{iface}/uevent", f"/sys/class/net/{iface}/speed",
                  f"/sys/class/net/{iface}/device/uevent"]
    return paths


def _extra_runtimes(transport: Transport, python: str, dev: set[str]) -> dict[str, bool]:
    """TensorRT and the Edge TPU library, asked of ``python`` only when their nodes exist."""
    if any(n.startswith("nvhost") or re.fullmatch(r"nvidia\d+", n) for n in dev) or \
            any(n.startswith("apex_") for n in dev):
        return json_line(_read(transport, [python, "-c", _RUNTIME_CHECK])) or {}
    return {}


def _gpu_names(transport: Transport, dev: set[str]) -> tuple[str, ...]:
    if not any(re.fullmatch(r"nvidia\d+", n) for n in dev):
        return ()
    names = _read(transport, ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return tuple(n.strip() for n in (names or "").splitlines() if n.strip())


def _read(transport: Transport, argv: list[str]) -> str | None:
    """stdout of a read-only command (even when it failed for some of its arguments)."""
    try:
        done = transport.run(argv, timeout=CMD_TIMEOUT)
    except DeviceError:
        if not transport.is_local:  # the connection itself failed: stop here
            raise
        return None  # the local device lacks this command
    return done.stdout if done.stdout.strip() else None


def _head(transport: Transport, paths: list[str]) -> dict[str, str]:
    """{path: first lines} of the readable files among ``paths`` (``head`` of all at once)."""
    if not paths:
        return {}
    return parse_head(_read(transport, ["head", "-n", "64", "--", *paths]) or "", paths)
