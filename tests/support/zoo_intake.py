"""Zoo models whose reference is the original .tflite on LiteRT: no converter makes a faithful
ONNX model of them.

tests/test_zoo.py checks that ``edge inspect`` (and so optimize) takes exactly these through
the LiteRT fallback, with its warning: a converter that starts to read one of them (or stops
reading another) shows up as a change here.
"""

from __future__ import annotations

from pathlib import Path

from devices.readings import parse_cpuinfo

LITERT_REFERENCE: dict[str, str] = {
    # tf2onnx keeps the TFLite DENSIFY (sparse weights) it cannot fold; tflite2onnx lacks it
    "mp-pose-detection": "unsupported operator DENSIFY",
    # tf2onnx keeps the custom Convolution2DTransposeBias; tflite2onnx has no HARD_SWISH
    "mp-selfie-segmentation": "unsupported operator HARD_SWISH",
    # BirdNET's in-graph STFT: tf2onnx crashes on its RFFT2D, tflite2onnx has no REDUCE_MIN
    "birdnet": "unsupported operators REDUCE_MIN, RFFT2D",
    # an int8 TFLite converts with a small drift the parity check refuses (cos 0.9996), on
    # x86 CPUs without VNNI only (see SATURATING)
    "fer-emotion-int8": "does not reproduce",
}

#: Converted faithfully where the CPU has VNNI (seen on an AMD EPYC with avx512_vnni), refused
#: on AVX2-only ones: there ONNX Runtime's x86 int8 kernels sum u8 x s8 pairs in int16
#: (vpmaddubsw), which can saturate - the likely source of the drift.
SATURATING = frozenset({"fer-emotion-int8"})


#: Zoo models edge's intake refuses today: each a bug reported to the coordinator (issue 29's
#: "100 % intake"). tests/test_zoo.py expects the failure strictly, so the fix shows up there.
INTAKE_FAILS: dict[str, str] = {}


def litert_reference(cpu_flags: set[str]) -> dict[str, str]:
    """The entries described as their .tflite on a CPU with these flags (/proc/cpuinfo)."""
    vnni = bool(cpu_flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
    return {k: v for k, v in LITERT_REFERENCE.items() if not (vnni and k in SATURATING)}


def cpu_flags() -> set[str]:
    """This host's CPU flags (empty where /proc/cpuinfo says none)."""
    blocks = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    return set(blocks[0].get("flags", "").split()) if blocks else set()
