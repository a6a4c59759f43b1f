"""``edge devices probe``: write a profile from a live device, for the user to extend.

The device is reached as ``edge deploy`` reaches it (SSH with ``--host``, else the embedded
local device). Facts come from the agent's ``probe`` (machine, cores, memory, python, importable
runtimes) and from read-only commands run with a fixed argv (never a shell string): ``cat
/proc/cpuinfo``, ``nproc``, ``df -Pk``, ``ls -1`` of device directories and ``head`` of sysfs
files. Whatever cannot be read (power, the link to the cloud, peak throughput) is estimated or
filled with a placeholder, and every field says which it is: in a comment on its line and in
the profile's ``source:`` text, which stays with the profile (and with every bundle made for it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import secrets
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from edge.core.errors import DeviceError, UsageError, first_line
from edge.core.profile import RUNTIMES, Profile

if TYPE_CHECKING:
    from devices.connect import DeviceTarget
    from devices.transport import Transport

__all__ = [
    "ProbeResult",
    "normalize_arch",
    "probe_device",
    "probe_to_file",
    "profile_id_from",
    "render_profile",
    "write_profile",
]

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
WORK_DIR = "~/.edge"
CMD_TIMEOUT = 30.0

#: platform.machine() spellings -> the schema's compute.arch values.
ARCH_ALIASES = {
    "x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64",
    "aarch64": "aarch64", "arm64": "aarch64", "aarch64_be": "aarch64",
    "armv7l": "armv7l", "armv7": "armv7l", "armv7hl": "armv7l", "armhf": "armv7l",
    "armv8l": "armv7l",  # a 32-bit userland on a 64-bit CPU
    "armv6l": "armv7l",  # no armv6 in the schema: the closest, with a note
    "riscv64": "riscv64",
}

#: ARM Ltd (CPU implementer 0x41) CPU part -> core name.
ARM_PARTS = {
    0xB76: "ARM1176", 0xC07: "Cortex-A7", 0xC08: "Cortex-A8", 0xC09: "Cortex-A9",
    0xC0D: "Cortex-A12", 0xC0E: "Cortex-A17", 0xC0F: "Cortex-A15", 0xD01: "Cortex-A32",
    0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD06: "Cortex-A65",
    0xD07: "Cortex-A57", 0xD08: "Cortex-A72", 0xD09: "Cortex-A73", 0xD0A: "Cortex-A75",
    0xD0B: "Cortex-A76", 0xD0C: "Neoverse-N1", 0xD0D: "Cortex-A77", 0xD0E: "Cortex-A76AE",
    0xD40: "Neoverse-V1", 0xD41: "Cortex-A78", 0xD42: "Cortex-A78AE", 0xD44: "Cortex-X1",
    0xD46: "Cortex-A510", 0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD49: "Neoverse-N2",
    0xD4A: "Neoverse-E1", 0xD4B: "Cortex-A78C", 0xD4D: "Cortex-A715", 0xD4E: "Cortex-X3",
    0xD4F: "Neoverse-V2", 0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4",
    0xD85: "Cortex-X925", 0xD87: "Cortex-A725",
}

#: Core class -> (fp32 FLOP/cycle per core, board idle W, extra W per loaded core). The FLOP
#: figures follow the catalog's sources (A53: 64-bit NEON datapath, 4; A72: 8; A76: 2x 128-bit
#: FMA pipes, 16); the watts are rough fits to the catalog's boards (rpi4, rpi5, rpi-zero-2w).
CORE_CLASSES = {
    "little": (4.0, 1.0, 0.6),
    "mid": (8.0, 2.5, 1.0),
    "big": (16.0, 2.7, 1.5),
    "x": (32.0, 2.7, 2.5),
}
CORE_CLASS = {
    "ARM1176": "little", "Cortex-A7": "little", "Cortex-A8": "little", "Cortex-A9": "little",
    "Cortex-A32": "little", "Cortex-A35": "little", "Cortex-A53": "little",
    "Cortex-A55": "mid", "Cortex-A510": "mid", "Cortex-A520": "mid", "Cortex-A65": "mid",
    "Neoverse-E1": "mid", "Cortex-A12": "mid", "Cortex-A17": "mid", "Cortex-A15": "mid",
    "Cortex-A57": "mid", "Cortex-A72": "mid", "Cortex-A73": "mid",
    "Cortex-A75": "big", "Cortex-A76": "big", "Cortex-A76AE": "big", "Cortex-A77": "big",
    "Cortex-A78": "big", "Cortex-A78AE": "big", "Cortex-A78C": "big", "Neoverse-N1": "big",
    "Cortex-A710": "big", "Cortex-A715": "big", "Cortex-A720": "big", "Cortex-A725": "big",
    "Neoverse-N2": "big",
    "Cortex-X1": "x", "Cortex-X2": "x", "Cortex-X3": "x", "Cortex-X4": "x", "Cortex-X925": "x",
    "Neoverse-V1": "x", "Neoverse-V2": "x",
}

#: /proc/cpuinfo feature names -> the isa vocabulary of the catalog (and of edge.core.plan).
X86_ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
           "amx_bf16", "amx_int8")
ARM_ISA = (("asimd", "neon"), ("neon", "neon"), ("asimdhp", "fp16"), ("asimddp", "dotprod"),
           ("i8mm", "i8mm"), ("bf16", "bf16"), ("sve", "sve"), ("sve2", "sve2"))

#: Boards recognised by their device-tree/DMI model -> the catalog profile whose power and link
#: figures are better than edge's generic table.
CATALOG_BOARDS = (
    (re.compile(r"raspberry pi 5", re.I), "rpi5"),
    (re.compile(r"raspberry pi 4", re.I), "rpi4"),
    (re.compile(r"raspberry pi zero 2", re.I), "rpi-zero-2w"),
    (re.compile(r"orin nano", re.I), "jetson-orin-nano"),
    (re.compile(r"jetson nano|p3450", re.I), "jetson-nano"),
    (re.compile(r"phanbell|coral dev", re.I), "coral-dev-board"),
    (re.compile(r"i\.?mx ?8m ?plus|imx8mp", re.I), "imx8mp"),
    (re.compile(r"rock ?5b", re.I), "rock5b"),
)

#: Link placeholders per guessed kind: (uplink, downlink, rtt ms), as the catalog's boards.
LINK_PLACEHOLDERS = {"ethernet": (100.0, 100.0, 10.0), "wifi": (40.0, 80.0, 15.0),
                     "lte": (10.0, 40.0, 50.0)}

_MODEL_FILES = ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model",
                "/sys/devices/virtual/dmi/id/sys_vendor",
                "/sys/devices/virtual/dmi/id/product_name")
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_LISTED_DIRS = ("/dev", "/dev/dri", "/dev/accel", "/sys/class/misc", "/sys/block")
_RUNTIME_CHECK = (
    "import ctypes.util, importlib.util, json\n"
    "print(json.dumps({'tensorrt': importlib.util.find_spec('tensorrt') is not None,\n"
    "                  'edgetpu': bool(ctypes.util.find_library('edgetpu'))}))\n"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeResult:
    """A profile probed from a device, and which of its fields were read vs assumed."""

    data: dict[str, Any]  # the profile as written, in file order (lists, not tuples)
    profile: Profile  # ``data`` validated
    measured: dict[str, str]  # dotted key -> how it was read from the device
    assumed: dict[str, str]  # dotted key -> why it is an estimate or placeholder (edit these)
    notes: tuple[str, ...] = ()  # findings with no profile field (accelerators, limits)
    where: str = ""  # the transport's label, e.g. ssh://pi@kitchen-pi.local:22
    device: dict[str, Any] = field(default_factory=dict)  # the agent's probe reply

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for ``--json``)."""
        return {"where": self.where, "profile": self.profile.to_json(),
                "measured": dict(self.measured), "assumed": dict(self.assumed),
                "notes": list(self.notes), "device": self.device}


