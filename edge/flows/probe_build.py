"""``edge devices probe``: a profile built from a device's facts (devices.gather), each field
either read from the device or estimated, and the ledger saying which (edge.flows.probe_result).
Accelerators and runtimes: edge.flows.probe_accel. CPU knowledge: devices.cpus.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from devices.cpus import (
    CORE_CLASS,
    CORE_CLASSES,
    catalog_board,
    clean_model_name,
    cpu_isa,
    fpc_arm,
    normalize_arch,
    part_name,
    peak_gops,
    physical_cores,
    processors,
)
from devices.gather import Facts
from devices.readings import (
    board_model,
    default_iface,
    df_source,
    disk_of,
    disks,
    parse_cpuinfo,
    to_int,
    uevent,
)
from devices.ssh import HostSpec
from edge.core.errors import DeviceError, first_line
from edge.core.profile import Profile, load_profile
from edge.flows.probe_accel import accelerators, runtimes
from edge.flows.probe_result import Ledger, ProbeResult, source_text

__all__ = ["WORK_DIR", "build", "profile_id_from"]

WORK_DIR = "~/.edge"
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
#: Link placeholders per guessed kind: (uplink, downlink, rtt ms), as the catalog's boards.
LINK_PLACEHOLDERS = {"ethernet": (100.0, 100.0, 10.0), "wifi": (40.0, 80.0, 15.0),
                     "lte": (10.0, 40.0, 50.0)}


def profile_id_from(hostname: str) -> str:
    """A profile id (``^[a-z0-9][a-z0-9._-]*$``) made from a host name."""
    text = re.sub(r"[^a-z0-9._-]+", "-", hostname.strip().lower().split(".local")[0])
    text = re.sub(r"^[^a-z0-9]+", "", text).rstrip("-._")
    return text or "device"


def build(facts: Facts, spec: HostSpec | None, profile_id: str | None) -> ProbeResult:
    """The profile ``facts`` give (``spec``: how the device was reached over SSH, None for the
    local device; ``profile_id`` None: from the host name), validated."""
    ledger = Ledger()
    arch = _arch(facts, ledger)
    cpus = parse_cpuinfo(facts.cpuinfo or "")
    board = board_model(facts.files)
    compute = _compute(facts, arch, cpus, ledger)
    memory = _memory(facts, ledger)
    storage = _storage(facts, ledger)
    accels = accelerators(facts, board, ledger)
    order = runtimes(facts, arch, accels, ledger)
    catalog = catalog_board(board)
    power = _power(compute, cpus, catalog, ledger)
    link = _link(facts, ledger)
    access = _access(facts, spec, ledger)
    pid, name = _names(facts, spec, profile_id, board, compute["cpu"], ledger)
    if catalog:
        ledger.notes.append(f"looks like catalog profile '{catalog}' (by its model {board!r}): "
                            f"`edge profiles show {catalog}` for its datasheet figures")
    data: dict[str, Any] = {"id": pid, "name": name, "source": "", "compute": compute,
                            "memory": memory, "storage": storage, "power": power,
                            "accelerators": accels, "runtimes": order, "link": link,
                            "access": access}
    data["source"] = source_text(facts.where, ledger)
    return _result(data, facts, ledger)


def _arch(facts: Facts, ledger: Ledger) -> str:
    machine = str(facts.probe.get("device", {}).get("machine") or "")
    arch = normalize_arch(machine)
    ledger.read("compute.arch", f"machine {machine}")
    if machine.lower() in ("armv6l", "armv8l"):
        ledger.notes.append(f"machine is {machine}; the schema has no such arch, armv7l written")
    return arch


def _names(facts: Facts, spec: HostSpec | None, profile_id: str | None, board: str | None,
           cpu: str, ledger: Ledger) -> tuple[str, str]:
    """(id, name): the id given, else from the host name; the name from the board or CPU."""
    hostname = str(facts.probe.get("device", {}).get("hostname") or "")
    pid = profile_id or profile_id_from(hostname or (spec.host if spec else ""))
    if profile_id is None:
        ledger.read("id", f"host name {hostname!r}" if hostname else "the host address")
    who = (f"{spec.user}@{spec.host}" if spec is not None
           else f"{hostname or 'this host'}, embedded local device")
    ledger.read("name", ("device-tree/DMI model" if board else "the CPU") + " and the address")
    return pid, f"{board or cpu} ({who})"


def _result(data: dict[str, Any], facts: Facts, ledger: Ledger) -> ProbeResult:
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:  # a probe bug must still be one line
        raise DeviceError(f"{facts.where}: the probed profile does not validate: "
                          f"{first_line(exc)}") from None
    return ProbeResult(data=data, profile=profile, measured=dict(ledger.measured),
                       assumed=dict(ledger.assumed), notes=tuple(ledger.notes),
                       where=facts.where, device=dict(facts.probe))


def _compute(facts: Facts, arch: str, cpus: list[dict[str, str]],
             ledger: Ledger) -> dict[str, Any]:
    info = facts.probe.get("device", {})
    procs = processors(cpus)
    cores = int(info.get("cores") or len(procs) or 1)
    ledger.read("compute.cores", "os.cpu_count() on the device" if info.get("cores")
                else "processors in /proc/cpuinfo")
    parts = [part_name(p) for p in procs]
    cpu = _cpu_name(procs, parts, str(info.get("cpu") or "unknown"), ledger)
    per_cpu = []
    for i in range(cores):
        khz = to_int(facts.files.get(f"/sys/devices/system/cpu/cpu{i}/cpufreq/cpuinfo_max_freq"))
        per_cpu.append(khz / 1e6 if khz else None)
    clock = _clock(procs, per_cpu, ledger)
    isa, how = cpu_isa(arch, cpus)
    ledger.read("compute.isa", how)
    compute: dict[str, Any] = {"arch": arch, "cpu": cpu, "cores": cores, "clock_ghz": clock,
                               "isa": isa}
    peak, why = peak_gops(arch, cpus, parts, per_cpu, clock, cores, isa)
    if peak:
        compute["peak_gops"] = peak
        ledger.assume("compute.peak_gops", f"estimated, not measured: {why}")
    if facts.nproc and facts.nproc < cores:
        compute["threads"] = facts.nproc
        ledger.read("compute.threads", f"nproc: this user may run on {facts.nproc} of "
                    f"{cores} CPUs")
    return compute


def _cpu_name(procs: list[dict[str, str]], parts: list[str | None], agent: str,
              ledger: Ledger) -> str:
    """Arm cores by part ("4x Cortex-A76 + 4x Cortex-A55"), else the model name, else the
    agent's platform.processor()."""
    counts: dict[str, int] = {}
    for part in parts:
        if part:
            counts[part] = counts.get(part, 0) + 1
    if counts:
        order = sorted(counts, key=lambda p: -fpc_arm(p, []))
        ledger.read("compute.cpu", "/proc/cpuinfo CPU part")
        return order[0] if len(order) == 1 else " + ".join(f"{counts[p]}x {p}" for p in order)
    if procs and procs[0].get("model name"):
        ledger.read("compute.cpu", "/proc/cpuinfo model name")
        return clean_model_name(procs[0]["model name"])
    if procs and procs[0].get("uarch"):
        ledger.read("compute.cpu", "/proc/cpuinfo uarch")
        return procs[0]["uarch"]
    if agent != "unknown":
        ledger.read("compute.cpu", "the agent (platform.processor)")
    else:
        ledger.assume("compute.cpu", "not found in /proc/cpuinfo: name it")
    return agent


