"""Tests that need hardware (or a vendor tool made only for it) that no project machine has:
the one declared exception to "no skips".

CI runs every test and fails on any skip (tests/support/ci.py), but no project machine has an
NVIDIA GPU, so a test that builds a TensorRT engine cannot run there. Such a test is listed here
by its node id, with the hardware it needs and why no project machine has it, and marked with
``needs_hardware(node_id)``: it runs wherever the hardware is present and skips elsewhere.
tests/test_hardware_list.py checks that every test skipping for hardware goes through this list
and that every listed test exists; CI's summary prints the list::

    python -m tests.support.hardware
"""

from __future__ import annotations

import glob
import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support import parallel

__all__ = ["UNAVAILABLE_HARDWARE", "Unavailable", "entry", "excused", "needs_hardware",
           "summary"]


def _nvidia_gpu_with_tensorrt() -> str | None:
    """Why TensorRT cannot build an engine here, None when it can try."""
    if importlib.util.find_spec("tensorrt") is None:
        return "TensorRT's Python bindings (tensorrt) are not installed"
    if not glob.glob("/dev/nvidia[0-9]*") and not glob.glob("/dev/nvhost-*"):
        return "no NVIDIA GPU device node (/dev/nvidia0, /dev/nvhost-*)"
    return None


def _edgetpu_compiler() -> str | None:
    """Why the Edge TPU compiler cannot run here, None when it is on PATH."""
    return None if shutil.which("edgetpu_compiler") else (
        "edgetpu_compiler is not on PATH (Coral's apt repository, x86-64 Debian/Ubuntu only)")


_EDGETPU_WHY = ("Google ships the Edge TPU compiler only as a closed x86-64 binary in Coral's "
                "apt repository (not on PyPI or Debian), which project machines cannot reach; "
                "without it edge plans the candidate as skipped saying how to get it (tested)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Unavailable:
    """A test that runs only where some hardware is."""

    test: str  # pytest node id: "tests/targets/test_x.py::test_y"
    hardware: str  # what it needs
    why: str  # why no project machine has it
    absent: Callable[[], str | None]  # why the hardware is missing here, None when present


#: Every test that skips for want of hardware, and why.
UNAVAILABLE_HARDWARE: tuple[Unavailable, ...] = (
    Unavailable(
        test="tests/targets/test_tensorrt_device.py::test_engine_is_built_checked_and_timed",
        hardware="an NVIDIA GPU with TensorRT 8.5 or newer (a Jetson with JetPack 5+, or a "
                 "PC/cloud GPU with NVIDIA's TensorRT)",
        why="project machines (and CI) have no NVIDIA GPU, and TensorRT's wheels fetch from "
            "pypi.nvidia.com, which they cannot reach; bench/tensorrt_device.py runs the same "
            "build/check/time path on a GPU machine (bench/results/tensorrt_device.json)",
        absent=_nvidia_gpu_with_tensorrt),
    Unavailable(
        test="tests/targets/test_edgetpu.py::test_the_compiler_maps_the_digits_cnn",
        hardware="the Edge TPU compiler (edgetpu_compiler)", why=_EDGETPU_WHY,
        absent=_edgetpu_compiler),
    Unavailable(
        test="tests/targets/test_contract.py::test_target_keeps_digits_accuracy[edgetpu-int8]",
        hardware="the Edge TPU compiler (edgetpu_compiler)", why=_EDGETPU_WHY,
        absent=_edgetpu_compiler),
)


def entry(test: str) -> Unavailable:
    """The listed entry of a node id; a test not listed may not skip for hardware."""
    for item in UNAVAILABLE_HARDWARE:
        if item.test == test:
            return item
    raise KeyError(f"{test} is not in tests/support/hardware.py's UNAVAILABLE_HARDWARE: list it "
                   "(the hardware it needs, why no project machine has it) or do not skip")


def needs_hardware(test: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for a listed test: skips only where its hardware is missing."""
    item = entry(test)
    reason = item.absent()
    return pytest.mark.skipif(reason is not None,
                              reason=f"needs {item.hardware}: {reason} (listed in "
                                     "tests/support/hardware.py)")


def excused(nodeid: str) -> bool:
    """Whether a skip of this node id is the declared exception (CI's strict mode)."""
    nodeid = parallel.base_nodeid(nodeid)  # a grouped test's id ends in @group under xdist
    return any(nodeid == i.test or nodeid.startswith(i.test + "[") for i in UNAVAILABLE_HARDWARE)


def summary() -> list[str]:
    """Lines for CI's summary: every listed test, what it needs, whether it is present here."""
    lines = [f"tests needing hardware no project machine has ({len(UNAVAILABLE_HARDWARE)}, "
             "tests/support/hardware.py):"]
    for item in UNAVAILABLE_HARDWARE:
        state = item.absent()
        lines += [f"  {item.test}", f"    needs {item.hardware}",
                  f"    why: {item.why}",
                  f"    here: {'skipped: ' + state if state else 'present: it ran'}"]
    return lines


def main() -> int:
    print("\n".join(summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
