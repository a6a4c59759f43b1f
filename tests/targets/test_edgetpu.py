"""Edge TPU target: without ``edgetpu_compiler`` (CI) the plan skips edgetpu-int8 saying how to
get it; Coral's supported-operations table predicts the CPU fallbacks; the compiler's log is
read per operator; the int8 model the artifact is compiled from is verified on LiteRT's
reference kernels. The compile itself runs only where the compiler is installed (declared
exception: /work/notes/edgetpu.md asks for it in tests/support/hardware.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import edge
from edge.core.data import load_dataset
from edge.core.errors import UsageError
from edge.core.model import inspect_model
from edge.core.plan import fallbacks_in
from edge.core.values import Dataset, ModelInfo
from targets import get_target, runtime_for_suffix
from targets.base import ConversionError
from targets.edgetpu import ARTIFACT, SOURCE, EdgeTPUTarget, compiler, ops
from targets.edgetpu import target as target_module
from targets.tflite import TFLiteTarget
from tests.support.cli import run_cli
from tests.support.hardware import needs_hardware

SAMPLES = Path(edge.__file__).parent / "samples"
needs_tflite = pytest.mark.skipif(TFLiteTarget().missing() is not None,
                                  reason=str(TFLiteTarget().missing()))

# A real compiler's output, as posted in google-coral/edgetpu issue #60 (Edge TPU Compiler
# 2.1.302470888, ``edgetpu_compiler -s model2.tflite``), its operator table abridged to rows of
# the same issue's log; written down here because the compiler cannot be installed on this host.
REAL_LOG_PARTIAL = """\
Edge TPU Compiler version 2.1.302470888

Model compiled successfully in 12264 ms.

Input model: model2.tflite
Input size: 8.11MiB
Output model: model2_edgetpu.tflite
Output size: 9.47MiB
On-chip memory used for caching model parameters: 6.86MiB
On-chip memory remaining for caching model parameters: 7.75KiB
Off-chip memory used for streaming uncached model parameters: 1.22MiB
Number of Edge TPU subgraphs: 1
Total number of operations: 93
Operation log: model2_edgetpu.log

Model successfully compiled but not all operations are supported by the Edge TPU. A percentage \
of the model will instead run on the CPU, which is slower. If possible, consider updating your \
model to use only operations supported by the Edge TPU. For details, visit g.co/coral/model-reqs.
Number of operations that will run on Edge TPU: 83
Number of operations that will run on CPU: 10

Operator                       Count      Status

LOGISTIC                       1          More than one subgraph is not supported
ADD                            10         Mapped to Edge TPU
CONCATENATION                  1          More than one subgraph is not supported
CONCATENATION                  3          Mapped to Edge TPU
"""

# Coral's documented output for a model fully mapped (coral.ai/docs/edgetpu/compiler, the
# compiler's 16.0 summary format, as in google-coral/edgetpu issue #671's posted output).
REAL_LOG_ALL_MAPPED = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.

Model compiled successfully in 1354 ms.

Input model: model.tflite
Input size: 20.12KiB
Output model: model_edgetpu.tflite
Output size: 96.37KiB
Number of Edge TPU subgraphs: 1
Total number of operations: 9
Operation log: model_edgetpu.log
See the operation log file for individual operation details.
Compilation child process completed within timeout period.
Compilation succeeded!

Operator                       Count      Status

CONV_2D                        3          Mapped to Edge TPU
MAX_POOL_2D                    2          Mapped to Edge TPU
RESHAPE                        1          Mapped to Edge TPU
FULLY_CONNECTED                2          Mapped to Edge TPU
"""


@pytest.fixture(scope="module")
def sample() -> ModelInfo:
    return inspect_model(SAMPLES / "digits.onnx")


# ---------------------------------------------------------------- the plan, without the compiler


@pytest.mark.skipif(compiler.find() is not None, reason="the compiler is installed here")
def test_dry_run_skips_edgetpu_saying_how_to_get_the_compiler() -> None:
    result = run_cli("optimize", "sample:digits", "--profile", "coral-dev-board", "--dry-run",
                     "--json")
    assert result.status == 0, result.stderr
    plan = {p["candidate"]: p for p in result.json()["plan"]}
    edgetpu = plan["edgetpu-int8"]
    assert not edgetpu["keep"]
    assert edgetpu["reason"] == (f"cannot convert on this host: {compiler.HOW_TO_GET} "
                                 "(predicted CPU fallbacks: none)")
    for words in ("coral-edgetpu-stable main", "apt-get install edgetpu-compiler", "x86-64"):
        assert words in edgetpu["reason"]
    assert list(plan).index("edgetpu-int8") < list(plan).index("tflite-int8")  # unit first
    assert plan["tflite-int8"]["keep"]  # the Cortex-A53 still gets its candidates


