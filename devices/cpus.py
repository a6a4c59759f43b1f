"""What edge knows about CPUs and boards, for ``edge devices probe``: machine names -> the
schema's arch, ARM part numbers -> core names and classes, /proc/cpuinfo features -> the ISA
vocabulary of the catalog, peak GOPS estimates, and boards that have a catalog profile.
Pure data and small functions of parsed /proc/cpuinfo blocks (devices.readings.parse_cpuinfo).
"""

from __future__ import annotations

import re

from edge.core.errors import DeviceError

__all__ = ["ARCH_ALIASES", "ARM_PARTS", "CATALOG_BOARDS", "CORE_CLASS", "CORE_CLASSES",
           "catalog_board", "clean_model_name", "cpu_isa", "fpc_arm", "normalize_arch",
           "part_name", "peak_gops", "physical_cores", "processors"]

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


def normalize_arch(machine: str) -> str:
    """The schema's ``compute.arch`` for a ``platform.machine()`` value; DeviceError if none."""
    arch = ARCH_ALIASES.get(machine.strip().lower())
    if arch is None:
        raise DeviceError(f"the device's architecture '{machine}' is not one edge profiles "
                          "describe (aarch64, armv7l, x86_64, riscv64)")
    return arch


def catalog_board(board: str | None) -> str | None:
    """The catalog profile id of a device-tree/DMI model, if edge knows the board."""
    return next((cid for rx, cid in CATALOG_BOARDS if board and rx.search(board)), None)


def processors(cpus: list[dict[str, str]]) -> list[dict[str, str]]:
    """The processor blocks of /proc/cpuinfo (not the trailing board block on ARM)."""
    return [b for b in cpus if "processor" in b or "hart" in b]


def part_name(block: dict[str, str]) -> str | None:
    """The core name of a processor block by its CPU implementer and part, if it has them."""
    try:
        implementer = int(block.get("cpu implementer", ""), 16)
        part = int(block.get("cpu part", ""), 16)
    except ValueError:
        return None
    if implementer == 0x41:
        return ARM_PARTS.get(part, f"Arm core 0x{part:03x}")
    return f"CPU implementer 0x{implementer:02x} part 0x{part:03x}"


def clean_model_name(name: str) -> str:
    """An x86 ``model name`` without trademarks, the base clock and a trailing CPU."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", name)
    name = re.sub(r"\s*@\s*[\d.]+\s*GHz", "", name)
    name = re.sub(r"\b(CPU|Processor)\b(?=\s*$)", "", name)
    return re.sub(r"\s+", " ", name).strip() or "unknown"


def cpu_isa(arch: str, cpus: list[dict[str, str]]) -> tuple[list[str], str]:
    """The catalog's ISA names the first processor has, and where they were read."""
    procs = processors(cpus) or cpus
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


def fpc_arm(part: str | None, isa: list[str]) -> float:
    """fp32 FLOP per cycle of one Arm core (by its class; unknown cores by their ISA)."""
    cls = CORE_CLASS.get(part or "")
    if cls is None:
        return 16.0 if "dotprod" in isa else 8.0
    return CORE_CLASSES[cls][0]


def physical_cores(cpus: list[dict[str, str]], cores: int) -> int:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo, else ``cores``."""
    return len({(p.get("physical id"), p.get("core id")) for p in processors(cpus)
                if "core id" in p}) or cores


def peak_gops(arch: str, cpus: list[dict[str, str]], parts: list[str | None],
              per_cpu: list[float | None], clock: float, cores: int,
              isa: list[str]) -> tuple[dict[str, float], str]:
    """Peak GOPS per precision: cores x clock x FLOP per cycle by core and ISA (an estimate),
    and how it was estimated."""
    if arch in ("aarch64", "armv7l"):
        peak, why = _arm_peak(parts, per_cpu, clock, cores, isa)
    elif arch == "x86_64":
        peak, why = _x86_peak(physical_cores(cpus, cores), clock, isa)
    else:
        peak = {"fp32": cores * clock * 2}
        why = f"{cores} cores x {clock:g} GHz x 2 fp32 FLOP/cycle (scalar FMA; RVV not counted)"
    order = ("fp32", "fp16", "bf16", "int8")
    return {k: round(peak[k], 1) for k in order if k in peak}, why


def _arm_peak(parts: list[str | None], per_cpu: list[float | None], clock: float, cores: int,
              isa: list[str]) -> tuple[dict[str, float], str]:
    fp32 = 0.0
    for i in range(cores):
        part = parts[i] if i < len(parts) else None
        fp32 += (per_cpu[i] or clock) * fpc_arm(part, isa)
    int8 = 4 if "dotprod" in isa else 2
    peak = {"fp32": fp32}
    if "fp16" in isa:
        peak["fp16"] = 2 * fp32
    peak["int8"] = int8 * fp32
    why = ("sum over cores of clock x fp32 FLOP/cycle (4 for A53-class, 8 for "
           "A55/A72-class, 16 for A76-class, 32 for X-class cores)"
           + (", 2x for fp16" if "fp16" in isa else "")
           + (", 4x for int8 (SDOT)" if int8 == 4 else ", 2x for int8 (no SDOT)"))
    return peak, why


def _x86_fpc(isa: list[str]) -> tuple[int, str]:
    if "avx512f" in isa:
        return 64, "2x AVX-512 FMA"
    if "avx2" in isa and "fma" in isa:
        return 32, "2x 256-bit FMA"
    if "avx" in isa:
        return 16, "AVX without FMA"
    return 8, "SSE"


def _x86_peak(physical: int, clock: float, isa: list[str]) -> tuple[dict[str, float], str]:
    fpc, unit = _x86_fpc(isa)
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
    return peak, why + f", {note}; two FMA units assumed (some parts have one)"
