"""The contract every registered target passes: each precision it claims converts the trained
digits CNN, loads, speaks the reference model's names and layout, and keeps its accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.data import load_dataset
from edge.core.model import inspect_model
from edge.core.values import Dataset, ModelInfo
from targets import REGISTRY, get_target
from targets.base import PRECISIONS, ConversionError
from targets.openvino import load_with_hint
from tests.support import hardware
from tests.support.digits import DigitsModel

pytestmark = pytest.mark.slow

def _cases() -> list[tuple[str, str]]:
    cases = []
    for name in REGISTRY:
        try:
            cases += [(name, precision) for precision in get_target(name).caps.precisions]
        except ImportError:
            cases.append((name, "import"))  # fails in the test, not at collection
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def workroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def model(digits: DigitsModel) -> ModelInfo:
    return inspect_model(digits.onnx)


@pytest.fixture(scope="module")
def tflite_source(model: ModelInfo, digits: DigitsModel, workroot: Path) -> ModelInfo:
    """The digits CNN as a float32 .tflite: the reference of targets that read .tflite files."""
    from edge.core.intake import inspect_tflite

    calib = load_dataset(digits.calib, model)
    file, _ = get_target("tflite").convert(model, "fp32", calib=calib,
                                           workdir=workroot / "tflite")
    return inspect_tflite(file)


def _as_source(data: Dataset, model: ModelInfo, source: ModelInfo) -> Dataset:
    """The ONNX model's samples for ``source`` (its names; NCHW -> NHWC when its rank-4 input
    is channels-last)."""
    def one(value: np.ndarray, spec: Any) -> np.ndarray:
        if value.ndim == 4 and tuple(value.shape) != tuple(spec.shape):
            return np.ascontiguousarray(value.transpose(0, 2, 3, 1))
        return value

    feeds = tuple({t.name: one(f[m.name], t) for m, t in zip(model.inputs, source.inputs,
                                                             strict=True)}
                  for f in data.feeds)
    return Dataset(feeds=feeds, labels=data.labels, source=data.source)


def _computes_bf16(ir: Path, model: ModelInfo) -> bool:
    """Whether OpenVINO computes bf16 on this CPU (else it silently computes f32)."""
    runner = load_with_hint(ir, model, threads=1, hint="bf16")
    return runner.compiled_model.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "bf16"


def test_registry_is_lazy_and_complete() -> None:
    for name, ref in REGISTRY.items():
        target = get_target(name)
        assert ref.endswith(type(target).__name__)
        assert target.name == name
        assert set(target.caps.precisions) <= set(PRECISIONS), name
        assert target.caps.suffix.startswith(".")


@pytest.mark.parametrize("name, precision", CASES)
def test_target_keeps_digits_accuracy(name: str, precision: str, model: ModelInfo,
                                      digits: DigitsModel, workroot: Path,
                                      request: pytest.FixtureRequest) -> None:
    target = get_target(name)
    if target.missing() and hardware.excused(request.node.nodeid):
        pytest.skip(f"{target.missing()} (listed in tests/support/hardware.py)")
    if target.missing():
        pytest.fail(f"{name} is registered but cannot run here: {target.missing()}")
    calib = load_dataset(digits.calib, model)
    held_out = load_dataset(digits.eval, model, want_labels=True)
    if target.caps.reads == ".tflite":  # it makes its candidates from the original .tflite
        source = request.getfixturevalue("tflite_source")
        calib, held_out = (_as_source(d, model, source) for d in (calib, held_out))
        model = source
    file, notes = target.convert(model, precision, calib=calib, workdir=workroot / name)
    if (name, precision) == ("openvino", "bf16") and not _computes_bf16(file, model):
        with pytest.raises(RuntimeError, match="made to compute in bf16"):  # not verifiable
            target.load(file, model, threads=1)
        return
    assert file.is_file() and file.name.endswith(target.caps.suffix) and file.stat().st_size > 0
    assert all(isinstance(n, str) for n in notes)
    runner = target.load(file, model, threads=1)
    outputs = [runner.run(feed) for feed in held_out.feeds]
    assert all(len(o) == 1 and np.shape(o[0]) == (1, 10) for o in outputs)
    predictions = np.array([int(np.argmax(o[0])) for o in outputs])
    accuracy = float(np.mean(predictions == held_out.labels))
    assert digits.float_accuracy - accuracy <= 0.01, (name, precision, accuracy)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_unknown_precision_is_a_conversion_error(name: str, model: ModelInfo,
                                                 tmp_path: Path) -> None:
    with pytest.raises(ConversionError):
        get_target(name).convert(model, "int3", calib=Dataset(feeds=()), workdir=tmp_path)
