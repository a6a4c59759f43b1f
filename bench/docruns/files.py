"""The files the sessions start from: the shipped digits sample under the names each page uses,
small models made here (a dynamic-batch MatMul, an outlier digits CNN, a TorchScript MLP, the
digits trunk with symbolic height/width, a YOLO-layout detector, a trained CTC recognizer, an
ill-conditioned MatMul pair), mediapipe's face detectors and LFW crops for them (as the tests
fetch them), profiles that extend the catalog, and deliberately broken inputs for the error
examples."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "edge" / "samples"


def write(work: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(body)


def digits(work: Path, model: str = "model.onnx", calib: str = "calib.npy",
           held: str = "eval.npz") -> None:
    """The shipped digits CNN and its calibration and labelled evaluation data."""
    shutil.copy(SAMPLES / "digits.onnx", work / model)
    shutil.copy(SAMPLES / "digits_calib.npy", work / calib)
    shutil.copy(SAMPLES / "digits_eval.npz", work / held)


def matmul(path: Path, rows: int, cols: int, *, seed: int = 0) -> None:
    """``y = x @ w``: input ``x`` of shape [batch, rows] (batch symbolic), ``w`` [rows, cols]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", cols])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)


def normal(path: Path, *shape: int, seed: int = 1) -> None:
    np.save(path, np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def outlier_digits(src: Path, dst: Path, calib: np.ndarray) -> None:
    """The digits CNN with an activation outlier, built as the recovery tests build it."""
    sys.path.insert(0, str(ROOT))
    from tests.support.variants import with_outlier_channel

    with_outlier_channel(src, dst, calib)


def torchscript_mlp(path: Path) -> None:
    """A two-layer MLP (32 -> 64 -> 10) saved with torch.jit.save(torch.jit.script(net))."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden, self.out = nn.Linear(32, 64), nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.relu(self.hidden(x)))

    torch.jit.save(torch.jit.script(MLP().eval()), str(path))


def face_detector(path: Path) -> None:
    """mediapipe's short-range face detector (from the cached mediapipe wheel, as the tests)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.mediapipe import face_detector as cached

    shutil.copy(cached(), path)


def sparse_face_detector(path: Path) -> None:
    """mediapipe's full-range face detector with sparse weights (DENSIFY: no ONNX converter
    reads it), from the cached mediapipe wheel."""
    sys.path.insert(0, str(ROOT))
    from tests.support.mediapipe import sparse_face_detector as cached

    shutil.copy(cached(), path)


def faces192(path: Path, count: int = 40) -> None:
    """lfw_subset faces and non-faces (half each) scaled to 192x192, in [-1, 1] (as the tests)."""
    sys.path.insert(0, str(ROOT))
    from skimage.transform import resize

    from tests.support.mediapipe import lfw_faces

    images, _ = lfw_faces()
    pick = np.r_[0:count // 2, 100:100 + count // 2]
    np.save(path, np.stack([resize(images[i], (192, 192), order=1) for i in pick])
            .astype(np.float32))


def detector(work: Path) -> None:
    """``det.onnx`` (one YOLO-layout output ``out`` [1, 32, 7]) and ``det.npy`` (60 inputs),
    made by tests/support/verify_models.py."""
    sys.path.insert(0, str(ROOT))
    from tests.support.verify_models import detector_model, uniform_inputs

    detector_model(work / "det.onnx")
    np.save(work / "det.npy", uniform_inputs(60, (1, 16)))


def ctc_recognizer(work: Path) -> None:
    """``ctc.onnx`` (a CTC text recognizer: scores time first [T, 1, C], declared [1, seqlen])
    and ``lines.npy`` (48 utterances): tests/support/ctc_model.py, as test_output_kinds.py's
    fixture does (a few seconds, one thread)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.ctc_model import build

    lines, _ = build(work / "ctc.onnx", 48)
    np.save(work / "lines.npy", np.stack(lines)[:, None])


def cancelling(work: Path) -> None:
    """``cancel.onnx`` (an ill-conditioned MatMul pair: OpenVINO's fp32 is not exact) and
    ``x.npy`` (40 inputs): tests/support/cancel_model.py, as test_fp32_exact.py's."""
    sys.path.insert(0, str(ROOT))
    from tests.support.cancel_model import cancelling as build
    from tests.support.cancel_model import inputs

    build(work / "cancel.onnx")
    np.save(work / "x.npy", inputs())


def trunk(work: Path) -> None:
    """``trunk.onnx``: the digits CNN's convolutions with symbolic batch, height and width."""
    sys.path.insert(0, str(ROOT))
    from tests.support.variants import dynamic_features

    dynamic_features(SAMPLES / "digits.onnx", work / "trunk.onnx")


def not_models(work: Path) -> None:
    """Files that are not models: a corrupt .onnx, a .tflite with a wrong header, an unknown
    suffix, an empty folder."""
    (work / "bad.onnx").write_bytes(b"\x0a\xff\xff\xff\xff not protobuf")
    (work / "model.tflite").write_bytes(b"not a flatbuffer" * 4)
    (work / "model.bin").write_bytes(b"\0" * 64)
    (work / "emptydir").mkdir()


#: profiles.md's `my-pi.yaml`, verbatim.
MY_PI = """\
extends: rpi4
name: Kitchen Pi 4 (2 GB)
memory:
  ram_mb: 2048
  model_budget_mb: 512
compute:
  threads: 2
runtimes: [tflite]
access:
  user: alice
  python: /home/alice/venv/bin/python
"""

#: profiles.md's `broken.yaml`, verbatim (and `edge profiles validate` examples' companions).
BROKEN = """\
extends: rpi4
compute:
  cores: 0
runtimes: [tflite, tensorflow]
"""

BAD_PROFILES = {
    "broken.yaml": BROKEN,
    "typo.yaml": "extends: rpi4\nmemory:\n  ram_gb: 4\n",
    "runtime.yaml": "extends: rpi4\nruntimes: [tflite, pytorch]\n",
    "dup.yaml": "extends: rpi4\nruntimes: [tflite, tflite]\n",
    "type.yaml": "extends: rpi4\ncompute:\n  clock_ghz: fast\n",
    "acc.yaml": ("extends: rpi4\naccelerators:\n  - {kind: npu, name: npu, tops: 0, "
                 "precisions: [int8], runtime: tflite}\n"),
    "list.yaml": "- rpi4\n- rpi5\n",
    "base.yaml": "extends: rpi99\n",
    "a.yaml": "extends: b.yaml\n",
    "b.yaml": "extends: a.yaml\n",
    "bad-yaml.yaml": "extends: rpi4\nname: [unclosed\n",
}
