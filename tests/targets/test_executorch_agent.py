"""The ExecuTorch device loader (targets/executorch/agent.py, the agent's runtime_executorch): a
real ``.pte`` (the digits CNN lowered to XNNPACK at int8 by the executorch target) loaded and
run by the loader, and through the zipped agent's own ``bench`` on this host's Python (which
has executorch), as a device with executorch and torch installed runs it.

Not on the emulated aarch64 board: ExecuTorch's Python bindings link libtorch, and PyPI's
aarch64 torch 2.13.0 is a CUDA build whose libtorch needs NVIDIA's CUDA libraries (gigabytes
of wheels this project's index lacks for aarch64); see docs/executorch.md.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from devices.agent import runtimes
from devices.agent.errors import AgentError
from devices.agentfile import agent_bytes
from edge.core.model import inspect_model
from edge.core.values import Dataset
from targets.executorch import ExecuTorchTarget, agent

SAMPLES = Path(__file__).resolve().parents[2] / "edge" / "samples"


@pytest.fixture(scope="module")
def pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits CNN as an int8 .pte (XNNPACK delegate)."""
    model = inspect_model(SAMPLES / "digits.onnx")
    calib = np.load(SAMPLES / "digits_calib.npy")[:8]
    data = Dataset(feeds=tuple({"input": calib[i:i + 1]} for i in range(len(calib))))
    return ExecuTorchTarget().convert(model, "int8", calib=data,
                                      workdir=tmp_path_factory.mktemp("executorch"))[0]


def test_the_loader_declares_its_runtime_in_python_38_syntax() -> None:
    assert (agent.NAME, agent.SUFFIXES, agent.MODULES) == ("executorch", (".pte",),
                                                           ("executorch.extension.pybindings._C",))
    ast.parse(Path(agent.__file__).read_text(), feature_version=(3, 8))


def test_the_loader_runs_a_program_on_inputs_from_its_own_metadata(pte: Path) -> None:
    run, version = agent.load(str(pte), 1)
    assert version == "1.5.1"
    (logits,) = run()
    assert tuple(logits.shape) == (1, 10)
    assert runtimes.model_runtime(str(pte)) == "executorch"  # the agent picks it by suffix


def test_a_file_that_is_not_a_program_is_refused_in_one_line(tmp_path: Path) -> None:
    other = tmp_path / "not.pte"
    other.write_bytes(b"not a program")
    with pytest.raises(AgentError, match="executorch cannot load") as refused:
        agent.load(str(other), 1)
    assert "\n" not in str(refused.value)
    with pytest.raises(AgentError, match="not found") as missing:
        agent.load(str(tmp_path / "gone.pte"), 1)
    assert missing.value.status == 2


def test_the_zipped_agent_benches_a_program(pte: Path, tmp_path: Path) -> None:
    zipapp = tmp_path / "edge_agent.pyz"
    zipapp.write_bytes(agent_bytes())
    done = subprocess.run([sys.executable, str(zipapp), "bench", str(pte), "--runs", "2"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert (result["runtime"], result["runtime_version"], result["runs"]) == \
        ("executorch", "1.5.1", 2)