# ---------------------------------------------------------------------------- public API


def normalize_arch(machine: str) -> str:
    """The schema's ``compute.arch`` for a ``platform.machine()`` value; DeviceError if none."""
    arch = ARCH_ALIASES.get(machine.strip().lower())
    if arch is None:
        raise DeviceError(f"the device's architecture '{machine}' is not one edge profiles "
                          "describe (aarch64, armv7l, x86_64, riscv64)")
    return arch


def profile_id_from(hostname: str) -> str:
    """A profile id (``^[a-z0-9][a-z0-9._-]*$``) made from a host name."""
    text = re.sub(r"[^a-z0-9._-]+", "-", hostname.strip().lower().split(".local")[0])
    text = re.sub(r"^[^a-z0-9]+", "", text).rstrip("-._")
    return text or "device"


def check_profile_id(profile_id: str) -> str:
    """``profile_id`` if it is a valid profile id, else UsageError."""
    if not ID_PATTERN.match(profile_id):
        raise UsageError(f"--id {profile_id!r}: a profile id is lowercase letters, digits, '.', "
                         "'_' and '-', starting with a letter or digit")
    return profile_id


def probe_device(target: DeviceTarget, *, profile_id: str | None = None) -> ProbeResult:
    """Connect to the device (as ``edge deploy`` would), read what it is, build a profile.

    ``target.host`` None is the embedded local device. Only ``host``, ``identity``,
    ``known_hosts``, ``trust_new_host`` and ``python`` of the target are used. Writes nothing
    locally; on the device, only the agent under ``~/.edge`` (as deploy does).
    """
    if profile_id is not None:
        check_profile_id(profile_id)
    with _transport(target) as transport:
        facts = _gather(transport, target)
    return _build(facts, profile_id)


def render_profile(result: ProbeResult) -> str:
    """The YAML text ``write_profile`` writes: the profile with a comment on every field."""
    return _render(result)


def write_profile(result: ProbeResult, out: Path, *, force: bool = False) -> Path:
    """Write the profile atomically; refuse to replace an existing file unless ``force``.

    The text is validated (parsed back and checked by edge.core.profile) before anything is written.
    """
    out = Path(out)
    text = render_profile(result)
    if out.is_dir():
        raise UsageError(f"{out} is a directory: give a file name, e.g. {out}/my-device.yaml")
    if out.exists() and not force:
        raise UsageError(f"{out} exists: choose another -o, or remove it first")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"-o {out}: directory {parent} does not exist")
    tmp = parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            os.replace(tmp, out)
        else:
            _link_exclusive(tmp, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return out


def probe_to_file(target: DeviceTarget, out: Path | None = None, *,
                  profile_id: str | None = None, force: bool = False) -> tuple[ProbeResult, Path]:
    """``edge devices probe``: check the id and -o first, probe, write; (result, path written).

    ``out`` None writes ``<id>.yaml`` in the current directory.
    """
    if profile_id is not None:
        check_profile_id(profile_id)
    planned = Path(out) if out is not None else (
        Path(f"{profile_id}.yaml") if profile_id is not None else None)
    if planned is not None and planned.exists() and not force:  # fail before connecting
        raise UsageError(f"{planned} exists: choose another -o, or remove it first")
    result = probe_device(target, profile_id=profile_id)
    path = write_profile(result, Path(out) if out is not None else
                         Path(f"{result.profile.id}.yaml"), force=force)
    return result, path


# ---------------------------------------------------------------------------- gathering


@dataclass(kw_only=True, slots=True)
class _Facts:
    """Raw readings from the device."""

    where: str
    spec: Any  # HostSpec or None
    python: str
    work: str
    probe: dict[str, Any]
    cpuinfo: str | None = None
    nproc: int | None = None
    df: str | None = None
    listing: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    extra_runtimes: dict[str, bool] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)


