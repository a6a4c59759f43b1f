"""devices.readings, devices.cpus and devices.gather's second round: what probe makes of the
outputs of cat, head, ls, df and sysfs files (captured text, no device needed)."""

from __future__ import annotations

import pytest

from devices.cpus import (
    catalog_board,
    clean_model_name,
    cpu_isa,
    normalize_arch,
    part_name,
    peak_gops,
    physical_cores,
)
from devices.gather import second_round
from devices.readings import (
    board_model,
    default_iface,
    df_source,
    disk_candidates,
    disk_of,
    json_line,
    parse_cpuinfo,
    parse_head,
    parse_ls,
    to_int,
    uevent,
)
from edge.core.errors import DeviceError

HEAD = ("==> /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq <==\n1800000\n\n"
        "==> /proc/device-tree/model <==\nRaspberry Pi 4 Model B Rev 1.4\x00\n\n"
        "==> /sys/fs/cgroup/memory.max <==\nmax\n\n"
        "==> /sys/block/sda/removable <==\n\n")
LS = ("/dev:\nnull\nvchiq\n\n/dev/dri:\ncard0\nrenderD128\n\n/sys/block:\nloop0\nmmcblk0\n"
      "mmcblk0boot0\nram0\nzram0\n")
ROUTE = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"
         "eth0\t0010A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n"
         "wg0\t00000000\t00000000\t0000\t0\t0\t0\t00000000\n"
         "wlan0\t00000000\t0100A8C0\t0003\t0\t0\t600\t00000000\n")
X86 = ("processor\t: 0\nvendor_id\t: GenuineIntel\n"
       "model name\t: Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz\nphysical id\t: 0\n"
       "core id\t: 0\ncpu MHz\t\t: 2400.000\nflags\t\t: fpu avx avx2 fma avx512f avx512_vnni "
       "avx512_bf16 avx512_fp16 amx_bf16 amx_int8\n\n"
       "processor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\n"  # a hyperthread of core 0
       "processor\t: 2\nphysical id\t: 0\ncore id\t: 1\n")


def test_head_of_many_files_and_of_one() -> None:
    paths = ["/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "/proc/device-tree/model",
             "/sys/fs/cgroup/memory.max", "/sys/block/sda/removable", "/not/there"]
    files = parse_head(HEAD, paths)
    assert files == {paths[0]: "1800000", paths[1]: "Raspberry Pi 4 Model B Rev 1.4",
                     paths[2]: "max"}  # NULs dropped; empty and missing files absent
    assert parse_head("1200000\n", ["/only"]) == {"/only": "1200000"}  # one file: no header
    assert parse_head("", ["/only"]) == {}


def test_ls_of_many_directories() -> None:
    listing = parse_ls(LS, ["/dev", "/dev/dri", "/dev/accel", "/sys/block"])
    assert listing["/dev/dri"] == ["card0", "renderD128"]
    assert "/dev/accel" not in listing  # missing directory
    assert disk_candidates(listing, None) == ["mmcblk0"]  # loop, boot, ram, zram are not disks


def test_cpuinfo_blocks_and_arm_parts() -> None:
    text = ("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0b\n\n"
            "processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xfff\n\n"
            "processor\t: 2\nCPU implementer\t: 0x51\nCPU part\t: 0x802\n\n"
            "Hardware\t: BCM2835\n")
    blocks = parse_cpuinfo(text)
    assert len(blocks) == 4 and blocks[3] == {"hardware": "BCM2835"}
    assert [part_name(b) for b in blocks] == ["Cortex-A76", "Arm core 0xfff",
                                              "CPU implementer 0x51 part 0x802", None]


def test_x86_peak_counts_physical_cores_and_amx() -> None:
    cpus = parse_cpuinfo(X86)
    isa, how = cpu_isa("x86_64", cpus)
    assert isa == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                   "amx_bf16", "amx_int8"] and how == "/proc/cpuinfo flags"
    assert physical_cores(cpus, 3) == 2
    peak, why = peak_gops("x86_64", cpus, [], [None] * 3, 2.4, 3, isa)
    assert peak == {"fp32": 307.2, "fp16": 614.4, "bf16": 4915.2, "int8": 9830.4}
    assert why.startswith("2 physical cores x 2.4 GHz x 64 fp32 FLOP/cycle (2x AVX-512 FMA)")
    assert clean_model_name(cpus[0]["model name"]) == "Intel Xeon Platinum 8488C"