def test_with_a_compiler_the_plan_keeps_edgetpu_with_its_prediction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``find`` is replaced: the plan asks nothing else of the compiler."""
    monkeypatch.setattr(compiler, "find", lambda: "/opt/coral/edgetpu_compiler")
    result = run_cli("optimize", "sample:digits", "--profile", "coral-dev-board", "--dry-run",
                     "--json")
    assert result.status == 0, result.stderr
    edgetpu = next(p for p in result.json()["plan"] if p["candidate"] == "edgetpu-int8")
    assert edgetpu["keep"], edgetpu
    assert "Google Edge TPU" in edgetpu["reason"]
    assert "every operator maps to it" in edgetpu["reason"]


def test_the_runtime_is_found_by_its_folder_and_its_suffix() -> None:
    target = get_target("edgetpu")
    assert isinstance(target, EdgeTPUTarget)
    assert target.caps.precisions == ("int8",) and target.caps.converts_with == "tflite"
    assert (target.caps.accelerator, target.caps.host_runs) == ("Google Edge TPU", "reference")
    assert target.estimate(Path("m.edgetpu.tflite"), inspect_model(SAMPLES / "digits.onnx")) \
        is None  # the compiler gives no time estimate
    found = runtime_for_suffix(".edgetpu.tflite")
    assert found is not None and found.name == "edgetpu" and found.provision is None


def test_missing_names_the_compiler_only_when_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "find", lambda: None)
    assert EdgeTPUTarget().missing() in (compiler.HOW_TO_GET, TFLiteTarget().missing())
    monkeypatch.setattr(compiler, "find", lambda: "/opt/coral/edgetpu_compiler")
    assert EdgeTPUTarget().missing() == TFLiteTarget().missing()


# ---------------------------------------------------------------- Coral's table


def test_the_digits_cnn_is_predicted_all_on_the_edge_tpu(sample: ModelInfo) -> None:
    assert ops.onnx_ops(Path(sample.path)).count("CONV_2D") == 3
    assert EdgeTPUTarget().predict_fallbacks(sample) == ()


def test_everything_after_the_first_unsupported_op_falls_back() -> None:
    assert ops.predict(["CONV_2D", "RELU", "DIV", "ADD", "LEAKY_RELU", "ADD"]) == (
        "DIV", "ADD", "LEAKY_RELU")
    assert ops.predict(["CONV_2D", "TRANSPOSE"], runtime=13) == ("TRANSPOSE",)  # from 14
    assert ops.predict(["CONV_2D", "TRANSPOSE"]) == ()
    assert ops.predict(["DEQUANTIZE"]) == ("DEQUANTIZE",)


def test_an_onnx_model_with_an_unsupported_op_predicts_it_and_the_rest(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Erf", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Identity", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    path = tmp_path / "erf.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert ops.onnx_ops(path) == ("RELU", "GELU", "RELU")
    assert ops.predict(ops.onnx_ops(path)) == ("GELU", "RELU")


def test_an_unreadable_model_predicts_nothing(tmp_path: Path, sample: ModelInfo) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx")
    info = ModelInfo(**{**{f: getattr(sample, f) for f in ("sha256", "size_bytes", "opset",
                                                           "inputs", "outputs", "params",
                                                           "macs")}, "path": str(broken)})
    assert EdgeTPUTarget().predict_fallbacks(info) is None


def test_the_table_is_consistent_data() -> None:
    assert all(name == name.upper() and row.runtime in (10, 13, 14)
               for name, row in ops.SUPPORTED.items())
    assert "DEQUANTIZE" not in ops.SUPPORTED and "QUANTIZE" in ops.SUPPORTED
    mapped = {v for v in ops.ONNX_TO_TFLITE.values() if v}
    assert {"CONV_2D", "FULLY_CONNECTED", "RELU", "MAX_POOL_2D"} <= mapped & set(ops.SUPPORTED)


# ---------------------------------------------------------------- the compiler's log


def test_a_real_partial_log_names_the_cpu_operators() -> None:
    log = compiler.parse(REAL_LOG_PARTIAL)
    assert log.version == "2.1.302470888" and log.total == 93 and log.subgraphs == 1
    assert log.fallbacks == ("LOGISTIC", "CONCATENATION")
    assert (log.on_tpu, log.on_cpu) == (13, 2)  # of the rows written down
    assert log.reasons()[0] == "LOGISTIC x1: More than one subgraph is not supported"


def test_a_real_all_mapped_log_has_no_fallback() -> None:
    log = compiler.parse(REAL_LOG_ALL_MAPPED)
    assert log.version == "16.0.384591198" and log.total == 9
    assert log.fallbacks == () and (log.on_tpu, log.on_cpu) == (8, 0)


def test_a_log_without_a_table_has_no_rows() -> None:
    log = compiler.parse("Edge TPU Compiler version 16.0.384591198\nInvalid model: m.tflite\n"
                         "Model not quantized\n")
    assert log.rows == () and compiler._why("Invalid model: m.tflite\nModel not quantized\n") \
        == "Model not quantized"


def test_compiling_without_the_compiler_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(compiler, "find", lambda: None)
    with pytest.raises(ConversionError, match="edgetpu_compiler is not on PATH") as caught:
        compiler.compile_model(tmp_path / "m.tflite", tmp_path, timeout_s=10, options={})
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- verification and compiling


@pytest.fixture(scope="module")
def int8_source(sample: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TFLite target's int8 model with int8 I/O: what the compiler is given."""
    workdir = tmp_path_factory.mktemp("edgetpu-cache")
    calib = load_dataset(SAMPLES / "digits_calib.npy", sample)
    source, _ = TFLiteTarget().variant(sample, "int8-io", calib=calib, workdir=workdir)
    return source


