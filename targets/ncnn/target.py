"""NCNN (Tencent) on a device's CPU and on its Vulkan GPU: pnnx converts the reference ONNX to
an NCNN ``.ncnn.param`` + weights ``.bin``, with a ``.json`` of settings (blobs, shapes,
precision, unit) the loader reads, here and in the agent (targets/ncnn/agent.py).

- ``ncnn`` (CPU): fp32 (fp32 weights, NCNN's fp16 storage and arithmetic off) and fp16 (fp16
  weights; fp16 storage and arithmetic on, which NCNN computes on ARMv8.2 cores such as the
  Cortex-A76; the plan offers fp16 only where the device computes it). On an x86-64 host NCNN
  computes fp16 models in fp32 from their fp16 weights: verification here covers the weights'
  rounding, not fp16 arithmetic.
- ``ncnn-vulkan``: the same conversion run through NCNN's Vulkan compute on the device's GPU
  (VideoCore, Mali), planned where the profile lists a Vulkan GPU for it; verified here on a
  Vulkan device of this host (Mesa's lavapipe: the same shaders on the CPU, fp16 included) and
  never timed here.

int8 is not offered: NCNN's own calibration tools (ncnn2table, ncnn2int8) are in neither the
ncnn nor the pnnx wheel, nor in Debian's archive.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge.core.capabilities import Capabilities
from edge.core.files import no_space_as
from edge.core.values import BenchResult, Dataset, ModelInfo, TensorSpec
from targets.base import (
    ConversionError,
    ConvertSettings,
    cached_notes,
    check_precision,
    missing_modules,
    scratch_dir,
)
from targets.ncnn import agent
from targets.ncnn.agent import SETTINGS, SUFFIXES, WEIGHTS
from targets.ncnn.child import read_frame, write_frame

__all__ = ["NcnnRunner", "NcnnTarget", "NcnnVulkanTarget", "VulkanRunner", "settings_for"]

DEFAULT_SETTINGS = ConvertSettings()
VULKAN_SUFFIX, CPU_SUFFIX = SUFFIXES
#: pnnx's name for a numpy dtype in ``inputshape=[1,3,224,224]f32``.
PNNX_DTYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int64": "i64",
               "int32": "i32", "int8": "i8", "uint8": "u8"}
#: Seconds pnnx may take for one model.
PNNX_TIMEOUT_S = 600
_NOTES = ".notes.json"
_VULKAN_HINT = ("no Vulkan device on this host to verify it on (Mesa's software Vulkan: "
                "apt-get install mesa-vulkan-drivers libvulkan1)")


class NcnnRunner:
    """An NCNN net on this host, fed and answering with the reference's names and layouts."""

    def __init__(self, artifact: Path, *, threads: int) -> None:
        self._ncnn = _ncnn()
        self._settings = agent.read_settings(str(artifact))
        self._net = agent.open_net(self._ncnn, str(artifact), self._settings, threads)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference model's order."""
        ordered = [feeds[spec["name"]] for spec in self._settings["inputs"]]
        return agent.run_net(np, self._ncnn, self._net, self._settings, ordered)


