"""Sensors read around a benchmark: CPU temperature, throttling and power, each with the sysfs
path it came from (EDGE_AGENT_SYSFS replaces /sys in tests). A missing or failing sensor is
``{"value": None, ...}``, never a failed bench."""

import glob
import os
import shutil
import subprocess

from .errors import one_line


def _sysfs(*parts):
    """A path under the sysfs root (EDGE_AGENT_SYSFS, default /sys; tests point it elsewhere)."""
    return os.path.join(os.environ.get("EDGE_AGENT_SYSFS") or "/sys", *parts)


def _glob(pattern):
    return glob.glob(pattern)


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def _read_number(path):
    text = _read_text(path)
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _absent(**extra):
    return dict({"value": None, "source": None}, **extra)


def guarded(reader):
    """A sensor reading; a reader that fails is a missing sensor, never a failed bench."""
    try:
        return reader()
    except Exception as exc:  # noqa: BLE001 - sensors must never fail the bench
        return _absent(error=one_line(exc))


def sensor_snapshot():
    """CPU temperature, throttling and power, each with its sysfs source (None when absent)."""
    return {"temperature_c": guarded(read_cpu_temperature),
            "throttling": guarded(read_throttling),
            "power_w": guarded(read_power)}


CPU_ZONE_WORDS = ("cpu", "soc", "x86_pkg", "pkg", "package", "core", "arm")


def read_cpu_temperature():
    """Max °C over CPU/SoC thermal zones (by type), else over all zones."""
    zones = []
    for folder in sorted(_glob(_sysfs("class", "thermal", "thermal_zone*"))):
        milli = _read_number(os.path.join(folder, "temp"))
        if milli is None:
            continue
        kind = (_read_text(os.path.join(folder, "type")) or "").lower()
        celsius = milli / 1000.0 if abs(milli) > 200 else milli
        zones.append((celsius, os.path.join(folder, "temp"), kind))
    cpu = [z for z in zones if any(word in z[2] for word in CPU_ZONE_WORDS)]
    if not zones:
        return _absent(zone=None)
    value, source, kind = max(cpu or zones)
    return {"value": value, "source": source, "zone": kind or None}


def read_throttling():
    """vcgencmd get_throttled (Raspberry Pi), cpufreq cur/max ratio, thermal throttle counts."""
    return {"vcgencmd": read_vcgencmd(), "freq_ratio": read_freq_ratio(),
            "throttle_count": read_throttle_count()}


def read_vcgencmd():
    """``vcgencmd get_throttled`` where the binary exists (only with the real /sys)."""
    if os.environ.get("EDGE_AGENT_SYSFS", "/sys") != "/sys":
        return _absent()
    binary = shutil.which("vcgencmd")
    if binary is None:
        return _absent()
    try:
        done = subprocess.run([binary, "get_throttled"], capture_output=True, text=True,
                              timeout=2, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return _absent(error=one_line(exc))
    return dict(parse_throttled(done.stdout), source=f"{binary} get_throttled")


def parse_throttled(text):
    """``throttled=0x50005`` -> the bits, and whether throttling is happening / ever happened."""
    try:
        bits = int(text.strip().partition("=")[2], 16)
    except ValueError:
        return {"value": None}
    return {"value": hex(bits), "under_voltage": bool(bits & 0x1),
            "throttled_now": bool(bits & 0xF), "throttled_since_boot": bool(bits & 0xF0000)}


def read_freq_ratio():
    """Min over cpufreq policies of scaling_cur_freq / cpuinfo_max_freq (1.0 = not capped)."""
    folders = sorted(_glob(_sysfs("devices", "system", "cpu", "cpufreq", "policy*")))
    if not folders:
        folders = sorted(_glob(_sysfs("devices", "system", "cpu", "cpu[0-9]*", "cpufreq")))
    ratios = []
    for folder in folders:
        cur = _read_number(os.path.join(folder, "scaling_cur_freq"))
        top = _read_number(os.path.join(folder, "cpuinfo_max_freq"))
        if cur is not None and top:
            ratios.append((cur / top, os.path.join(folder, "scaling_cur_freq")))
    if not ratios:
        return _absent()
    value, source = min(ratios)
    return {"value": value, "source": source}


def read_throttle_count():
    """Sum of /sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count (x86)."""
    pattern = _sysfs("devices", "system", "cpu", "cpu[0-9]*", "thermal_throttle",
                     "*_throttle_count")
    counts = [(_read_number(p), p) for p in sorted(_glob(pattern))]
    counts = [(n, p) for n, p in counts if n is not None]
    if not counts:
        return _absent()
    return {"value": int(sum(n for n, _ in counts)), "source": [p for _, p in counts]}


def read_power():
    """Watts summed over rails: Jetson INA3221 (i2c, mW) else hwmon (power µW, or V×A)."""
    rails = _ina3221_rails()
    rails += _hwmon_rails(skip_ina3221=bool(rails))
    if not rails:
        return _absent(rails=[])
    return {"value": sum(r["watts"] for r in rails), "source": [r["source"] for r in rails],
            "rails": rails}


def _ina3221_rails():
    rails, seen = [], set()
    for depth in range(1, 4):  # bounded: driver dirs link back and forth
        pattern = _sysfs("bus", "i2c", "drivers", "ina3221*", *(["*"] * depth),
                         "in_power*_input")
        for path in sorted(_glob(pattern)):
            real = os.path.realpath(path)
            milliwatts = _read_number(path)
            if real in seen or milliwatts is None:
                continue
            seen.add(real)
            channel = os.path.basename(path)[len("in_power"):-len("_input")]
            label = _read_text(os.path.join(os.path.dirname(path), f"rail_name_{channel}"))
            rails.append({"label": label or f"ina3221/{channel}", "watts": milliwatts / 1e3,
                          "source": path})
    return rails


def _hwmon_rails(*, skip_ina3221):
    rails = []
    for folder in sorted(_glob(_sysfs("class", "hwmon", "hwmon*"))):
        name = _read_text(os.path.join(folder, "name")) or os.path.basename(folder)
        if skip_ina3221 and name.startswith("ina3221"):
            continue
        found = []
        for path in sorted(_glob(os.path.join(folder, "power*_input"))):
            microwatts = _read_number(path)
            channel = os.path.basename(path)[len("power"):-len("_input")]
            if microwatts is not None:
                found.append((f"power{channel}", microwatts / 1e6, path))
        if not found:  # no power channel: volts (mV) x amps (mA) where both exist
            for path in sorted(_glob(os.path.join(folder, "in*_input"))):
                channel = os.path.basename(path)[len("in"):-len("_input")]
                current = os.path.join(folder, f"curr{channel}_input")
                millivolts, milliamps = _read_number(path), _read_number(current)
                if millivolts is not None and milliamps is not None:
                    found.append((f"in{channel}", millivolts * milliamps / 1e6,
                                  f"{path} x {current}"))
        for stem, watts, source in found:
            label = _read_text(os.path.join(folder, f"{stem}_label"))
            rails.append({"label": f"{name}/{label or stem}", "watts": watts,
                          "source": source})
    return rails