def _transport(target: DeviceTarget) -> Any:
    if target.host is None:
        from devices.transport import LocalTransport

        return LocalTransport()
    from devices.ssh import SSHTransport, parse_host

    return SSHTransport(parse_host(target.host), identity=target.identity,
                        known_hosts=target.known_hosts, trust_new_host=target.trust_new_host)


def _gather(transport: Transport, target: DeviceTarget) -> _Facts:
    from devices.deploy import open_device

    python = target.python or (sys.executable if transport.is_local else "python3")
    device = open_device(transport, python=python, work_dir=WORK_DIR)
    reply = device.call("probe", timeout=120)
    facts = _Facts(where=transport.label, spec=getattr(transport, "spec", None),
                   python=device.python, work=device.work, probe=reply)
    info = reply.get("device", {})
    cores = info.get("cores") or 1
    facts.cpuinfo = _read(transport, ["cat", "/proc/cpuinfo"])
    facts.nproc = _int(_read(transport, ["nproc"]))
    facts.df = _read(transport, ["df", "-Pk", "--", device.work])
    facts.listing = _parse_ls(_read(transport, ["ls", "-1", "--", *_LISTED_DIRS]) or "",
                              _LISTED_DIRS)
    freq = [f"/sys/devices/system/cpu/cpu{i}/cpufreq/cpuinfo_max_freq"
            for i in range(min(int(cores), 512))]
    facts.files = _head(transport, [*freq, *_MODEL_FILES, *_CGROUP_FILES, "/proc/net/route"])
    facts.files.update(_head(transport, _second_round(facts)))
    dev = set(facts.listing.get("/dev", []))
    if any(n.startswith("nvhost") or re.fullmatch(r"nvidia\d+", n) for n in dev) or \
            any(n.startswith("apex_") for n in dev):
        facts.extra_runtimes = _json_line(
            _read(transport, [device.python, "-c", _RUNTIME_CHECK])) or {}
    if any(re.fullmatch(r"nvidia\d+", n) for n in dev):
        names = _read(transport, ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        facts.gpu_names = [n.strip() for n in (names or "").splitlines() if n.strip()]
    return facts


def _second_round(facts: _Facts) -> list[str]:
    """sysfs files that depend on the first round: disks, GPU/NPU drivers, the route's NIC."""
    paths: list[str] = []
    for disk in _disk_candidates(facts):
        paths += [f"/sys/block/{disk}/queue/rotational", f"/sys/block/{disk}/removable",
                  f"/sys/block/{disk}/device/type"]
    for node in facts.listing.get("/dev/dri", []):
        if node.startswith("renderD"):
            paths.append(f"/sys/class/drm/{node}/device/uevent")
    for node in facts.listing.get("/dev/accel", []):
        paths.append(f"/sys/class/accel/{node}/device/uevent")
    iface = _default_iface(facts.files.get("/proc/net/route", ""))
    if iface:
        paths += [f"/sys/class/net/{iface}/uevent", f"/sys/class/net/{iface}/speed",
                  f"/sys/class/net/{iface}/device/uevent"]
    return paths


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
    text = _read(transport, ["head", "-n", "64", "--", *paths]) or ""
    if len(paths) == 1 and not text.startswith("==> "):  # one file: no header
        return {paths[0]: text.replace("\x00", "").strip()} if text.strip() else {}
    files: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "==> <end> <=="]:
        match = re.fullmatch(r"==> (.*) <==", line)
        if match:
            if current is not None and "\n".join(lines).strip():
                files[current] = "\n".join(lines).replace("\x00", "").strip()
            current, lines = match.group(1), []
        else:
            lines.append(line)
    return files


def _parse_ls(text: str, dirs: Iterable[str]) -> dict[str, list[str]]:
    """``ls -1 DIR...`` output -> {dir: entries} (missing directories are absent)."""
    headers = {f"{d}:": d for d in dirs}
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line in headers:
            current = headers[line]
            out[current] = []
        elif current is not None and line.strip():
            out[current].append(line.strip())
    return out


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").split()[0])
    except (IndexError, ValueError):
        return None


def _json_line(text: str | None) -> dict[str, Any] | None:
    import json

    try:
        value = json.loads((text or "").strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------------------- building


class _Ledger:
    """Which fields were read from the device and which were assumed, and why."""

    def __init__(self) -> None:
        self.measured: dict[str, str] = {}
        self.assumed: dict[str, str] = {}
        self.notes: list[str] = []

    def read(self, key: str, how: str) -> None:
        self.measured[key] = how

    def assume(self, key: str, why: str) -> None:
        self.assumed[key] = why


def _build(facts: _Facts, profile_id: str | None) -> ProbeResult:
    ledger = _Ledger()
    info = facts.probe.get("device", {})
    machine = str(info.get("machine") or "")
    arch = normalize_arch(machine)
    ledger.read("compute.arch", f"machine {machine}")
    if machine.lower() in ("armv6l", "armv8l"):
        ledger.notes.append(f"machine is {machine}; the schema has no such arch, armv7l written")
    cpus = _parse_cpuinfo(facts.cpuinfo or "")
    board = _board(facts.files)
    compute = _compute(facts, arch, cpus, ledger)
    memory = _memory(facts, ledger)
    storage = _storage(facts, ledger)
    accelerators = _accelerators(facts, board, ledger)
    runtimes = _runtimes(facts, arch, accelerators, ledger)
    catalog = next((cid for rx, cid in CATALOG_BOARDS if board and rx.search(board)), None)
    power = _power(compute, cpus, catalog, ledger)
    link = _link(facts, ledger)
    access = _access(facts, ledger)
    hostname = str(info.get("hostname") or "")
    pid = profile_id or profile_id_from(hostname or (facts.spec.host if facts.spec else ""))
    if profile_id is None:
        ledger.read("id", f"host name {hostname!r}" if hostname else "the host address")
    who = (f"{facts.spec.user}@{facts.spec.host}" if facts.spec is not None
           else f"{hostname or 'this host'}, embedded local device")
    name = f"{board or compute['cpu']} ({who})"
    ledger.read("name", ("device-tree/DMI model" if board else "the CPU") + " and the address")
    if catalog:
        ledger.notes.append(f"looks like catalog profile '{catalog}' (by its model {board!r}): "
                            f"`edge profiles show {catalog}` for its datasheet figures")
    data: dict[str, Any] = {"id": pid, "name": name, "source": "", "compute": compute,
                            "memory": memory, "storage": storage, "power": power,
                            "accelerators": accelerators, "runtimes": runtimes, "link": link,
                            "access": access}
    data["source"] = _source(facts, ledger)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:  # a probe bug must still be one line
        raise DeviceError(f"{facts.where}: the probed profile does not validate: "
                          f"{first_line(exc)}") from None
    return ProbeResult(data=data, profile=profile, measured=dict(ledger.measured),
                       assumed=dict(ledger.assumed), notes=tuple(ledger.notes),
                       where=facts.where, device=dict(facts.probe))


def _parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per block (processors, and the trailing board block on ARM)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip().lower()] = value.strip()
    return blocks