def _accuracy(runner: Any, data: Dataset) -> float:
    predictions = [int(np.argmax(runner.run(feed)[0])) for feed in data.feeds]
    return float(np.mean(np.array(predictions) == data.labels))


@pytest.mark.slow
@needs_tflite
def test_the_int8_model_is_verified_on_reference_kernels(int8_source: Path, sample: ModelInfo,
                                                         tmp_path: Path) -> None:
    shutil.copyfile(int8_source, tmp_path / SOURCE)
    runner = EdgeTPUTarget().load(tmp_path / ARTIFACT, sample, threads=1)
    held_out = load_dataset(SAMPLES / "digits_eval.npz", sample, want_labels=True)
    cpu = TFLiteTarget().load(int8_source, sample, threads=1)
    feed = held_out.feeds[0]
    reference, optimized = runner.run(feed)[0], cpu.run(feed)[0]
    scale = runner.interpreter.get_output_details()[0]["quantization"][0]
    steps = np.abs(reference - optimized).max() / scale  # same int8 graph, other kernels:
    assert steps <= 1.01, steps  # their rounding differs by at most one output step
    assert _accuracy(runner, held_out) >= 0.9
    assert ops.predict(ops.tflite_ops(int8_source)) == ()  # all 9 ops on the Edge TPU


def test_an_artifact_without_its_source_is_a_usage_error(sample: ModelInfo,
                                                         tmp_path: Path) -> None:
    (tmp_path / ARTIFACT).write_bytes(b"compiled")
    with pytest.raises(UsageError, match="runs only on an Edge TPU"):
        EdgeTPUTarget().load(tmp_path / ARTIFACT, sample, threads=1)


def test_int8_is_the_only_precision(sample: ModelInfo, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="edgetpu has no fp32 path"):
        EdgeTPUTarget().convert(sample, "fp32", calib=load_dataset(
            SAMPLES / "digits_calib.npy", sample), workdir=tmp_path)


@pytest.mark.slow
@needs_tflite
@needs_hardware("tests/targets/test_edgetpu.py::test_the_compiler_maps_the_digits_cnn")
def test_the_compiler_maps_the_digits_cnn(sample: ModelInfo, tmp_path: Path) -> None:
    """Runs only where edgetpu_compiler is installed (declared exception, not in CI)."""
    calib = load_dataset(SAMPLES / "digits_calib.npy", sample)
    path, notes = EdgeTPUTarget().convert(sample, "int8", calib=calib, workdir=tmp_path)
    assert path.name == ARTIFACT and (tmp_path / SOURCE).is_file()
    assert "CUSTOM(edgetpu-custom-op)" in ops.tflite_ops(path)
    assert any(n.startswith("edgetpu_compiler ") and "on the Edge TPU" in n for n in notes)


