"""``edge devices probe``: the accelerators a device's nodes show (/dev, /dev/dri, /dev/accel,
/sys/class/misc and their drivers), and the runtimes to list, accelerators' first."""

from __future__ import annotations

import re
from typing import Any

from devices.gather import COMPATIBLE, Facts
from devices.readings import uevent
from edge.core.profile import known_runtimes
from edge.flows.probe_result import Ledger
from targets import runtimes as runtimes_declared

__all__ = ["accelerators", "runtimes"]


#: Render-node drivers no edge runtime reaches -> what they are (for a note).
_UNREACHED_GPUS = {"vc4": "the Raspberry Pi VideoCore GPU (no Vulkan before the Pi 4's v3d)",
                   "amdgpu": "an AMD GPU", "etnaviv": "a Vivante GPU",
                   "virtio_gpu": "a virtual GPU"}
#: /dev nodes worth a note, though edge lists no accelerator for them.
_NOTED_NODES = (("galcore", "Vivante galcore driver (GPU; on i.MX 8M Plus also the NPU, "
                 "reached by TFLite's VX delegate): add the NPU if your SoC has one"),
                ("vchiq", "VideoCore firmware interface (Raspberry Pi): no edge runtime"),
                ("hailo0", "Hailo accelerator: HailoRT is not one of edge's runtimes"),
                ("kfd", "AMD ROCm compute: no edge runtime reaches it"))


#: NPU cores of the Rockchip SoCs that have several (rknn's core mask places a model on one).
NPU_CORES = {"rk3588": 3, "rk3576": 2}


class _Found:
    """Accelerators found so far (profile entries), the nodes that showed them, and notes."""

    def __init__(self, ledger: Ledger) -> None:
        self.entries: list[dict[str, Any]] = []
        self.evidence: list[str] = []
        self.notes = ledger.notes

    def add(self, kind: str, name: str, precisions: list[str], runtime: str, where: str,
            tops: float | None = None, options: dict[str, str] | None = None,
            cores: int = 1) -> None:
        entry: dict[str, Any] = {"kind": kind, "name": name}
        if tops:
            entry["tops"] = tops
        if cores > 1:
            entry["cores"] = cores
        entry |= {"precisions": precisions, "runtime": runtime}
        if options:
            entry["options"] = options
        self.entries.append(entry)
        self.evidence.append(f"{where} ({kind} via {runtime})")


def accelerators(facts: Facts, board: str | None, ledger: Ledger) -> list[dict[str, Any]]:
    """The profile's accelerators from the device's nodes and drivers; notes for the others."""
    dev = facts.listing.get("/dev", [])
    found = _Found(ledger)
    _nvidia_and_tpu(facts, dev, board, found)
    for node in sorted(facts.listing.get("/dev/dri", [])):
        if node.startswith("renderD"):
            _render_node(node, facts.files, found)
    if "mali0" in dev and not any("Mali" in a["name"] for a in found.entries):
        found.add("gpu", "Arm Mali GPU (mali_kbase)", ["fp32", "fp16"], "tflite", "/dev/mali0")
    _accel_nodes(facts, found)
    if any(n.startswith("fastrpc-cdsp") for n in dev):
        found.add("dsp", "Qualcomm Hexagon DSP (cDSP)", ["int8", "int16"], "qnn",
                  "/dev/fastrpc-cdsp*")
    _notes(facts, dev, ledger, found)
    if found.entries:
        ledger.read("accelerators", "device nodes " + ", ".join(found.evidence) + "; precisions "
                    "are conservative, tops left out unless a datasheet figure is known")
    else:
        ledger.read("accelerators", "no accelerator device nodes in /dev, /dev/dri, /dev/accel "
                    "(a USB accelerator such as a Coral USB stick is not detected)")
    return sorted(found.entries, key=lambda entry: entry["kind"] not in ("npu", "tpu"))


def _nvidia_and_tpu(facts: Facts, dev: list[str], board: str | None, found: _Found) -> None:
    if any(n.startswith("nvhost") for n in dev):
        found.add("gpu", f"NVIDIA integrated GPU{f' ({board})' if board else ''}",
                  ["fp32", "fp16"], "tensorrt", "/dev/nvhost-*")
    for i, node in enumerate(sorted(n for n in dev if re.fullmatch(r"nvidia\d+", n))):
        name = facts.gpu_names[i] if i < len(facts.gpu_names) else f"NVIDIA GPU (/dev/{node})"
        found.add("gpu", name, ["fp32", "fp16"], "tensorrt", f"/dev/{node}")
    for node in sorted(n for n in dev if re.fullmatch(r"apex_\d+", n)):
        found.add("tpu", "Google Edge TPU (PCIe)", ["int8"], "edgetpu", f"/dev/{node}", tops=4)