def _board(files: dict[str, str]) -> str | None:
    for path in _MODEL_FILES[:2]:
        if files.get(path):
            return files[path].strip()
    product = files.get("/sys/devices/virtual/dmi/id/product_name", "").strip()
    vendor = files.get("/sys/devices/virtual/dmi/id/sys_vendor", "").strip()
    junk = {"", "to be filled by o.e.m.", "system product name", "default string", "none"}
    if product.lower() in junk:
        return None
    if vendor.lower() not in junk and not product.lower().startswith(vendor.lower()):
        return f"{vendor} {product}"
    return product


def _processors(cpus: list[dict[str, str]]) -> list[dict[str, str]]:
    return [b for b in cpus if "processor" in b or "hart" in b]


def _part_name(block: dict[str, str]) -> str | None:
    try:
        implementer = int(block.get("cpu implementer", ""), 16)
        part = int(block.get("cpu part", ""), 16)
    except ValueError:
        return None
    if implementer == 0x41:
        return ARM_PARTS.get(part, f"Arm core 0x{part:03x}")
    return f"CPU implementer 0x{implementer:02x} part 0x{part:03x}"


def _clean_model_name(name: str) -> str:
    name = re.sub(r"\((R|TM|tm|r)\)", "", name)
    name = re.sub(r"\s*@\s*[\d.]+\s*GHz", "", name)
    name = re.sub(r"\b(CPU|Processor)\b(?=\s*$)", "", name)
    return re.sub(r"\s+", " ", name).strip() or "unknown"


def _isa(arch: str, cpus: list[dict[str, str]]) -> tuple[list[str], str]:
    procs = _processors(cpus) or cpus
    first = procs[0] if procs else {}
    if arch == "x86_64":
        flags = set(first.get("flags", "").split())
        found = [f for f in X86_ISA if f in flags]
        return found or (["avx"] if "avx" in flags else []), "/proc/cpuinfo flags"
    if arch in ("aarch64", "armv7l"):
        features = set(first.get("features", "").split())
        isa: list[str] = []
        for flag, name in ARM_ISA:
            if flag in features and name not in isa:
                isa.append(name)
        if arch == "aarch64" and not features:  # ASIMD is mandatory in ARMv8-A
            return ["neon"], "ARMv8-A baseline (no Features line in /proc/cpuinfo)"
        return isa, "/proc/cpuinfo Features"
    text = first.get("isa", "")
    base = text.split("_")[0]
    return (["rvv"] if base.startswith("rv64") and "v" in base[4:] else []), "/proc/cpuinfo isa"


def _compute(facts: _Facts, arch: str, cpus: list[dict[str, str]],
             ledger: _Ledger) -> dict[str, Any]:
    info = facts.probe.get("device", {})
    procs = _processors(cpus)
    cores = int(info.get("cores") or len(procs) or 1)
    ledger.read("compute.cores", "os.cpu_count() on the device" if info.get("cores")
                else "processors in /proc/cpuinfo")
    parts = [_part_name(p) for p in procs]
    counts: dict[str, int] = {}
    for part in parts:
        if part:
            counts[part] = counts.get(part, 0) + 1
    if counts:
        order = sorted(counts, key=lambda p: -_fpc_arm(p, []))
        cpu = (order[0] if len(order) == 1 else
               " + ".join(f"{counts[p]}x {p}" for p in order))
        ledger.read("compute.cpu", "/proc/cpuinfo CPU part")
    elif procs and procs[0].get("model name"):
        cpu = _clean_model_name(procs[0]["model name"])
        ledger.read("compute.cpu", "/proc/cpuinfo model name")
    elif procs and procs[0].get("uarch"):
        cpu = procs[0]["uarch"]
        ledger.read("compute.cpu", "/proc/cpuinfo uarch")
    else:
        cpu = str(info.get("cpu") or "unknown")
        if cpu != "unknown":
            ledger.read("compute.cpu", "the agent (platform.processor)")
        else:
            ledger.assume("compute.cpu", "not found in /proc/cpuinfo: name it")

    per_cpu = []
    for i in range(cores):
        khz = _int(facts.files.get(f"/sys/devices/system/cpu/cpu{i}/cpufreq/cpuinfo_max_freq"))
        per_cpu.append(khz / 1e6 if khz else None)
    known = [g for g in per_cpu if g]
    mhz = [float(p["cpu mhz"]) for p in procs if _is_float(p.get("cpu mhz"))]
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", procs[0].get("model name", "")) if procs else None
    if known:
        clock = max(known)
        ledger.read("compute.clock_ghz", "cpufreq cpuinfo_max_freq (highest core)")
    elif nominal:
        clock = float(nominal.group(1))
        ledger.read("compute.clock_ghz", "the base clock in /proc/cpuinfo model name")
    elif mhz:
        clock = max(mhz) / 1000
        ledger.read("compute.clock_ghz", "/proc/cpuinfo cpu MHz, the current clock: no cpufreq "
                    "max is exposed, so turbo is not seen")
    else:
        clock = 1.0
        ledger.assume("compute.clock_ghz", "no cpufreq or MHz on the device: placeholder 1.0 GHz")
    clock = round(clock, 2)

    isa, how = _isa(arch, cpus)
    ledger.read("compute.isa", how)
    compute: dict[str, Any] = {"arch": arch, "cpu": cpu, "cores": cores, "clock_ghz": clock,
                               "isa": isa}
    peak, why = _peak(arch, cpus, parts, per_cpu, clock, cores, isa)
    if peak:
        compute["peak_gops"] = peak
        ledger.assume("compute.peak_gops", f"estimated, not measured: {why}")
    if facts.nproc and facts.nproc < cores:
        compute["threads"] = facts.nproc
        ledger.read("compute.threads", f"nproc: this user may run on {facts.nproc} of "
                    f"{cores} CPUs")
    return compute


