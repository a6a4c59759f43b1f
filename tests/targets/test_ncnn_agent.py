"""The NCNN device loader (targets/ncnn/agent.py, the agent's runtime_ncnn) on the emulated
aarch64 board (tests/support/arm_device.py: Debian arm64 under qemu-user): provisioning installs
the ncnn aarch64 wheel from host-fetched wheels, the agent finds its loader by the compound
suffix ``.ncnn.param``, ``bench`` loads and runs the digits CNN (fp32 and fp16, with their
weights and settings under the release's names), and the agent's own loader, run on the board
with the held-out digits, matches the reference ONNX model here: fp16 computed in fp16 there
(qemu's CPU has ARMv8.2's fp16 arithmetic, which this x86-64 host has not). Fidelity only: no
timing claims from emulation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.ncnn.target import NcnnTarget
from targets.onnxruntime import OrtRunner
from targets.provision import provision_runtime
from tests.support.digits import DigitsModel

WORK = "/home/edgeuser/.edge"
SAMPLES = 8
#: Runs the agent's NCNN loader on the board on the saved inputs; prints the outputs as JSON.
SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from edge_agent import runtime_ncnn as loader
ncnn = loader.runtimes.import_module("ncnn")
settings = loader.read_settings(sys.argv[2])
net = loader.open_net(ncnn, sys.argv[2], settings, 1)
x = np.load(sys.argv[3])
print(json.dumps({"fp16_arithmetic": bool(ncnn.cpu_support_arm_asimdhp()),
                  "outputs": [loader.run_net(np, ncnn, net, settings, [x[i:i + 1]])[0].tolist()
                              for i in range(len(x))]}))
"""
pytestmark = pytest.mark.slow


def _put(transport: Any, file: Path, folder: str) -> str:
    """The artifact and its companions under the names a release gives them."""
    stem = file.name[: -len(".ncnn.param")]
    transport.run(["mkdir", "-p", folder])
    for suffix in (".bin", ".json"):
        transport.put(file.with_name(stem + suffix), f"{folder}/model{suffix}")
    transport.put(file, f"{folder}/model.ncnn.param")
    return f"{folder}/model.ncnn.param"


def test_on_the_emulated_board_ncnn_runs_the_digits_cnn_like_the_reference(
        arm_device: Any, transport: Any, wheel_cache: Path, digits: DigitsModel,
        tmp_path: Path) -> None:
    from devices.device import open_device

    report = provision_runtime(transport, device_python=arm_device.python, work_dir="~/.edge",
                               runtime="ncnn", host_cache=wheel_cache)
    assert report.runtime_version == "1.0.20261020" and report.platform.arch == "aarch64"
    device = open_device(transport, python=report.python, work_dir="~/.edge")
    assert "ncnn" in device.runtimes  # the agent found its loader and ncnn's version
    model = inspect_model(digits.onnx)
    inputs = np.load(digits.eval)["input"][:SAMPLES]
    np.save(tmp_path / "x.npy", inputs.astype(np.float32))
    transport.put(tmp_path / "x.npy", f"{WORK}/ncnn-x.npy")
    transport.put(_script(tmp_path), f"{WORK}/ncnn-run.py")
    reference = OrtRunner(digits.onnx, threads=1)
    want = np.concatenate([reference.run({"input": inputs[i:i + 1]})[0]
                           for i in range(SAMPLES)])
    scale = float(np.abs(want).max())
    for precision, bound in (("fp32", 1e-5), ("fp16", 1e-2)):  # of the largest logit
        file, _ = NcnnTarget().convert(model, precision, calib=Dataset(feeds=()),
                                       workdir=tmp_path / "convert")
        remote = _put(transport, file, f"{WORK}/ncnn-{precision}")
        reply = device.call("bench", remote, "--runs", "1", "--rounds", "1", timeout=600)
        assert reply, precision  # loaded and ran through the agent's own bench
        done = transport.run([report.python, f"{WORK}/ncnn-run.py", device.agent, remote,
                              f"{WORK}/ncnn-x.npy"], timeout=600)
        assert done.status == 0, done.stderr
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        assert answer["fp16_arithmetic"]  # qemu's CPU has ARMv8.2's fp16: NCNN computes in it
        got = np.array(answer["outputs"])[:, 0, :]
        assert np.abs(got - want).max() < bound * scale, (precision, np.abs(got - want).max())
        assert (got.argmax(1) == want.argmax(1)).all(), precision


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "ncnn-run.py"
    path.write_text(SCRIPT)
    return path
