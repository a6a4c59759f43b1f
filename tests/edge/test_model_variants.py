"""Models as users bring them (issue 12, item 7): symbolic spatial dims, already quantized.

Every model here is the digits CNN trained in this session (or an LSTM trained here on the
same digits), transformed as a user's export or ONNX Runtime's quantizer would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.core.model import inspect_model
from tests.support.cli import run_cli
from tests.support.digits import DigitsModel
from tests.support.variants import digits_lstm, dynamic_features, quantized


@pytest.fixture(scope="module")
def dynamic(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dynamic_features(digits.onnx, tmp_path_factory.mktemp("dyn") / "trunk.onnx")


@pytest.fixture(scope="module")
def quantized_files(digits: DigitsModel, tmp_path_factory: pytest.TempPathFactory
                    ) -> dict[str, Path]:
    return quantized(digits.onnx, digits.calib, tmp_path_factory.mktemp("quant"))


def test_symbolic_dims_warn_that_macs_are_a_lower_bound(dynamic: Path) -> None:
    result = run_cli("inspect", str(dynamic), "--json")
    assert result.status == 0, result.stderr
    document = result.json()
    assert document["macs_lower_bound"] is True
    warning = next(w for w in document["warnings"] if "lower bound" in w)
    assert "'input' [batch, 1, height, width]" in warning
    assert "--shape input=1,1,HEIGHT,WIDTH" in warning
    text = run_cli("inspect", str(dynamic))
    assert "MACs >= " in text.stdout and "warning: MACs are a lower bound" in text.stderr


def test_shape_gives_the_real_mac_count(dynamic: Path, digits: DigitsModel) -> None:
    small = run_cli("inspect", str(dynamic), "--shape", "input=1,1,8,8", "--json").json()
    big = run_cli("inspect", str(dynamic), "--shape", "input=1,1,320,320", "--json").json()
    assert small["macs_lower_bound"] is False and big["macs_lower_bound"] is False
    assert not [w for w in big["warnings"] if "lower bound" in w]
    # the trunk's MACs at 8x8 are the whole CNN's minus its two Gemm layers
    whole = inspect_model(digits.onnx)
    assert small["macs"] == whole.macs - (128 * 64 + 64 * 10)
    # all convolutions: MACs grow with the pixel count (320x320 = 1600 x 8x8)
    assert big["macs"] == small["macs"] * 1600
    assert big["macs"] > 100_000_000


@pytest.mark.parametrize(("kind", "precision"), [("dynamic", "int8-dynamic"),
                                                  ("qoperator", "int8"), ("qdq", "int8")])
def test_already_quantized_onnx_is_labelled_and_its_macs_counted(
        quantized_files: dict[str, Path], digits: DigitsModel, kind: str,
        precision: str) -> None:
    result = run_cli("inspect", str(quantized_files[kind]), "--json")
    assert result.status == 0, result.stderr
    document = result.json()
    assert document["precision"] == precision
    # the same multiplies as the float model, whatever op carries them
    assert document["macs"] == inspect_model(digits.onnx).macs
    assert f"precision {precision}" in run_cli("inspect", str(quantized_files[kind])).stdout


def test_a_dynamically_quantized_lstm_counts_its_recurrent_macs(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    fp32, int8 = digits_lstm(tmp_path_factory.mktemp("lstm"))
    float_info, int8_info = inspect_model(fp32), inspect_model(int8)
    assert "DynamicQuantizeLSTM" in int8_info.ops
    assert (float_info.precision, int8_info.precision) == ("fp32", "int8-dynamic")
    steps, hidden, features = 8, 32, 8
    recurrent = steps * 4 * hidden * (features + hidden)
    assert float_info.macs == int8_info.macs == recurrent + hidden * 10


def test_the_float_model_stays_fp32(digits: DigitsModel) -> None:
    assert inspect_model(digits.onnx).precision == "fp32"
    assert np.isclose(inspect_model(digits.onnx).macs, 460_416)
