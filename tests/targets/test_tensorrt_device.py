"""TensorRT on a real NVIDIA GPU: the device loader builds the engine from edge's ONNX, caches it
beside the model, checks every output against the reference edge computed on its host, and
runs it. No project machine has a GPU: listed in tests/support/hardware.py (it runs wherever
one and TensorRT are present; bench/tensorrt_device.py times the same path)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from targets.tensorrt import TensorRTTarget, companion_of
from targets.tensorrt import agent as trt_agent
from tests.support.digits import DigitsModel
from tests.support.hardware import needs_hardware


@needs_hardware("tests/targets/test_tensorrt_device.py::test_engine_is_built_checked_and_timed")
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_engine_is_built_checked_and_timed(precision: str, digits: DigitsModel,
                                           tmp_path: Path) -> None:
    model = inspect_model(digits.onnx)
    calib = load_dataset(digits.calib, model)
    made, _ = TensorRTTarget().convert(model, precision, calib=calib, workdir=tmp_path / "work")
    release = tmp_path / "release"
    release.mkdir()
    path = release / "model.trt.onnx"  # as a release folder on a device names it
    shutil.copyfile(made, path)
    shutil.copyfile(companion_of(made), release / "model.npz")

    run, version = trt_agent.load(str(path), 1)
    (engine,) = release.glob("model.*.engine")
    built = engine.stat().st_mtime_ns
    outputs = run()
    assert version and len(outputs) == len(model.outputs)
    assert all(np.all(np.isfinite(o)) for o in outputs)

    run_again, _ = trt_agent.load(str(path), 1)  # from the cache: the same engine file
    assert [e.name for e in release.glob("model.*.engine")] == [engine.name]
    assert engine.stat().st_mtime_ns == built
    run_again()
