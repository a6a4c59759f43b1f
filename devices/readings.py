"""Parsers of what read-only commands print on a device, for ``edge devices probe``: ``head``
of many files, ``ls -1`` of many directories, /proc/cpuinfo, ``df -Pk``, /proc/net/route,
sysfs ``uevent`` files and the board's device-tree/DMI model. Pure functions of text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["MODEL_FILES", "board_model", "default_iface", "df_source", "disk_candidates",
           "disk_of", "disks", "json_line", "parse_cpuinfo", "parse_head", "parse_ls",
           "to_int", "uevent"]

#: Where a board names itself: device tree (ARM boards), then DMI (PCs, servers).
MODEL_FILES = ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model",
               "/sys/devices/virtual/dmi/id/sys_vendor",
               "/sys/devices/virtual/dmi/id/product_name")
_NOT_DISKS = re.compile(r"^(loop|ram|zram|dm-|md|sr|nbd|mtdblock|fd)|boot\d+$|rpmb$")
_DMI_JUNK = {"", "to be filled by o.e.m.", "system product name", "default string", "none"}


def parse_head(text: str, paths: list[str]) -> dict[str, str]:
    """``head -n N -- PATH...`` output -> {path: its first lines} for the files it printed."""
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


def parse_ls(text: str, dirs: Iterable[str]) -> dict[str, list[str]]:
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


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
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


def board_model(files: dict[str, str]) -> str | None:
    """The board's name from its device-tree model, else DMI vendor and product, if any."""
    for path in MODEL_FILES[:2]:
        if files.get(path):
            return files[path].strip()
    product = files.get("/sys/devices/virtual/dmi/id/product_name", "").strip()
    vendor = files.get("/sys/devices/virtual/dmi/id/sys_vendor", "").strip()
    if product.lower() in _DMI_JUNK:
        return None
    if vendor.lower() not in _DMI_JUNK and not product.lower().startswith(vendor.lower()):
        return f"{vendor} {product}"
    return product


def df_source(text: str | None) -> tuple[str, int] | None:
    """(filesystem source, size in KiB) from ``df -Pk`` output, if it has a data line."""
    for line in reversed((text or "").splitlines()):
        fields = line.split()
        if len(fields) >= 6 and fields[1].isdigit():
            return fields[0], int(fields[1])
    return None


def disks(listing: dict[str, list[str]]) -> list[str]:
    """The /sys/block entries that are disks (no loop, ram, zram, dm-, boot partitions...)."""
    return [d for d in listing.get("/sys/block", []) if not _NOT_DISKS.search(d)]


def disk_of(source: str, names: list[str]) -> str | None:
    """The disk among ``names`` that holds ``source`` (/dev/mmcblk0p2 -> mmcblk0), if any."""
    name = source.removeprefix("/dev/")
    for disk in sorted(names, key=len, reverse=True):
        if name == disk or (name.startswith(disk) and re.fullmatch(r"p?\d+", name[len(disk):])):
            return disk
    return None


def disk_candidates(listing: dict[str, list[str]], df: str | None) -> list[str]:
    """The disk holding the df'd filesystem, else the first 8 disks: whose sysfs to read."""
    found = disks(listing)
    source = df_source(df)
    disk = disk_of(source[0], found) if source else None
    return [disk] if disk else found[:8]


def default_iface(route: str) -> str | None:
    """The interface of the default route in /proc/net/route (the first one that is up)."""
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] == "00000000":
            try:
                if int(fields[3], 16) & 1:
                    return fields[0]
            except ValueError:
                continue
    return None


def uevent(text: str | None) -> dict[str, str]:
    """A sysfs ``uevent`` file as {KEY: value}."""
    pairs = (line.partition("=") for line in (text or "").splitlines())
    return {k.strip(): v.strip() for k, sep, v in pairs if sep}


def to_int(text: str | None) -> int | None:
    """The first word of ``text`` as an int, if it is one."""
    try:
        return int((text or "").split()[0])
    except (IndexError, ValueError):
        return None


def json_line(text: str | None) -> dict[str, Any] | None:
    """The last line of ``text`` as a JSON object, if it is one."""
    try:
        value = json.loads((text or "").strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    return value if isinstance(value, dict) else None
