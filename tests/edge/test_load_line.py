"""Issue 29: ``edge optimize`` (and so ``edge deploy``, which shows the same summary) and
``edge report`` say how to load the chosen artifact outside edge, as edge verified it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from targets.openvino import OpenVINOTarget
from tests.support.cli import run_cli
from tests.support.verify_models import two_scale_model, uniform_inputs

pytestmark = pytest.mark.skipif(OpenVINOTarget().missing() is not None,
                                reason=str(OpenVINOTarget().missing()))


def test_optimize_and_report_say_how_to_load_the_chosen_ir(tmp_path: Path) -> None:
    two_scale_model(tmp_path / "two.onnx")
    np.save(tmp_path / "two.npy", uniform_inputs(40, (1, 8)))
    (tmp_path / "ov.yaml").write_text("extends: x86-64\nid: ov-only\nruntimes: [openvino]\n")
    out = tmp_path / "out.bundle"
    result = run_cli("optimize", str(tmp_path / "two.onnx"), "--profile",
                     str(tmp_path / "ov.yaml"), "--calib", str(tmp_path / "two.npy"),
                     "-o", str(out))
    assert result.status == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    chosen = next(c for c in manifest["candidates"]
                  if "{target}-{precision}".format(**c["candidate"]) == manifest["chosen"])
    load = [n for n in chosen["artifact"]["notes"] if n.startswith("load: core.compile_model(")]
    assert len(load) == 1, chosen["artifact"]["notes"]
    assert load[0] in result.stdout.splitlines(), result.stdout
    assert "serve the chosen IR: ovms --config_path serving/ovms/config.json" in load[0]
    config = json.loads((out / "serving/ovms/config.json").read_text())["model_config_list"][0]
    assert config["config"]["base_path"] == "models/model"
    assert config["config"]["plugin_config"]["INFERENCE_PRECISION_HINT"] in ("f32", "bf16")
    served = out / "serving/ovms/models/model/1/model.xml"
    assert served.read_bytes() == (out / chosen["artifact"]["file"]).read_bytes()
    _plain_load_serves(served, tmp_path)
    report = run_cli("report", str(out), "-o", str(tmp_path / "report.html"))
    assert report.status == 0, report.stderr
    html = (tmp_path / "report.html").read_text()
    assert "load: core.compile_model(" in html


def _plain_load_serves(xml: Path, tmp_path: Path) -> None:
    """The served IR loads plainly and computes the source model's outputs."""
    import onnxruntime as ort
    import openvino as ov

    x = uniform_inputs(4, (1, 8), seed=3)
    compiled = ov.Core().compile_model(str(xml), "CPU")
    session = ort.InferenceSession(str(tmp_path / "two.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for sample in x:
        want = session.run(None, {name: sample})
        got = compiled(sample)
        for i, w in enumerate(want):
            assert np.abs(got[i] - w).max() <= 0.05 * (np.abs(w).max() + 1e-6)
