"""Real models through edge's optimize flow to RKNN for the ROCK 5B, verified per output (with
their task metrics) in rknn-toolkit2's simulator: the bench MobileNetV2 (bench/peerbench) and
three trained zoo models (tests/support/zoo.py). No mocks: the real toolkit in its own
environment.

The flow runs without host timing (``OptimizeOptions(measure=False)``): the simulator's times
are not the NPU's, and the CPU candidates are tested elsewhere, so the profile keeps only the
NPU's runtime. Each model gets 16 calibration and 24 held-out samples to keep the simulator's
runs short (its child is started once per candidate and serves every run).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge.cli.common import parse_shapes
from edge.core.profile import load_profile
from edge.core.toolchain import build
from edge.core.verify import Thresholds, parse_metrics
from edge.flows.optimize import OptimizeOptions, optimize
from targets.rknn.convert import TOOLCHAIN
from tests.support import zoo
from tests.support.mediapipe import cache_dir

ROOT = Path(__file__).resolve().parents[2]
CALIB, HELD = 16, 24
NPU_ONLY = "extends: rock5b\nid: rock5b-npu\nruntimes: [rknn]\n"
pytestmark = pytest.mark.slow


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """A model file, its data files and edge's flags for it."""

    model: Path
    calib: Path
    held: Path
    metrics: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()


@pytest.fixture(scope="module", autouse=True)
def environment() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_TOOLCHAIN_DIR", str(cache_dir() / "toolchains"))
        build(TOOLCHAIN)
        yield


def _mobilenet(work: Path) -> Case:
    """The bench's tamed MobileNetV2 (random convolutions, BatchNorm and a linear-probe head
    fitted on real image crops; labelled held-out crops), built once into the test data cache."""
    sys.path.insert(0, str(ROOT / "bench"))
    from peerbench.common import CNN_RECIPE
    from peerbench.models import build_cnn

    files = build_cnn(cache_dir() / "rknn" / CNN_RECIPE)
    calib, held = np.load(files["calib"])[:CALIB], np.load(files["eval"])
    np.save(work / "calib.npy", calib)
    np.savez(work / "eval.npz", input=held["input"][:HELD], labels=held["labels"][:HELD])
    return Case(model=Path(files["onnx"]), calib=work / "calib.npy", held=work / "eval.npz")


def _zoo(name: str, work: Path) -> Case:
    """A zoo model with its first calibration and held-out samples, its metrics and shapes."""
    entry = zoo.entry(name)
    calib, held = zoo.split(entry, zoo.samples(entry))
    arrays = {"calib": {k: v[:CALIB] for k, v in calib.items()},
              "eval": {k: v[:HELD] for k, v in held.items()}}
    for kind, data in arrays.items():
        np.savez(work / f"{kind}.npz", **data)
    return Case(model=zoo.model(entry), calib=work / "calib.npz", held=work / "eval.npz",
                metrics=entry.metrics, shapes=entry.shapes)


CASES = {"mobilenet-v2": _mobilenet,
         "rapidocr-cls": lambda work: _zoo("rapidocr-cls", work),
         "rapidocr-det": lambda work: _zoo("rapidocr-det", work),
         "ddddocr-det": lambda work: _zoo("ddddocr-det", work)}


@pytest.mark.parametrize("name", list(CASES))
def test_a_real_model_is_verified_per_output_in_the_simulator(name: str,
                                                              tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    (tmp_path / "npu.yaml").write_text(NPU_ONLY)
    pairs, custom = parse_metrics(case.metrics)
    shapes, dtypes = parse_shapes(case.shapes)
    # exhaustive: both precisions converted and judged, not only the one the order chooses
    options = OptimizeOptions(calib=case.calib, eval=case.held, measure=False, shapes=shapes,
                              dtypes=dtypes, limits=Thresholds(metrics=pairs, custom=custom),
                              exhaustive=True)
    bundle = optimize(case.model, load_profile(str(tmp_path / "npu.yaml")),
                      tmp_path / "bundle", options)
    made = {r.candidate.precision: r for r in bundle.candidates if r.candidate.target == "rknn"}
    assert set(made) == {"int8", "fp16"}
    outputs = len(bundle.source.outputs)
    for precision, result in made.items():
        assert result.fidelity is not None, (precision, result.reason)  # converted and run
        assert len(result.fidelity.outputs) == outputs, precision  # judged output by output
        assert result.artifact is not None and result.artifact.runtime == "rknn"
        assert "for rk3588" in result.artifact.notes[0]
    fp16 = made["fp16"]
    assert fp16.status in ("passed", "chosen"), fp16.reason  # fp16 on the NPU keeps the task
    assert all(o.passed for o in fp16.fidelity.outputs)  # type: ignore[union-attr]
    assert made["int8"].status in ("passed", "chosen", "rejected"), made["int8"].reason