def _clock(procs: list[dict[str, str]], per_cpu: list[float | None], ledger: Ledger) -> float:
    """GHz: the highest cpufreq max, else the model name's base clock, else cpu MHz."""
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
    return round(clock, 2)


def _is_float(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True


def _memory(facts: Facts, ledger: Ledger) -> dict[str, Any]:
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
        value = to_int(facts.files.get(path))
        if value and value < ram * 2**20:
            limit = value // 2**20
    if limit:
        budget = max(1, min(budget, limit // 4))
        why += f"; capped by the cgroup memory limit of {limit} MB"
        ledger.notes.append(f"a cgroup limits this login to {limit} MB of the {ram} MB RAM")
    ledger.assume("memory.model_budget_mb", why)
    return {"ram_mb": ram, "model_budget_mb": budget}


def _storage(facts: Facts, ledger: Ledger) -> dict[str, Any]:
    df = df_source(facts.df)
    if df:
        source, kib = df
        capacity = max(0.1, round(kib * 1024 / 1e9, 1))
        ledger.read("storage.capacity_gb", f"df of {facts.work} ({source}): the filesystem's "
                    "size, not the whole disk")
    else:
        source, capacity = "", 16.0
        ledger.assume("storage.capacity_gb", f"df of {facts.work} failed: placeholder 16 GB")
    names = disks(facts.listing)
    disk = disk_of(source, names)
    how = f"/sys/block/{disk} (holds {source})"
    if disk is None and len(names) == 1:
        disk, how = names[0], f"/sys/block/{names[0]}, the only disk ({source or 'df'} is not one)"
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


def _power(compute: dict[str, Any], cpus: list[dict[str, str]], catalog: str | None,
           ledger: Ledger) -> dict[str, Any]:
    if catalog:
        base = load_profile(catalog).power
        why = f"copied from catalog profile {catalog} (not measured on this device)"
        ledger.assume("power.idle_w", why)
        ledger.assume("power.max_w", why)
        return {"idle_w": base.idle_w, "max_w": base.max_w}
    arch, cores = compute["arch"], compute["cores"]
    if arch == "x86_64":
        physical = physical_cores(cpus, cores)
        idle, max_w = 15.0, 15.0 + 6.0 * physical
        why = (f"guessed from edge's table for x86-64 boxes: idle 15 W, +6 W per loaded core "
               f"x {physical} cores, the scale of the x86-64 catalog entry")
    elif arch == "riscv64":
        idle, max_w = 1.5, 1.5 + 0.75 * cores
        why = "guessed from edge's table for RISC-V boards: idle 1.5 W, +0.75 W per loaded core"
    else:
        parts = [part_name(p) for p in processors(cpus)] or [None] * cores
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


def _link(facts: Facts, ledger: Ledger) -> dict[str, Any]:
    iface = default_iface(facts.files.get("/proc/net/route", ""))
    kind, how = "ethernet", "no default route found: placeholder"
    speed = None
    if iface:
        devtype = uevent(facts.files.get(f"/sys/class/net/{iface}/uevent")).get("DEVTYPE", "")
        driver = uevent(facts.files.get(f"/sys/class/net/{iface}/device/uevent")).get("DRIVER")
        if devtype == "wlan" or iface.startswith("wl"):
            kind = "wifi"
        elif devtype == "wwan" or iface.startswith(("ww", "rmnet")):
            kind = "lte"
        how = f"guessed from the default route's interface {iface}"
        if kind == "ethernet" and driver and driver not in ("virtio_net", "vif", "hv_netvsc"):
            speed = to_int(facts.files.get(f"/sys/class/net/{iface}/speed"))
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


def _access(facts: Facts, spec: HostSpec | None, ledger: Ledger) -> dict[str, Any]:
    if spec is None:
        ledger.read("access", "the embedded local device, run with this python")
        return {"transport": "local", "python": facts.python, "work_dir": WORK_DIR}
    ledger.read("access", "the connection this probe used (user, host, port, python)")
    return {"transport": "ssh", "user": spec.user, "host": spec.host, "port": spec.port,
            "python": facts.python, "work_dir": WORK_DIR}
