"""The RKNN converter: a reference ONNX model -> a ``.rknn`` file for a Rockchip NPU, fp16 or
int8 calibrated on samples, made by rknn-toolkit2 in its own environment (``TOOLCHAIN``).

The conversion runs as a bounded child process (``child.py``, standard library + rknn.api)
that reads one request file; its artifact is written beside and renamed into place, so a
stopped conversion leaves no half-written file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.toolchain import Toolchain, ToolchainError, run, unbuilt
from edge.core.values import Dataset, ModelInfo
from targets.base import ConversionError, ConvertSettings, workdir_lock

__all__ = ["CHILD", "PLATFORMS", "TOOLCHAIN", "RKNNConverter", "cpu_fallbacks", "fallback_notes",
           "request_file"]

#: rknn-toolkit2 2.5.0 and everything it needs, pinned; the lightest set its pins allow: torch
#: 1.13.1, the oldest for Python 3.11, brings 4 CUDA libraries (2.x brings 11 and triton): 1.84
#: GB of wheels, 3.70 GB installed (bench/results/toolchains.json). setuptools keeps
#: pkg_resources, which rknn.api imports (setuptools 81 dropped it).
TOOLCHAIN = Toolchain(
    name="rknn-toolkit2",
    requirements=(
        "rknn-toolkit2==2.5.0", "torch==1.13.1", "numpy==1.26.4", "onnx==1.18.0",
        "onnxruntime==1.26.0", "protobuf==4.25.4", "opencv-python==4.11.0.86",
        "scipy==1.17.1", "psutil==7.2.2", "ruamel.yaml==0.19.1", "tqdm==4.70.1",
        "fast-histogram==0.14", "flatbuffers==25.12.19", "packaging==26.4",
        "typing-extensions==4.16.0", "nvidia-cublas-cu11==11.10.3.66",
        "nvidia-cuda-nvrtc-cu11==11.7.99", "nvidia-cuda-runtime-cu11==11.7.99",
        "nvidia-cudnn-cu11==8.5.0.96", "setuptools==65.5.0", "wheel==0.48.0",
    ),
    records=("rknn-toolkit2", "torch", "numpy", "onnx", "onnxruntime", "protobuf"),
    wheels_mb=1976, installed_mb=3973,  # bench/results/toolchains.json
)
#: The SoCs rknn-toolkit2 2.5.0 builds for (``target_platform``).
PLATFORMS = ("rk2118", "rk3562", "rk3566", "rk3568", "rk3576", "rk3588", "rv1103", "rv1103b",
             "rv1106", "rv1106b", "rv1126b")
#: ConvertSettings.calibration -> rknn's ``quantized_algorithm``.
ALGORITHMS = {"minmax": "normal", "entropy": "kl_divergence", "percentile": "mmse"}
CHILD = Path(__file__).with_name("child.py")
TIMEOUT_S = 1200  # one conversion, calibration included


class RKNNConverter:
    """rknn-toolkit2 for one SoC: ``convert`` as targets.base.Target's (no ``load`` yet)."""

    name: ClassVar[str] = "rknn"
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="rknn", precisions=("int8", "fp16"), suffix=".rknn", archs=("aarch64",),
        toolchain=TOOLCHAIN, recipe=2)  # 2: the CPU operators beside the artifact

    def __init__(self, platform: str = "rk3588", *, timeout_s: float = TIMEOUT_S) -> None:
        if platform not in PLATFORMS:
            raise ConversionError(f"rknn-toolkit2 does not build for {platform!r}; choose one "
                                  f"of {', '.join(PLATFORMS)}")
        self.platform = platform
        self.timeout_s = timeout_s

    def missing(self) -> str | None:
        """The toolchain environment, while it is not built (edge toolchains install)."""
        return unbuilt(TOOLCHAIN)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = ConvertSettings(),  # noqa: B008 - frozen
    ) -> tuple[Path, tuple[str, ...]]:
        """Write ``precision``'s .rknn for this SoC into ``workdir`` (or reuse it)."""
        if precision not in self.caps.precisions:
            raise ConversionError(f"rknn has no {precision} path; choose one of "
                                  f"{', '.join(self.caps.precisions)}")
        out = Path(workdir) / f"model_{self.platform}_{precision}.rknn"
        version = TOOLCHAIN.pins["rknn-toolkit2"]
        notes: tuple[str, ...] = (f"rknn-toolkit2 {version} for {self.platform}, in its own "
                                  "environment",)
        if settings.keep_float:
            notes += ("rknn-toolkit2 keeps no chosen layers in float: keep_float ignored",)
        with no_space_as(out), workdir_lock(Path(workdir)):  # a full disk: one line naming out
            if not (out.is_file() and _ops(out).is_file()):
                self._convert(model, precision, calib, settings, out)
            return out, (*notes, *fallback_notes(out))

    def _convert(self, model: ModelInfo, precision: str, calib: Dataset,
                 settings: ConvertSettings, out: Path) -> None:
        """Run the child in the toolchain; rename its file into place."""
        request = _request(model, precision, calib, settings, out, self.platform)
        try:
            run(TOOLCHAIN, [str(CHILD), str(request)], timeout_s=self.timeout_s,
                cwd=out.parent, what=f"rknn-toolkit2 {precision} conversion")
        except ToolchainError as exc:
            raise ConversionError(str(exc)) from None
        if not (_partial(out).is_file() and _ops(_partial(out)).is_file()):
            raise ConversionError(f"rknn-toolkit2 {precision} conversion wrote no .rknn file")
        os.replace(_ops(_partial(out)), _ops(out))
        os.replace(_partial(out), out)