class VulkanRunner:
    """An NCNN net on this host's Vulkan device, held by a child process (targets/ncnn/child.py:
    a Vulkan instance must never live in edge's own process)."""

    def __init__(self, artifact: Path, *, threads: int) -> None:
        self._settings = agent.read_settings(str(artifact))
        self._child = subprocess.Popen(
            [sys.executable, "-m", "targets.ncnn.child", str(artifact), str(int(threads))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        weakref.finalize(self, _stop, self._child)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs in the reference model's order, computed by the child."""
        ordered = [np.ascontiguousarray(feeds[spec["name"]]) for spec in self._settings["inputs"]]
        try:
            write_frame(self._child.stdin, ordered)  # type: ignore[arg-type]
            got = read_frame(self._child.stdout)  # type: ignore[arg-type]
        except (OSError, ValueError):
            got = None
        if got is None:
            raise RuntimeError(f"NCNN's Vulkan child stopped (exit {self._child.poll()}): run "
                               "python -m targets.ncnn.child ARTIFACT 1 to see why")
        return got


def _stop(child: subprocess.Popen[bytes]) -> None:
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            stream.close()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


class NcnnTarget:
    """NCNN on the device's CPU (converted by pnnx)."""

    name: ClassVar[str] = "ncnn"
    vulkan: ClassVar[bool] = False
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="ncnn", precisions=("fp32", "fp16"), suffix=CPU_SUFFIX,
        companions=(WEIGHTS, SETTINGS), modules=("ncnn", "pnnx"), extra="ncnn",
        converters=("ncnn", "pnnx"), recipe=1)

    def missing(self) -> str | None:
        """ncnn and pnnx are the ``ncnn`` extra."""
        return missing_modules(self.caps)

    def convert(
        self, model: ModelInfo, precision: str, *, calib: Dataset, workdir: Path,
        settings: ConvertSettings = DEFAULT_SETTINGS,
    ) -> tuple[Path, tuple[str, ...]]:
        """Write (or reuse) this precision's ``.ncnn.param``, ``.bin`` and ``.json``."""
        check_precision(self, precision)
        stem = f"model_{precision}{'_vk' if self.vulkan else ''}"
        out = Path(workdir) / f"{stem}{self.caps.suffix}"
        cached = cached_notes(out)
        if cached is None:
            with no_space_as(out), scratch_dir(Path(workdir), ".ncnn-") as scratch:
                cached = _convert(model, precision, self.vulkan, scratch)
                _publish(scratch, Path(workdir), stem, self.caps.suffix, cached)
        return out, (*cached, *_keep_float_note(settings))

    def load(self, artifact: Path, model: ModelInfo, *,
             threads: int) -> NcnnRunner | VulkanRunner:
        """The net on this host's CPU (or its Vulkan device for ``ncnn-vulkan``, in a child)."""
        if self.vulkan:
            return VulkanRunner(artifact, threads=threads)
        return NcnnRunner(artifact, threads=threads)


class NcnnVulkanTarget(NcnnTarget):
    """NCNN's Vulkan compute on the device's GPU; verified here on this host's Vulkan device."""

    name: ClassVar[str] = "ncnn-vulkan"
    vulkan: ClassVar[bool] = True
    caps: ClassVar[Capabilities] = Capabilities(
        runtime="ncnn", precisions=("fp32", "fp16"), suffix=VULKAN_SUFFIX,
        companions=(WEIGHTS, SETTINGS), modules=("ncnn", "pnnx"),
        extra="ncnn", converters=("ncnn", "pnnx"), recipe=1, accelerator="Vulkan GPU",
        host_runs="cpu")

    def missing(self) -> str | None:
        """ncnn and pnnx, and a Vulkan device here to verify on."""
        return missing_modules(self.caps) or (None if _vulkan_here() else _VULKAN_HINT)

    def predict_fallbacks(self, model: ModelInfo) -> tuple[str, ...] | None:
        """None: NCNN runs a layer without a Vulkan shader on the CPU, known once loaded."""
        return None

    def estimate(self, artifact: Path, model: ModelInfo) -> BenchResult | None:
        """None: NCNN offers no estimate without the device."""
        return None


# ---------------------------------------------------------------- conversion


def _convert(model: ModelInfo, precision: str, vulkan: bool, scratch: Path) -> tuple[str, ...]:
    """Run pnnx on the reference ONNX in ``scratch``; write the settings; return the notes."""
    _check_io(model)
    source = scratch / "model.onnx"
    os.symlink(os.path.abspath(model.path), source)
    _pnnx(source, model.inputs, precision, scratch)
    settings = settings_for(model, precision, vulkan)
    _check_blobs(scratch / "model.ncnn.param", settings)
    _check_layers(scratch / "model.ncnn.param")
    (scratch / "model.json").write_text(json.dumps(settings, indent=1))
    return _notes(precision, vulkan)


def _check_io(model: ModelInfo) -> None:
    """ConversionError for what NCNN cannot take: a batch other than 1, over 4 dimensions
    after the batch, or outputs that are not float."""
    for spec in model.inputs:
        shape = spec.static_shape
        if len(shape) > 1 and shape[0] != 1:
            raise ConversionError(f"ncnn runs batch 1; input {spec.name} has batch {shape[0]} "
                                  "(export the model with batch 1 or --shape it)")
        if len(_mat_shape(shape)) > 4:
            raise ConversionError(f"ncnn's tensors have at most 4 dimensions after the batch; "
                                  f"input {spec.name} has shape {list(shape)}")
        if spec.dtype not in PNNX_DTYPES:
            raise ConversionError(f"ncnn takes no {spec.dtype} input ({spec.name})")


def _pnnx(source: Path, inputs: tuple[TensorSpec, ...], precision: str, scratch: Path) -> None:
    """pnnx ``source`` to ``model.ncnn.param/.bin`` in ``scratch`` (fp16 weights for fp16)."""
    shapes = ",".join(f"[{','.join(map(str, s.static_shape))}]{PNNX_DTYPES[s.dtype]}"
                      for s in inputs)
    names = {key: scratch / f"model.{kind}" for key, kind in (
        ("pnnxparam", "pnnx.param"), ("pnnxbin", "pnnx.bin"), ("pnnxpy", "pnnx.py"),
        ("pnnxonnx", "pnnx.onnx"), ("ncnnparam", "ncnn.param"), ("ncnnbin", "ncnn.bin"),
        ("ncnnpy", "ncnn.py"))}
    command = [str(_pnnx_binary()), str(source), f"inputshape={shapes}",
               f"fp16={int(precision == 'fp16')}", *(f"{k}={v}" for k, v in names.items())]
    try:
        done = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                              timeout=PNNX_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ConversionError(f"pnnx did not finish in {PNNX_TIMEOUT_S} s") from None
    if done.returncode != 0 or not names["ncnnparam"].is_file():
        raise ConversionError(f"pnnx failed (exit {done.returncode}): {_last_line(done)}")


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    """pnnx's last words, one line."""
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def _pnnx_binary() -> Path:
    """The pnnx executable inside the pnnx package (its console wrapper is not always there)."""
    spec = importlib.util.find_spec("pnnx")
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError("pnnx is not installed (pip install 'edge[ncnn]')")
    return Path(list(spec.submodule_search_locations)[0]) / "pnnx"


def settings_for(model: ModelInfo, precision: str, vulkan: bool) -> dict[str, Any]:
    """What the loader needs: blobs ``in<i>``/``out<i>`` with the reference's names, shapes,
    dtypes and NCNN's shape of each input (no batch); the precision and the unit."""
    inputs = [{"blob": f"in{i}", "name": s.name, "shape": list(s.static_shape),
               "mat": list(_mat_shape(s.static_shape)), "dtype": s.dtype}
              for i, s in enumerate(model.inputs)]
    outputs = [{"blob": f"out{i}", "name": s.name, "shape": list(s.static_shape),
                "dtype": s.dtype} for i, s in enumerate(model.outputs)]
    return {"precision": precision, "fp16": precision == "fp16", "vulkan": vulkan,
            "inputs": inputs, "outputs": outputs}


def _mat_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """NCNN's Mat of a batch-1 tensor: the batch dimension dropped."""
    return shape[1:] if len(shape) > 1 else shape


def _check_blobs(param: Path, settings: dict[str, Any]) -> None:
    """ConversionError unless the param file has every blob the settings name."""
    words = set(param.read_text().split())
    absent = [s["blob"] for s in (*settings["inputs"], *settings["outputs"])
              if s["blob"] not in words]
    if absent:
        raise ConversionError(f"pnnx's NCNN graph lacks blob(s) {', '.join(absent)}: its "
                              "inputs or outputs differ from the model's")


def _check_layers(param: Path) -> None:
    """ConversionError naming the layers pnnx wrote that this NCNN has no kernel for (an
    operator pnnx could not lower, such as ``Tensor.slice``)."""
    lines = param.read_text().splitlines()[2:]  # the magic number, then the counts
    kinds = {line.split()[0] for line in lines if line.split()}
    unknown = sorted(k for k in kinds if _ncnn().layer_to_index(k) < 0)
    if unknown:
        raise ConversionError(f"pnnx left operator(s) NCNN cannot run: {', '.join(unknown)}; "
                              "the other runtimes' candidates compete")


def _notes(precision: str, vulkan: bool) -> tuple[str, ...]:
    """What the artifact is and how this host verifies it."""
    weights = "fp16 weights, fp16 storage and arithmetic" if precision == "fp16" else \
        "fp32 weights, fp16 storage and arithmetic off"
    if vulkan:
        return (f"pnnx to NCNN, {weights}, on the device's GPU through Vulkan; verified on "
                "this host's Vulkan device (Mesa lavapipe runs the same shaders on the CPU); "
                "never timed here",)
    here = "; this x86-64 host computes it in fp32 from the fp16 weights (NCNN's fp16 " \
        "arithmetic needs ARMv8.2)" if precision == "fp16" else ""
    return (f"pnnx to NCNN, {weights}, on the CPU{here}",)


def _keep_float_note(settings: ConvertSettings) -> tuple[str, ...]:
    return ("keep_float has no effect: the NCNN candidates have no int8 path",) \
        if settings.keep_float else ()


# ---------------------------------------------------------------- cache (atomic, with notes)


def _publish(scratch: Path, workdir: Path, stem: str, suffix: str,
             notes: tuple[str, ...]) -> None:
    """Move the weights and settings, then the param, then its notes (the completion mark)."""
    for made, final in (("model.ncnn.bin", WEIGHTS), ("model.json", SETTINGS),
                        ("model.ncnn.param", suffix)):
        os.replace(scratch / made, workdir / f"{stem}{final}")
    marker = scratch / "notes.json"
    marker.write_text(json.dumps(list(notes)))
    os.replace(marker, workdir / f"{stem}{suffix}{_NOTES}")




# ---------------------------------------------------------------- the ncnn module


def _ncnn() -> Any:
    """The ncnn module (imported when first needed: it is not light)."""
    import ncnn

    return ncnn


@functools.cache
def _vulkan_here() -> bool:
    """Whether NCNN sees a Vulkan device on this host, asked of a child (see child.py)."""
    if importlib.util.find_spec("ncnn") is None:
        return False
    try:
        done = subprocess.run([sys.executable, "-m", "targets.ncnn.child", "--count"],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip().isdigit() and int(done.stdout) > 0
