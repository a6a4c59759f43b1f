"""TorchScript saved as ``.jit``, and a forward's non-tensor argument given with ``--arg``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from edge.core.errors import UsageError
from edge.core.intake import parse_arg_flags, reference_model, to_reference
from tests.support.cli import run_cli


class _Rate(nn.Module):
    """forward(x, k: int): the int picks a branch and scales; it counts its calls (state)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        self.calls += 1
        if k > 1:
            return self.fc(x) * float(k)
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def jit_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jit") / "rate.jit"
    torch.jit.save(torch.jit.script(_Rate().eval()), str(path))
    return path


def _run(reference: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _expected(source: Path, x: np.ndarray, k: int) -> np.ndarray:
    with torch.no_grad():
        return torch.jit.load(str(source))(torch.from_numpy(x), k).numpy()


def test_jit_with_arg_bakes_the_value(jit_file: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    three = to_reference(jit_file, tmp_path, shapes={"x": (2, 4)}, args={"k": "3"})
    one = to_reference(jit_file, tmp_path, shapes={"x": (2, 4)}, args={"k": "1"})
    assert three != one  # the value is part of the cache key
    model = onnx.load(str(three))
    assert [i.name for i in model.graph.input] == ["x"]
    assert not [n for n in model.graph.node if n.op_type == "If"]  # the branch is folded
    np.testing.assert_allclose(_run(three, x), _expected(jit_file, x, 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run(one, x), _expected(jit_file, x, 1), rtol=1e-5, atol=1e-6)
    assert not np.allclose(_run(three, x), _run(one, x))


def test_origin_records_the_baked_value(jit_file: Path) -> None:
    origin, _ = reference_model(jit_file, shapes={"x": (2, 4)}, args={"k": "3"})
    assert (origin.format, origin.args) == ("torch", {"k": "3"})
    assert origin.to_json()["args"] == {"k": "3"}


def test_missing_arg_names_it_its_type_and_the_flag(jit_file: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"forward takes k: int, not a tensor; give its "
                                         r"value with --arg k=VALUE"):
        to_reference(jit_file, tmp_path, shapes={"x": (2, 4)})


def test_bad_arg_values_are_one_line_errors(jit_file: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="forward's 'k' is an int; give an int value"):
        to_reference(jit_file, tmp_path, shapes={"x": (2, 4)}, args={"k": "fast"})
    with pytest.raises(UsageError, match="has no argument 'rate'"):
        to_reference(jit_file, tmp_path, shapes={"x": (2, 4)}, args={"k": "1", "rate": "2"})
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_arg_flags(["k"])
    with pytest.raises(UsageError, match=r"--arg k=99999999999999999999: out of the int64"):
        to_reference(jit_file, tmp_path, shapes={"x": (2, 4)}, args={"k": "9" * 20})


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_a_float_arg_must_be_finite(value: str) -> None:
    """Issue 39: blamed on --arg, not on the conversion."""
    from edge.core.intake.torchargs import _typed

    with pytest.raises(UsageError, match=f"--arg s={value}: give a finite number"):
        _typed("s", value, "float")


def test_a_jit_that_is_not_torchscript_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "weights.jit"
    torch.save({"w": torch.zeros(2)}, str(fake))  # a pickle (a zip, no TorchScript code)
    with pytest.raises(UsageError, match="a .jit file must be a TorchScript archive"):
        to_reference(fake, tmp_path / "work", shapes={"x": (1,)})


def test_inspect_cli_takes_arg_and_reports_it(jit_file: Path) -> None:
    result = run_cli("inspect", str(jit_file), "--shape", "x=2,4", "--arg", "k=2", "--json")
    assert result.status == 0, result.stderr
    assert result.json()["args"] == {"k": "2"}  # not converted before: the warning is said
    assert "keeps state between calls" in result.stderr
    missing = run_cli("inspect", str(jit_file), "--shape", "x=2,4")
    assert missing.status == 2
    assert missing.error_lines == [f"error: {jit_file.name}: forward takes k: int, not a "
                                   "tensor; give its value with --arg k=VALUE (it is baked "
                                   "into the exported model)"]