# ---------------------------------------------------------------- edge's side of compiling
# A STAND-IN for edgetpu_compiler (a shell script on PATH), not the compiler: it tests what edge
# does around it -- arguments, the private folder, the notes, failures and the time limit --
# since the real one cannot be installed here. It prints the real output written down above.

_STAND_IN = """#!/bin/sh
echo "$@" > "$(dirname "$0")/args"
out=.
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out=$2; shift; done
{mode}
"""


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / compiler.COMPILER
    script.write_text(_STAND_IN.format(mode=mode))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def _compile_in(tmp_path: Path) -> tuple[Path, Any]:
    source = tmp_path / "int8.tflite"
    source.write_bytes(b"TFL3 int8")
    return source, target_module._compile(source, tmp_path / "work", 30.0, {})


def test_a_compile_with_fallbacks_is_kept_with_its_log(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log.txt"
    log.write_text(REAL_LOG_PARTIAL)
    _stand_in(tmp_path, monkeypatch, f'cp "$out/model.tflite" "$out/model_edgetpu.tflite"\n'
                                     f'cat {log}')
    (tmp_path / "work").mkdir()
    _, parsed = _compile_in(tmp_path)
    work = tmp_path / "work"
    assert sorted(p.name for p in work.iterdir()) == sorted([ARTIFACT, SOURCE])  # no scratch
    assert parsed.fallbacks == ("LOGISTIC", "CONCATENATION")
    args = (tmp_path / "bin" / "args").read_text().split()
    assert args[:2] == ["-s", "-o"] and args[3:5] == ["-t", "20"]  # under edge's 30 s
    assert args[-1].endswith("/model.tflite")


def test_a_failed_compile_is_one_line_and_leaves_nothing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch, 'echo "Edge TPU Compiler version 16.0.384591198"\n'
                                     'echo "Invalid model: model.tflite"\n'
                                     'echo "Model not quantized"\nexit 1')
    (tmp_path / "work").mkdir()
    with pytest.raises(ConversionError) as caught:
        _compile_in(tmp_path)
    assert str(caught.value) == "edgetpu_compiler failed (exit 1): Model not quantized"
    assert list((tmp_path / "work").iterdir()) == []


def test_a_compile_mapping_nothing_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch, 'cp "$out/model.tflite" "$out/model_edgetpu.tflite"\n'
                                     'printf "Edge TPU Compiler version 16.0.384591198\\n\\n'
                                     'Operator  Count  Status\\n\\n'
                                     'TRANSPOSE  70  Operation not supported\\n"')
    (tmp_path / "work").mkdir()
    with pytest.raises(ConversionError, match="mapped no operator to the Edge TPU: "
                                              "TRANSPOSE x70: Operation not supported"):
        _compile_in(tmp_path)
    assert list((tmp_path / "work").iterdir()) == []


def test_a_compile_past_its_limit_is_stopped(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch, "sleep 30")
    source = tmp_path / "int8.tflite"
    source.write_bytes(b"TFL3 int8")
    with pytest.raises(ConversionError, match="still running after its 1 s limit; stopped"):
        compiler.compile_model(source, tmp_path, timeout_s=1, options={})


@pytest.mark.slow
@needs_tflite
def test_the_notes_carry_the_compilers_fallbacks_for_the_flow(int8_source: Path) -> None:
    run = {"onnx2tf": "1.28.8", "files": {"int8-io": int8_source.name},
           "calibration_samples": 100}
    notes = target_module._notes(run, compiler.parse(REAL_LOG_PARTIAL), int8_source,
                                 target_module.DEFAULT_SETTINGS)
    assert fallbacks_in(notes) == ("LOGISTIC", "CONCATENATION")
    assert "edgetpu_compiler 2.1.302470888: 13 operators on the Edge TPU, 2 on the CPU" in notes[2]
    assert "Coral's supported-operations table predicted every operator on the Edge TPU" in notes
    assert notes[-1].endswith("on LiteRT's reference kernels (BUILTIN_REF)")