def test_arm_and_riscv_peaks() -> None:
    peak, _ = peak_gops("aarch64", [], ["Cortex-A76", "Cortex-A55"], [2.4, None], 1.8, 2,
                        ["neon", "fp16", "dotprod"])
    fp32 = 2.4 * 16 + 1.8 * 8  # each core at its own clock, the other at the highest
    assert peak == {"fp32": round(fp32, 1), "fp16": round(2 * fp32, 1),
                    "int8": round(4 * fp32, 1)}
    riscv = parse_cpuinfo("processor\t: 0\nhart\t: 0\nisa\t: rv64imafdcv_zicsr\n")
    assert cpu_isa("riscv64", riscv) == (["rvv"], "/proc/cpuinfo isa")
    assert peak_gops("riscv64", riscv, [], [None] * 4, 1.5, 4, ["rvv"])[0] == {"fp32": 12.0}
    assert cpu_isa("aarch64", []) == (["neon"], "ARMv8-A baseline (no Features line in "
                                                "/proc/cpuinfo)")


def test_arch_names_and_catalog_boards() -> None:
    assert normalize_arch(" ARMv8l ") == "armv7l"
    with pytest.raises(DeviceError, match="'mips'"):
        normalize_arch("mips")
    assert catalog_board("Raspberry Pi 5 Model B Rev 1.0") == "rpi5"
    assert catalog_board("NVIDIA Jetson Orin Nano Developer Kit") == "jetson-orin-nano"
    assert catalog_board("QEMU Standard PC") is None and catalog_board(None) is None


def test_board_model_from_device_tree_or_dmi() -> None:
    assert board_model({"/proc/device-tree/model": "Radxa ROCK 5B "}) == "Radxa ROCK 5B"
    dmi = {"/sys/devices/virtual/dmi/id/sys_vendor": "Dell Inc.",
           "/sys/devices/virtual/dmi/id/product_name": "PowerEdge R740"}
    assert board_model(dmi) == "Dell Inc. PowerEdge R740"
    dmi["/sys/devices/virtual/dmi/id/product_name"] = "To Be Filled By O.E.M."
    assert board_model(dmi) is None
    assert board_model({"/sys/devices/virtual/dmi/id/sys_vendor": "LENOVO",
                        "/sys/devices/virtual/dmi/id/product_name": "LENOVO 20XW"}) == \
        "LENOVO 20XW"  # the vendor is not said twice


def test_df_and_the_disk_that_holds_it() -> None:
    df = ("Filesystem     1024-blocks    Used Available Capacity Mounted on\n"
          "/dev/mmcblk0p2    30358348 4529012  24534904      16% /\n")
    assert df_source(df) == ("/dev/mmcblk0p2", 30358348)
    assert df_source("df: /x: No such file or directory\n") is None and df_source(None) is None
    assert disk_of("/dev/mmcblk0p2", ["mmcblk0", "sda"]) == "mmcblk0"
    assert disk_of("/dev/sda1", ["sd", "sda"]) == "sda"  # the longest name that fits
    assert disk_of("/dev/root", ["mmcblk0"]) is None
    listing = {"/sys/block": ["nvme0n1", "mmcblk0", "loop3"]}
    assert disk_candidates(listing, "/dev/nvme0n1p2 245107676 3 2 2% /") == ["nvme0n1"]
    assert disk_candidates(listing, "overlay 1000 1 1 1% /") == ["nvme0n1", "mmcblk0"]


def test_default_route_uevent_and_numbers() -> None:
    assert default_iface(ROUTE) == "wlan0"  # wg0's default route is down (flags 0)
    assert default_iface("Iface\tDestination\n") is None
    assert uevent("DRIVER=panfrost\nOF_NAME=gpu\nnoise\n") == {"DRIVER": "panfrost",
                                                               "OF_NAME": "gpu"}
    assert (to_int("4\n"), to_int("max"), to_int(None)) == (4, None, None)
    assert json_line("warning: x\n{\"tensorrt\": true}\n") == {"tensorrt": True}
    assert json_line("[1]") is None and json_line("") is None


def test_second_round_reads_what_the_first_named() -> None:
    listing = {"/dev/dri": ["card0", "renderD128"], "/dev/accel": ["accel0"],
               "/sys/block": ["mmcblk0", "sda"]}
    paths = second_round(listing, "/dev/sda1 1000 1 1 1% /",
                         {"/proc/net/route": ROUTE})
    assert paths == ["/sys/block/sda/queue/rotational", "/sys/block/sda/removable",
                     "/sys/block/sda/device/type", "/sys/class/drm/renderD128/device/uevent",
                     "/sys/class/accel/accel0/device/uevent", "/sys/class/net/wlan0/uevent",
                     "/sys/class/net/wlan0/speed", "/sys/class/net/wlan0/device/uevent"]
    assert second_round({}, None, {}) == []
