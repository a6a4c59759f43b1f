"""One rknn-toolkit2 conversion, run inside the toolchain's environment (never edge's):
``python child.py REQUEST.json``. Standard library and rknn.api only; on failure the last line
on stderr says which step failed, and the exit status is 1.
"""

from __future__ import annotations

import json
import sys


class StepFailed(Exception):
    """An rknn.api call returned non-zero."""


def _check(step: str, status: int) -> None:
    if status != 0:
        raise StepFailed(f"rknn-toolkit2 {step} failed (returned {status}); its log is above")


def convert(request: dict) -> None:
    """Config, load the ONNX model, build (quantizing for int8), export."""
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    try:
        _check("config", rknn.config(target_platform=request["platform"],
                                     quantized_algorithm=request["algorithm"]))
        _check("load_onnx", rknn.load_onnx(model=request["model"], inputs=request["inputs"],
                                           input_size_list=request["shapes"]))
        quantize = request["precision"] == "int8"
        _check("build", rknn.build(do_quantization=quantize, dataset=request["dataset"]))
        _check("export_rknn", rknn.export_rknn(request["out"]))
    finally:
        rknn.release()


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    try:
        convert(request)
    except Exception as exc:  # noqa: BLE001 - reported as one line to edge
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{type(exc).__name__}: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
