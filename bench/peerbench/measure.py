"""Interleaved timing and the roofline (peak GOPS per precision)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import GEMM_N, Run
from .runners import Row, ov_run

# ====================================================================== timing


def interleaved(rows: list[Row], x: np.ndarray, rounds: int) -> None:
    """Time every row by edge's one timing method (devices/agent/timing.py): interleaved
    rounds, the order reversed every other round, a 0.1 s idle gap and 3 warm-up calls before
    each block; about 0.2 s of calls per block (the slowest row's count)."""
    from devices.agent import timing

    calls = max(_calls_per_block(row.run, x) for row in rows)
    timed = timing.interleaved({row.name: _bound(row.run, x) for row in rows}, rounds,
                               rounds * calls, warmup=3, idle_s=0.1)
    for row in rows:
        row.times += timed.samples[row.name]


def _bound(run: Run, x: np.ndarray) -> Callable[[], object]:
    return lambda: run(x)


def _calls_per_block(run: Run, x: np.ndarray) -> int:
    """About 0.2 s of calls per block, 10 to 300."""
    for _ in range(3):
        run(x)
    each = timing_ms(run, x) / 1e3
    return int(min(300, max(10, 0.2 / max(each, 1e-6))))


def timing_ms(run: Run, x: np.ndarray) -> float:
    """Mean ms of three calls (to size the blocks, not a measurement that is reported)."""
    from devices.agent import timing

    return sum(timing.elapsed_ms(run, x)[1] for _ in range(3)) / 3


# ====================================================================== roofline


def roofline(threads: int) -> dict[str, Any]:
    """Child process: peak GOPS of a 2048^3 GEMM per precision and runtime, best of 10."""
    peaks: dict[str, Any] = {}
    for name, gemm in (("fp32 numpy (OpenBLAS)", _numpy_gemm),
                       ("fp32 openvino", lambda t: _ov_gemm(t, "f32")),
                       ("bf16 openvino", lambda t: _ov_gemm(t, "bf16")),
                       ("int8 onnxruntime MatMulInteger", _ort_int8_gemm),
                       ("int8 openvino (NNCF)", _ov_int8_gemm)):
        try:
            peaks[name] = round(2 * GEMM_N**3 / _best_seconds(gemm(threads)) / 1e9, 1)
        except Exception as exc:  # noqa: BLE001 - report what could be measured
            peaks[name] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    return peaks


def _best_seconds(call: Callable[[], object], repeats: int = 10) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _gemm_inputs(dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    if dtype == np.float32:
        return (rng.standard_normal((GEMM_N, GEMM_N), np.float32),
                rng.standard_normal((GEMM_N, GEMM_N), np.float32))
    return (rng.integers(0, 255, (GEMM_N, GEMM_N), np.uint8),
            rng.integers(-127, 127, (GEMM_N, GEMM_N), np.int8))


def _numpy_gemm(threads: int) -> Callable[[], object]:
    from threadpoolctl import threadpool_limits

    a, b = _gemm_inputs()
    limits = threadpool_limits(threads)  # stays in force in this child process
    assert limits is not None
    return lambda: a @ b


def _ov_matmul_model() -> tuple[Any, np.ndarray]:
    import openvino as ov
    import openvino.opset13 as ops

    a, b = _gemm_inputs()
    param = ops.parameter([GEMM_N, GEMM_N], np.float32, name="a")
    return ov.Model([ops.matmul(param, ops.constant(b), False, False)], [param]), a


def _ov_gemm(threads: int, hint: str) -> Callable[[], object]:
    model, a = _ov_matmul_model()
    run = ov_run(model, threads, {"INFERENCE_PRECISION_HINT": hint}).run
    return lambda: run(a)


def _ov_int8_gemm(threads: int) -> Callable[[], object]:
    import nncf

    model, a = _ov_matmul_model()
    quantized = nncf.quantize(model, nncf.Dataset([a]), subset_size=1)
    run = ov_run(quantized, threads).run
    return lambda: run(a)


def _ort_int8_gemm(threads: int) -> Callable[[], object]:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a, b = _gemm_inputs(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [GEMM_N, GEMM_N])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [GEMM_N, GEMM_N])],
        [numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # onnx 1.23 writes IR 14, newer than this onnxruntime reads
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"a": a})


def peak_by_precision(peaks: dict[str, Any]) -> dict[str, float]:
    """The best measured GOPS per precision (fp32, bf16, int8)."""
    best: dict[str, float] = {}
    for name, gops in peaks.items():
        if isinstance(gops, float):
            precision = name.split()[0]
            best[precision] = max(best.get(precision, 0.0), gops)
    return best


def bound_ms(macs: int, compute: str, peaks: dict[str, float]) -> float | None:
    """MACs x 2 / peak of the precision that does the bulk of the work."""
    precision = ("int8" if compute.startswith("int8") else
                 "bf16" if compute.startswith("bf16") else "fp32")
    peak = peaks.get(precision)
    return 2 * macs / (peak * 1e9) * 1e3 if peak else None


