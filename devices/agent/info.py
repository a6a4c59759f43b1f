"""Facts about the device: machine, CPU, cores, memory, OS, python, this process's memory."""

import os
import platform
import resource

from .runtimes import runtime_versions

AGENT_VERSION = 1


def cmd_probe(args):
    """Device facts and the runtimes importable here."""
    return {"agent": AGENT_VERSION, "device": device_info(), "runtimes": runtime_versions()}


def device_info():
    """Machine, CPU, cores, memory, OS and python of this device."""
    return {
        "hostname": platform.node(), "machine": platform.machine(),
        "system": platform.platform(), "cpu": cpu_model(), "cores": os.cpu_count(),
        "mem_total_mb": mem_total_mb(), "python": platform.python_version(),
    }


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total_mb():
    """MemTotal of /proc/meminfo in MiB (None when unreadable)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb():
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
