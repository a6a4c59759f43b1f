"""Vela, Arm's compiler for Ethos-U NPUs, run in its own toolchain environment.

ethos-u-vela 5.2.0 needs only numpy and flatbuffers, which do not clash with edge's, but it runs
in a toolchain environment all the same: edge's own dependencies stay as they are, and Vela is
a bounded child process (``python -m ethosu.vela``) whose failure is one line.

Every compile names the accelerator, system configuration and memory mode (``VelaConfig``, from
the device profile's accelerator options); Vela's own defaults (Ethos_U65_Client_Server /
Dedicated_Sram_384KB with a warning) are never used. System configurations that are not in
Arm's ``vela.ini`` are written into a generated ini beside the output (``SYSTEM_CONFIGS``).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from edge.core.files import write_atomic
from edge.core.toolchain import Toolchain, ToolchainError, run

__all__ = ["ACCELERATORS", "ARM_SYSTEM_CONFIGS", "DEFAULT", "MEMORY_MODES", "SYSTEM_CONFIGS",
           "TOOLCHAIN", "VELA", "VelaConfig", "VelaError", "VelaReport", "compile_model",
           "load_report", "save_report"]

TOOLCHAIN = Toolchain(
    name="ethos-u-vela",
    requirements=("ethos-u-vela==5.2.0", "numpy==2.4.6", "flatbuffers==25.12.19"),
    records=("ethos-u-vela",),
    wheels_mb=19, installed_mb=102,  # bench/results/toolchains-ethos-u-vela.json
)
VELA = TOOLCHAIN.pins["ethos-u-vela"]
TIMEOUT_S = 900  # one compile: Vela's scheduler on a large CNN takes minutes
ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                "ethos-u65-256", "ethos-u65-512")  # Ethos-U85 takes TOSA-first models: not here
#: System configurations and memory modes of Arm's ``config_files/Arm/vela.ini`` (5.2.0).
ARM_SYSTEM_CONFIGS = ("Ethos_U55_Deep_Embedded", "Ethos_U55_High_End_Embedded",
                      "Ethos_U65_Embedded", "Ethos_U65_Mid_End", "Ethos_U65_High_End",
                      "Ethos_U65_Client_Server")
MEMORY_MODES = ("Sram_Only", "Shared_Sram", "Dedicated_Sram", "Dedicated_Sram_256KB",
                "Dedicated_Sram_384KB", "Dedicated_Sram_512KB")
#: System configurations edge writes itself (name -> ini keys). NXP_iMX93: the i.MX 93's
#: Ethos-U65-256 at 1 GHz (0.5 TOPS = 256 MACs x 2 x 1 GHz, NXP's figure), its on-chip SRAM at
#: the NPU clock (16 GB/s on the 128-bit AXI port, as Arm's Ethos_U65_High_End) and 16-bit
#: LPDDR4X-3733 (7.5 GB/s: Dram_clock_scale 0.46875 of 16 GB/s); latencies as Arm's U65
#: configurations. Derived from NXP's datasheet figures, not from NXP's own Vela setup.
SYSTEM_CONFIGS: dict[str, dict[str, str]] = {
    "NXP_iMX93": {
        "core_clock": "1e9", "axi0_port": "Sram", "axi1_port": "Dram",
        "Sram_clock_scale": "1.0", "Sram_burst_length": "32", "Sram_read_latency": "32",
        "Sram_write_latency": "32", "Sram_max_reads": "16", "Sram_max_writes": "16",
        "Dram_clock_scale": "0.46875", "Dram_burst_length": "128", "Dram_read_latency": "500",
        "Dram_write_latency": "250", "Dram_max_reads": "24", "Dram_max_writes": "12",
    },
}
_GENERATED_INI = "edge_vela.ini"
_OPS = re.compile(r"^(CPU|NPU) operators = (\d+)", re.MULTILINE)
CHILD = Path(__file__).with_name("child.py")
NPU_OP = "ethos-u"  # the custom operator holding the NPU's command stream


class VelaError(Exception):
    """Vela could not compile a model, or its configuration is unknown (one line)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class VelaConfig:
    """What Vela compiles for: the NPU, the system around it and how memory is used."""

    accelerator: str  # --accelerator-config, e.g. ethos-u65-256
    system_config: str  # --system-config: Arm's vela.ini or SYSTEM_CONFIGS
    memory_mode: str  # --memory-mode: Arm's vela.ini

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Self:
        """From a profile accelerator's options (config, system_config, memory_mode); the
        i.MX 93 configuration (``DEFAULT``) for an option not given; VelaError for unknown ones."""
        config = cls(accelerator=options.get("config", DEFAULT.accelerator),
                     system_config=options.get("system_config", DEFAULT.system_config),
                     memory_mode=options.get("memory_mode", DEFAULT.memory_mode))
        config.check()
        return config

    def check(self) -> None:
        """Raise VelaError naming the first setting Vela does not know."""
        for value, known, what in (
                (self.accelerator, ACCELERATORS, "accelerator config"),
                (self.system_config, (*ARM_SYSTEM_CONFIGS, *SYSTEM_CONFIGS), "system_config"),
                (self.memory_mode, MEMORY_MODES, "memory_mode")):
            if value not in known:
                raise VelaError(f"Vela {VELA} has no {what} {value!r}; choose one of "
                                f"{', '.join(known)}")

    @property
    def label(self) -> str:
        """How notes and estimates name it: ``ethos-u65-256, NXP_iMX93, Dedicated_Sram_384KB``."""
        return f"{self.accelerator}, {self.system_config}, {self.memory_mode}"

    @property
    def slug(self) -> str:
        """A file-name part: ``ethos-u65-256_NXP_iMX93_Dedicated_Sram_384KB``."""
        return f"{self.accelerator}_{self.system_config}_{self.memory_mode}"

    def args(self, folder: Path) -> list[str]:
        """Vela's command-line options for this configuration (ini files included)."""
        configs = ["--config", "Arm/vela.ini"]
        if self.system_config in SYSTEM_CONFIGS:
            configs += ["--config", str(_write_ini(folder, self.system_config))]
        return [*configs, "--accelerator-config", self.accelerator,
                "--system-config", self.system_config, "--memory-mode", self.memory_mode]