def _is_float(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True


def _fpc_arm(part: str | None, isa: list[str]) -> float:
    cls = CORE_CLASS.get(part or "")
    if cls is None:
        return 16.0 if "dotprod" in isa else 8.0
    return CORE_CLASSES[cls][0]


def _peak(arch: str, cpus: list[dict[str, str]], parts: list[str | None],
          per_cpu: list[float | None], clock: float, cores: int,
          isa: list[str]) -> tuple[dict[str, float], str]:
    """Peak GOPS per precision: cores x clock x FLOP per cycle by core and ISA (an estimate)."""
    if arch in ("aarch64", "armv7l"):
        fp32 = 0.0
        for i in range(cores):
            part = parts[i] if i < len(parts) else None
            fp32 += (per_cpu[i] or clock) * _fpc_arm(part, isa)
        int8 = 4 if "dotprod" in isa else 2
        peak = {"fp32": fp32}
        if "fp16" in isa:
            peak["fp16"] = 2 * fp32
        peak["int8"] = int8 * fp32
        why = ("sum over cores of clock x fp32 FLOP/cycle (4 for A53-class, 8 for "
               "A55/A72-class, 16 for A76-class, 32 for X-class cores)"
               + (", 2x for fp16" if "fp16" in isa else "")
               + (", 4x for int8 (SDOT)" if int8 == 4 else ", 2x for int8 (no SDOT)"))
    elif arch == "x86_64":
        procs = _processors(cpus)
        physical = len({(p.get("physical id"), p.get("core id")) for p in procs
                        if "core id" in p}) or cores
        if "avx512f" in isa:
            fpc, unit = 64, "2x AVX-512 FMA"
        elif "avx2" in isa and "fma" in isa:
            fpc, unit = 32, "2x 256-bit FMA"
        elif "avx" in isa:
            fpc, unit = 16, "AVX without FMA"
        else:
            fpc, unit = 8, "SSE"
        base = physical * clock
        peak = {"fp32": base * fpc}
        why = f"{physical} physical cores x {clock:g} GHz x {fpc} fp32 FLOP/cycle ({unit})"
        if "amx_bf16" in isa:
            peak["bf16"] = base * 1024
            why += ", x 1024 for bf16 (AMX)"
        elif "avx512_bf16" in isa:
            peak["bf16"] = base * fpc * 2
            why += ", 2x for bf16"
        if "avx512_fp16" in isa:
            peak["fp16"] = base * fpc * 2
            why += ", 2x for fp16"
        if "amx_int8" in isa:
            peak["int8"], note = base * 2048, "x 2048 for int8 (AMX)"
        elif "avx512_vnni" in isa or "avx_vnni" in isa:
            peak["int8"], note = base * fpc * 4, "4x for int8 (VNNI)"
        else:
            peak["int8"], note = base * fpc * 2, "2x for int8 (no VNNI)"
        why += f", {note}; two FMA units assumed (some parts have one)"
    else:
        peak = {"fp32": cores * clock * 2}
        why = f"{cores} cores x {clock:g} GHz x 2 fp32 FLOP/cycle (scalar FMA; RVV not counted)"
    order = ("fp32", "fp16", "bf16", "int8")
    return {k: round(peak[k], 1) for k in order if k in peak}, why


def _memory(facts: _Facts, ledger: _Ledger) -> dict[str, Any]:
    ram = facts.probe.get("device", {}).get("mem_total_mb")
    if ram:
        ledger.read("memory.ram_mb", "/proc/meminfo MemTotal")
    else:
        ram = 1024
        ledger.assume("memory.ram_mb", "/proc/meminfo unreadable: placeholder 1024 MB")
    ram = int(ram)
    budget = max(1, ram // 4)
    why = "a quarter of RAM, as the catalog's boards"
    limit = None
    for path in _CGROUP_FILES:
        value = _int(facts.files.get(path))
        if value and value < ram * 2**20:
            limit = value // 2**20
    if limit:
        budget = max(1, min(budget, limit // 4))
        why += f"; capped by the cgroup memory limit of {limit} MB"
        ledger.notes.append(f"a cgroup limits this login to {limit} MB of the {ram} MB RAM")
    ledger.assume("memory.model_budget_mb", why)
    return {"ram_mb": ram, "model_budget_mb": budget}


def _df(text: str | None) -> tuple[str, int] | None:
    for line in reversed((text or "").splitlines()):
        fields = line.split()
        if len(fields) >= 6 and fields[1].isdigit():
            return fields[0], int(fields[1])
    return None


_NOT_DISKS = re.compile(r"^(loop|ram|zram|dm-|md|sr|nbd|mtdblock|fd)|boot\d+$|rpmb$")


def _disk_of(source: str, disks: list[str]) -> str | None:
    name = source.removeprefix("/dev/")
    for disk in sorted(disks, key=len, reverse=True):
        if name == disk or (name.startswith(disk) and re.fullmatch(r"p?\d+", name[len(disk):])):
            return disk
    return None


def _disk_candidates(facts: _Facts) -> list[str]:
    disks = [d for d in facts.listing.get("/sys/block", []) if not _NOT_DISKS.search(d)]
    df = _df(facts.df)
    found = _disk_of(df[0], disks) if df else None
    return [found] if found else disks[:8]


def _storage(facts: _Facts, ledger: _Ledger) -> dict[str, Any]:
    df = _df(facts.df)
    if df:
        source, kib = df
        capacity = max(0.1, round(kib * 1024 / 1e9, 1))
        ledger.read("storage.capacity_gb", f"df of {facts.work} ({source}): the filesystem's "
                    "size, not the whole disk")
    else:
        source, capacity = "", 16.0
        ledger.assume("storage.capacity_gb", f"df of {facts.work} failed: placeholder 16 GB")
    disks = [d for d in facts.listing.get("/sys/block", []) if not _NOT_DISKS.search(d)]
    disk = _disk_of(source, disks)
    how = f"/sys/block/{disk} (holds {source})"
    if disk is None and len(disks) == 1:
        disk, how = disks[0], f"/sys/block/{disks[0]}, the only disk ({source or 'df'} is not one)"
    kind = _disk_kind(disk, facts.files) if disk else None
    if kind:
        ledger.assume("storage.kind", f"guessed from {how}")
    else:
        kind = "unknown"
        ledger.assume("storage.kind", f"cannot tell the disk behind {source or facts.work}: "
                      "placeholder; write emmc, microsd, nvme, ssd, ufs, ...")
    return {"kind": kind, "capacity_gb": capacity}


def _disk_kind(disk: str, files: dict[str, str]) -> str | None:
    attr = {k: files.get(f"/sys/block/{disk}/{k}", "").strip()
            for k in ("queue/rotational", "removable", "device/type")}
    if disk.startswith("mmcblk"):
        return {"SD": "microsd", "MMC": "emmc"}.get(attr["device/type"], "emmc")
    if disk.startswith("nvme"):
        return "nvme"
    if disk.startswith(("vd", "xvd")):
        return "virtual"
    if disk.startswith(("sd", "hd")):
        if attr["removable"] == "1":
            return "usb"
        return {"1": "hdd", "0": "ssd"}.get(attr["queue/rotational"])
    return None


def _uevent(text: str | None) -> dict[str, str]:
    pairs = (line.partition("=") for line in (text or "").splitlines())
    return {k.strip(): v.strip() for k, sep, v in pairs if sep}


def _accelerators(facts: _Facts, board: str | None, ledger: _Ledger) -> list[dict[str, Any]]:
    dev = facts.listing.get("/dev", [])
    found: list[dict[str, Any]] = []
    evidence: list[str] = []

    def add(kind: str, name: str, precisions: list[str], runtime: str, where: str,
            tops: float | None = None) -> None:
        entry: dict[str, Any] = {"kind": kind, "name": name}
        if tops:
            entry["tops"] = tops
        entry |= {"precisions": precisions, "runtime": runtime}
        found.append(entry)
        evidence.append(f"{where} ({kind} via {runtime})")

    if any(n.startswith("nvhost") for n in dev):
        add("gpu", f"NVIDIA integrated GPU{f' ({board})' if board else ''}", ["fp32", "fp16"],
            "tensorrt", "/dev/nvhost-*")
    for i, node in enumerate(sorted(n for n in dev if re.fullmatch(r"nvidia\d+", n))):
        name = facts.gpu_names[i] if i < len(facts.gpu_names) else f"NVIDIA GPU (/dev/{node})"
        add("gpu", name, ["fp32", "fp16"], "tensorrt", f"/dev/{node}")
    for node in sorted(n for n in dev if re.fullmatch(r"apex_\d+", n)):
        add("tpu", "Google Edge TPU (PCIe)", ["int8"], "edgetpu", f"/dev/{node}", tops=4)
    for node in sorted(facts.listing.get("/dev/dri", [])):
        if not node.startswith("renderD"):
            continue
        driver = _uevent(facts.files.get(f"/sys/class/drm/{node}/device/uevent")).get("DRIVER", "")
        where = f"/dev/dri/{node} (driver {driver or 'unknown'})"
        low = driver.lower()
        if low in ("i915", "xe"):
            add("gpu", f"Intel GPU ({driver})", ["fp32", "fp16", "int8"], "openvino", where)
        elif low in ("panfrost", "panthor", "mali", "mali_kbase"):
            add("gpu", f"Arm Mali GPU ({driver})", ["fp32", "fp16"], "tflite", where)
        elif low in ("msm", "msm_drm"):
            add("gpu", "Qualcomm Adreno GPU", ["fp32", "fp16"], "tflite", where)
        elif low in ("nvidia", "tegra", "nvgpu") and found:
            continue  # already listed from /dev/nvhost-* or /dev/nvidiaN
        elif low == "rknpu":
            ledger.notes.append(f"Rockchip NPU at {where}: reached only by Rockchip's RKNN "
                                "runtime, not one of edge's runtimes; not listed")
        else:
            why = {"v3d": "the Raspberry Pi VideoCore GPU", "vc4": "the Raspberry Pi VideoCore GPU",
                   "amdgpu": "an AMD GPU", "etnaviv": "a Vivante GPU",
                   "virtio_gpu": "a virtual GPU"}.get(low, "a GPU")
            ledger.notes.append(f"{where}: {why} that no edge runtime reaches; not listed")
    if "mali0" in dev and not any("Mali" in a["name"] for a in found):
        add("gpu", "Arm Mali GPU (mali_kbase)", ["fp32", "fp16"], "tflite", "/dev/mali0")
    for node in sorted(facts.listing.get("/dev/accel", [])):
        driver = _uevent(facts.files.get(f"/sys/class/accel/{node}/device/uevent")).get(
            "DRIVER", "")
        if driver == "intel_vpu":
            add("npu", "Intel NPU", ["fp16", "int8"], "openvino", f"/dev/accel/{node}")
        else:
            ledger.notes.append(f"/dev/accel/{node} (driver {driver or 'unknown'}): an "
                                "accelerator edge has no runtime mapping for; not listed")
    if any(n.startswith("fastrpc-cdsp") for n in dev):
        add("dsp", "Qualcomm Hexagon DSP (cDSP)", ["int8", "int16"], "qnn", "/dev/fastrpc-cdsp*")
    misc = set(facts.listing.get("/sys/class/misc", []))
    if ("rknpu" in dev or "rknpu" in misc) and not any("RKNN" in n for n in ledger.notes):
        ledger.notes.append("Rockchip NPU (rknpu): reached only by Rockchip's RKNN runtime, not "
                            "one of edge's runtimes; not listed")
    for node, what in (("galcore", "Vivante galcore driver (GPU; on i.MX 8M Plus also the NPU, "
                        "reached by TFLite's VX delegate): add the NPU if your SoC has one"),
                       ("vchiq", "VideoCore firmware interface (Raspberry Pi): no edge runtime"),
                       ("hailo0", "Hailo accelerator: HailoRT is not one of edge's runtimes"),
                       ("kfd", "AMD ROCm compute: no edge runtime reaches it")):
        if node in dev:
            ledger.notes.append(f"/dev/{node}: {what}; not listed")
    if found:
        ledger.read("accelerators", "device nodes " + ", ".join(evidence) + "; precisions are "
                    "conservative, tops left out unless a datasheet figure is known")
    else:
        ledger.read("accelerators", "no accelerator device nodes in /dev, /dev/dri, /dev/accel "
                    "(a USB accelerator such as a Coral USB stick is not detected)")
    return found


def _runtimes(facts: _Facts, arch: str, accelerators: list[dict[str, Any]],
              ledger: _Ledger) -> list[str]:
    installed = {k: v for k, v in (facts.probe.get("runtimes") or {}).items() if k in RUNTIMES}
    installed |= {k: "found" for k, ok in facts.extra_runtimes.items() if ok and k in RUNTIMES}
    cpu_order = (("onnxruntime", "openvino", "tflite") if arch == "x86_64"
                 else ("tflite", "onnxruntime", "openvino"))
    order: list[str] = []
    missing: list[str] = []
    for accel in accelerators:
        runtime = accel["runtime"]
        if runtime not in order:
            order.append(runtime)
            if runtime not in installed:
                missing.append(runtime)
    order += [r for r in cpu_order if r in installed and r not in order]
    order += [r for r in installed if r not in order]
    python = f"{facts.python} (python {facts.probe.get('device', {}).get('python', '?')})"
    if installed:
        found = ", ".join(f"{k} {v}" for k, v in installed.items())
        ledger.read("runtimes", f"importable by {python}: {found}; ordered accelerators first")
    if missing:
        ledger.assume("runtimes", f"{', '.join(missing)} listed for the accelerator found, but "
                      f"not found in {facts.python}: install it or remove both")
    if not order:
        order = [cpu_order[0]]
        ledger.assume("runtimes", f"no runtime importable by {python}: placeholder "
                      f"{cpu_order[0]}; pip install ai-edge-litert, onnxruntime or openvino "
                      "into that python")
    return order


def _power(compute: dict[str, Any], cpus: list[dict[str, str]], catalog: str | None,
           ledger: _Ledger) -> dict[str, Any]:
    if catalog:
        from edge.core.profile import load_profile

        base = load_profile(catalog).power
        why = f"copied from catalog profile {catalog} (not measured on this device)"
        ledger.assume("power.idle_w", why)
        ledger.assume("power.max_w", why)
        return {"idle_w": base.idle_w, "max_w": base.max_w}
    arch, cores = compute["arch"], compute["cores"]
    if arch == "x86_64":
        physical = len({(p.get("physical id"), p.get("core id")) for p in _processors(cpus)
                        if "core id" in p}) or cores
        idle, max_w = 15.0, 15.0 + 6.0 * physical
        why = (f"guessed from edge's table for x86-64 boxes: idle 15 W, +6 W per loaded core "
               f"x {physical} cores, the scale of the x86-64 catalog entry")
    elif arch == "riscv64":
        idle, max_w = 1.5, 1.5 + 0.75 * cores
        why = "guessed from edge's table for RISC-V boards: idle 1.5 W, +0.75 W per loaded core"
    else:
        parts = [_part_name(p) for p in _processors(cpus)] or [None] * cores
        classes = [CORE_CLASS.get(p or "", "little" if arch == "armv7l" else "mid")
                   for p in parts]
        idle = max(CORE_CLASSES[c][1] for c in classes)
        max_w = idle + sum(CORE_CLASSES[c][2] for c in classes)
        why = ("guessed from edge's table for Arm boards by core class: A53-class 1 W idle "
               "+0.6 W per loaded core, A72-class 2.5 W +1 W, A76-class 2.7 W +1.5 W")
    why += "; not measured: measure at the power supply and replace"
    ledger.assume("power.idle_w", why)
    ledger.assume("power.max_w", why)
    return {"idle_w": round(idle, 1), "max_w": round(max_w, 1)}


def _default_iface(route: str) -> str | None:
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] == "00000000":
            try:
                if int(fields[3], 16) & 1:
                    return fields[0]
            except ValueError:
                continue
    return None


def _link(facts: _Facts, ledger: _Ledger) -> dict[str, Any]:
    iface = _default_iface(facts.files.get("/proc/net/route", ""))
    kind, how = "ethernet", "no default route found: placeholder"
    speed = None
    if iface:
        devtype = _uevent(facts.files.get(f"/sys/class/net/{iface}/uevent")).get("DEVTYPE", "")
        driver = _uevent(facts.files.get(f"/sys/class/net/{iface}/device/uevent")).get("DRIVER")
        if devtype == "wlan" or iface.startswith("wl"):
            kind = "wifi"
        elif devtype == "wwan" or iface.startswith(("ww", "rmnet")):
            kind = "lte"
        how = f"guessed from the default route's interface {iface}"
        if kind == "ethernet" and driver and driver not in ("virtio_net", "vif", "hv_netvsc"):
            speed = _int(facts.files.get(f"/sys/class/net/{iface}/speed"))
            if speed is not None and speed <= 0:
                speed = None
    up, down, rtt = LINK_PLACEHOLDERS[kind]
    ledger.assume("link.kind", how + " (wifi5, wifi6, 5g, ... are more precise)")
    if speed:
        up = down = round(speed * 0.94, 1)
        why = (f"{iface}'s negotiated {speed} Mbps x 0.94 (TCP): an upper bound, the path to "
               "the cloud is often slower; measure (iperf3) and replace")
    else:
        why = f"placeholder for {kind}: measure your uplink/downlink (iperf3) and replace"
    ledger.assume("link.uplink_mbps", why)
    ledger.assume("link.downlink_mbps", why)
    ledger.assume("link.rtt_ms", "placeholder: measure the round trip to your cloud region "
                  "(ping) and replace")
    return {"kind": kind, "uplink_mbps": up, "downlink_mbps": down, "rtt_ms": rtt}


def _access(facts: _Facts, ledger: _Ledger) -> dict[str, Any]:
    if facts.spec is None:
        ledger.read("access", "the embedded local device, run with this python")
        return {"transport": "local", "python": facts.python, "work_dir": WORK_DIR}
    ledger.read("access", "the connection this probe used (user, host, port, python)")
    return {"transport": "ssh", "user": facts.spec.user, "host": facts.spec.host,
            "port": facts.spec.port, "python": facts.python, "work_dir": WORK_DIR}


def _source(facts: _Facts, ledger: _Ledger) -> str:
    day = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    text = (f"Probed from {facts.where} on {day} by edge devices probe. Read from the device: "
            f"{_grouped(ledger.measured)}. Assumed or estimated, edit these: "
            f"{_grouped(ledger.assumed)}.")
    if ledger.notes:
        text += " Also found: " + "; ".join(ledger.notes) + "."
    return text


_KEY_ORDER = ("id", "name", "compute.arch", "compute.cpu", "compute.cores", "compute.threads",
              "compute.clock_ghz", "compute.isa", "compute.peak_gops", "memory.ram_mb",
              "memory.model_budget_mb", "storage.kind", "storage.capacity_gb", "power.idle_w",
              "power.max_w", "accelerators", "runtimes", "link.kind", "link.uplink_mbps",
              "link.downlink_mbps", "link.rtt_ms", "access")


def _grouped(entries: dict[str, str]) -> str:
    """'a, b (why); c (why)': keys in profile order, keys sharing an explanation together."""
    keys = sorted(entries, key=lambda k: _KEY_ORDER.index(k) if k in _KEY_ORDER else 99)
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(entries[key], []).append(key)
    return "; ".join(f"{', '.join(ks)} ({why})" for why, ks in groups.items()) or "nothing"


# ---------------------------------------------------------------------------- rendering


def _render(result: ProbeResult) -> str:
    data = result.data
    lines = [f"# Written by `edge devices probe` from {result.where}.",
             "# 'read:' values come from the device; 'ASSUMED:' values are estimates or",
             "# placeholders: edit them, and the source: text, before relying on them.",
             "# Check with: edge profiles validate THIS_FILE"]
    for key in ("id", "name"):
        lines.append(_line(key, data[key], _comment(result, key), 0))
    lines.append("source: >-")
    lines += textwrap.wrap(data["source"], 96, initial_indent="  ", subsequent_indent="  ",
                           break_on_hyphens=False, break_long_words=False)
    for section in ("compute", "memory", "storage", "power"):
        lines.append(f"{section}:")
        for key, value in data[section].items():
            lines.append(_line(key, value, _comment(result, f"{section}.{key}"), 2))
    accels = data["accelerators"]
    comment = _comment(result, "accelerators")
    if not accels:
        lines.append(_line("accelerators", [], comment, 0))
    else:
        lines.append(f"accelerators:  # {comment}" if comment else "accelerators:")
        lines += [f"  - {_flow(a)}" for a in accels]
    lines.append(_line("runtimes", data["runtimes"], _comment(result, "runtimes"), 0))
    for section in ("link", "access"):
        comment = _comment(result, section)
        lines.append(f"{section}:  # {comment}" if comment else f"{section}:")
        for key, value in data[section].items():
            lines.append(_line(key, value, _comment(result, f"{section}.{key}"), 2))
    text = "\n".join(lines) + "\n"
    if _parsed(text) != _plain(data):  # never write a file that reads back differently
        text = "# Written by `edge devices probe`; see source: for what was read or assumed.\n" \
            + yaml.safe_dump(_plain(data), sort_keys=False, width=96)
    Profile.model_validate(_parsed(text))
    return text


def _comment(result: ProbeResult, key: str) -> str:
    if key in result.assumed:
        text = f"ASSUMED: {result.assumed[key]}"
    elif key in result.measured:
        text = f"read: {result.measured[key]}"
    else:
        return ""
    text = text.replace("\n", " ").split("; ")[0]
    if len(text) > 110:
        text = text[:110].rsplit(" ", 1)[0] + " ... (see source)"
    return text


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _line(key: str, value: Any, comment: str, indent: int) -> str:
    line = f"{' ' * indent}{key}: {_flow(value)}"
    return f"{line}  # {comment}" if comment else line


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parsed(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _link_exclusive(tmp: Path, out: Path) -> None:
    """Publish ``tmp`` as ``out`` only if ``out`` does not exist (no race with another writer)."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise UsageError(f"{out} exists: choose another -o, or remove it first") from None
    except OSError:  # no hard links on this filesystem
        if out.exists():
            raise UsageError(f"{out} exists: choose another -o, or remove it first") from None
        os.replace(tmp, out)