def _render_node(node: str, files: dict[str, str], found: _Found) -> None:
    """A /dev/dri/renderD* node: a GPU by its driver, or a note."""
    driver = uevent(files.get(f"/sys/class/drm/{node}/device/uevent")).get("DRIVER", "")
    where = f"/dev/dri/{node} (driver {driver or 'unknown'})"
    low = driver.lower()
    if low in ("i915", "xe"):
        found.add("gpu", f"Intel GPU ({driver})", ["fp16", "int8", "fp32"], "openvino-gpu", where)
    elif low == "v3d":
        found.add("gpu", "Broadcom VideoCore GPU (v3d; Vulkan through Mesa v3dv)", ["fp32"],
                  "ncnn-vulkan", where)
    elif low in ("panfrost", "panthor", "mali", "mali_kbase"):
        found.add("gpu", f"Arm Mali GPU ({driver})", ["fp32", "fp16"], "tflite", where)
    elif low in ("msm", "msm_drm"):
        found.add("gpu", "Qualcomm Adreno GPU", ["fp32", "fp16"], "tflite", where)
    elif low in ("nvidia", "tegra", "nvgpu") and found.entries:
        return  # already listed from /dev/nvhost-* or /dev/nvidiaN
    elif low == "rknpu":
        _rockchip_npu(facts_files=files, where=where, found=found)
    else:
        found.notes.append(f"{where}: {_UNREACHED_GPUS.get(low, 'a GPU')} that no edge runtime "
                           "reaches; not listed")


def _accel_nodes(facts: Facts, found: _Found) -> None:
    for node in sorted(facts.listing.get("/dev/accel", [])):
        driver = uevent(facts.files.get(f"/sys/class/accel/{node}/device/uevent")).get(
            "DRIVER", "")
        if driver == "intel_vpu":
            found.add("npu", "Intel NPU", ["int8", "fp16"], "openvino-npu", f"/dev/accel/{node}")
        else:
            found.notes.append(f"/dev/accel/{node} (driver {driver or 'unknown'}): an "
                               "accelerator edge has no runtime mapping for; not listed")


def _rockchip_npu(*, facts_files: dict[str, str], where: str, found: _Found) -> None:
    """The RKNPU driver: an NPU for the rknn runtime, built for the SoC the device tree names
    (RK3588S builds as rk3588); a SoC edge cannot name is a note."""
    if any(e["runtime"] == "rknn" for e in found.entries):
        return
    soc = re.search(r"rockchip,(r[kv]\d{4}[a-z]?)", facts_files.get(COMPATIBLE, ""))
    platform = soc.group(1).rstrip("s") if soc else None
    if platform is None:
        found.notes.append(f"Rockchip NPU at {where}: the device tree names no Rockchip SoC, "
                           "so rknn's platform is unknown; add the NPU with options.platform "
                           "(e.g. rk3588) by hand; not listed")
        return
    found.add("npu", f"Rockchip {platform.upper()} NPU", ["int8", "fp16"], "rknn", where,
              options={"platform": platform}, cores=NPU_CORES.get(platform, 1))


def _notes(facts: Facts, dev: list[str], ledger: Ledger, found: _Found) -> None:
    misc = set(facts.listing.get("/sys/class/misc", []))
    if "rknpu" in dev or "rknpu" in misc:
        node = "/dev/rknpu" if "rknpu" in dev else "/sys/class/misc/rknpu"
        _rockchip_npu(facts_files=facts.files, where=f"{node} (driver rknpu)", found=found)
    for node, what in _NOTED_NODES:
        if node in dev:
            ledger.notes.append(f"/dev/{node}: {what}; not listed")


def _unit_targets() -> dict[str, str]:
    """Each registered target named otherwise than its runtime (openvino-npu) -> the runtime
    the device's agent reports for it (openvino), from the runtimes' declarations."""
    return {target: r.name for r in runtimes_declared().values() for target, _ in r.targets
            if target != r.name}


def runtimes(facts: Facts, arch: str, accelerators: list[dict[str, Any]],
             ledger: Ledger) -> list[str]:
    """The runtimes to list: each accelerator's first, then the CPU ones installed."""
    known = known_runtimes()
    installed = {k: v for k, v in (facts.probe.get("runtimes") or {}).items() if k in known}
    installed |= {k: "found" for k, ok in facts.extra_runtimes.items() if ok and k in known}
    units = _unit_targets()
    installed |= {t: installed[r] for t, r in units.items() if r in installed}
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
    order += [r for r in installed if r not in order and r not in units]
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