#: Used when the profile gives no options (a plain ``--target ethos-u``): the i.MX 93's NPU.
DEFAULT = VelaConfig(accelerator="ethos-u65-256", system_config="NXP_iMX93",
                     memory_mode="Dedicated_Sram_384KB")


@dataclass(frozen=True, kw_only=True, slots=True)
class VelaReport:
    """Vela's summary of one compile: its performance estimate and operator split."""

    vela: str
    config: VelaConfig
    inference_time_s: float
    inferences_per_second: float
    cycles: int
    sram_kib: float
    dram_kib: float
    npu_ops: int
    cpu_ops: int
    cpu_fallbacks: tuple[str, ...]  # distinct TFLite builtin ops left to the CPU, in order

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """Rebuild from ``to_json`` output."""
        return cls(**{**data, "config": VelaConfig(**data["config"]),
                      "cpu_fallbacks": tuple(data["cpu_fallbacks"])})

    @property
    def summary(self) -> str:
        """One line: the estimate and the split."""
        return (f"Vela {self.vela} estimate for {self.config.label}: "
                f"{1000 * self.inference_time_s:.3f} ms/inference, {self.cycles} cycles, "
                f"{self.sram_kib:.1f} KiB SRAM; {self.npu_ops} ops on the NPU, "
                f"{self.cpu_ops} on the CPU")


def compile_model(source: Path, folder: Path, config: VelaConfig, *,
                  timeout_s: float = TIMEOUT_S) -> tuple[Path, VelaReport]:
    """Compile a full-int8 .tflite into ``folder``: Vela's ``*_vela.tflite`` and its report.

    Raises VelaError (one line) when the toolchain is not built or Vela fails.
    """
    config.check()
    folder.mkdir(parents=True, exist_ok=True)
    args = ["-m", "ethosu.vela", str(source), *config.args(folder), "--output-dir", str(folder)]
    try:
        out = run(TOOLCHAIN, args, timeout_s=timeout_s, cwd=folder, what=f"Vela {VELA}")
    except ToolchainError as exc:
        raise VelaError(str(exc)) from None
    compiled = folder / f"{source.stem}_vela.tflite"
    summary = folder / f"{source.stem}_summary_{config.system_config}.csv"
    if not compiled.is_file() or not summary.is_file():
        raise VelaError(f"Vela {VELA} wrote no {compiled.name} or summary for {source.name}")
    return compiled, _report(config, summary, out, _operators(compiled, timeout_s))


def _operators(compiled: Path, timeout_s: float) -> list[str]:
    """The compiled model's operators, read in the toolchain (child.py)."""
    try:
        out = run(TOOLCHAIN, [str(CHILD), str(compiled)], timeout_s=timeout_s,
                  cwd=compiled.parent, what=f"reading Vela's {compiled.name}")
        return [str(op) for op in json.loads(out)]
    except (ToolchainError, ValueError) as exc:
        raise VelaError(str(exc)) from None


def _report(config: VelaConfig, summary: Path, stdout: str, ops: list[str]) -> VelaReport:
    """Vela's summary CSV (figures), its stdout (operator split) and the operators the compiled
    model leaves to the CPU (every one but the NPU's own, by TFLite builtin name)."""
    with open(summary, encoding="utf-8", newline="") as handle:
        row = next(csv.DictReader(handle))
    counts = {kind: int(n) for kind, n in _OPS.findall(stdout)}
    fallbacks = tuple(dict.fromkeys(op for op in ops if op != NPU_OP))
    return VelaReport(vela=VELA, config=config,
                      inference_time_s=float(row["inference_time"]),
                      inferences_per_second=float(row["inferences_per_second"]),
                      cycles=int(float(row["cycles_total"])),
                      sram_kib=float(row["sram_memory_used"]),
                      dram_kib=float(row["dram_memory_used"]),
                      npu_ops=counts.get("NPU", 0), cpu_ops=counts.get("CPU", 0),
                      cpu_fallbacks=fallbacks)


def _write_ini(folder: Path, name: str) -> Path:
    """The generated ini holding system configuration ``name``."""
    lines = [f"[System_Config.{name}]", *(f"{k}={v}" for k, v in SYSTEM_CONFIGS[name].items())]
    path = folder / _GENERATED_INI
    write_atomic(path, "\n".join(lines) + "\n")
    return path


def save_report(report: VelaReport, path: Path) -> None:
    """Write the report as JSON (beside the artifact it describes)."""
    write_atomic(path, json.dumps(report.to_json(), indent=2) + "\n")


def load_report(path: Path) -> VelaReport | None:
    """The report saved at ``path``, or None when there is none (or it is unreadable)."""
    try:
        return VelaReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