def _partial(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial")


def _ops(artifact: Path) -> Path:
    """Where the child lists the operators its compiler placed on the CPU."""
    return artifact.with_name(artifact.name + ".ops.json")


def cpu_fallbacks(artifact: Path) -> tuple[str, ...]:
    """The operator types of an artifact that run on the CPU, as its build's layer table said."""
    try:
        return tuple(json.loads(_ops(artifact).read_text(encoding="utf-8"))["cpu"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def fallback_notes(artifact: Path) -> tuple[str, ...]:
    """The note the flow reads the artifact's CPU operators from (none when all are on the
    NPU)."""
    ops = cpu_fallbacks(artifact)
    return (f"cpu fallback: {', '.join(ops)}",) if ops else ()


def request_file(artifact: Path) -> Path:
    """The conversion request written beside an artifact (the simulator rebuilds from it)."""
    return artifact.with_suffix(".request.json")


def _request(model: ModelInfo, precision: str, calib: Dataset, settings: ConvertSettings,
             out: Path, platform: str) -> Path:
    """The child's request file (beside the artifact), with the calibration list for int8."""
    spec = {"model": model.path, "platform": platform, "precision": precision,
            "inputs": [i.name for i in model.inputs] if _dynamic(model) else None,
            "shapes": [list(i.static_shape) for i in model.inputs] if _dynamic(model) else None,
            "algorithm": ALGORITHMS[settings.calibration], "out": str(_partial(out)),
            "dataset": str(_dataset(model, calib, out.parent)) if precision == "int8" else None}
    path = request_file(out)
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return path


def _dynamic(model: ModelInfo) -> bool:
    """Whether an input has a symbolic dim (rknn is then given every input's static shape)."""
    return any(not isinstance(d, int) or d <= 0 for i in model.inputs for d in i.shape)


def _dataset(model: ModelInfo, calib: Dataset, workdir: Path) -> Path:
    """rknn's calibration list: one line per sample, one .npy per input (NCHW as fed)."""
    folder = workdir / "rknn_calib"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, feeds in enumerate(calib.feeds):
        files = [folder / f"{n}_{k}.npy" for k in range(len(model.inputs))]
        for file, spec in zip(files, model.inputs, strict=True):
            np.save(file, np.asarray(feeds[spec.name]).reshape(spec.static_shape))
        lines.append(" ".join(str(f) for f in files))
    listing = folder / "dataset.txt"
    listing.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return listing
