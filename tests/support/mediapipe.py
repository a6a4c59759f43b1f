"""A real trained model and real data: mediapipe's face detector scored on scikit-image's faces.

The detector comes out of the mediapipe 0.10.21 wheel (Apache-2.0), fetched once with
``pip download --no-deps`` into a cache directory and never installed (installing it pins
numpy<2). ``skimage.data.lfw_subset()`` ships 200 25x25 crops: 100 faces, then 100 non-faces.
Each crop is scaled to 104x104, framed by a 12 px black border to the model's 128x128, repeated
to RGB and mapped to [-1, 1] (mediapipe's ImageToTensor range for this model). An image's score
is its best anchor's sigmoid(classificator); the metric is ROC AUC (float model: 0.9999).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

MEDIAPIPE = "mediapipe==0.10.21"
MEMBER = "mediapipe/modules/face_detection/face_detection_short_range.tflite"
SIZE_BYTES = 229_714  # the member's size in the 0.10.21 wheel
SPARSE_MEMBER = "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite"
SPARSE_SIZE_BYTES = 676_746
INPUT = "input"  # [1, 128, 128, 3] float32, NHWC
SIDE, BORDER = 128, 12

Run = Callable[[np.ndarray], Sequence[np.ndarray]]


def cache_dir() -> Path:
    """Where test data downloads are kept between runs (``EDGE_TEST_DATA`` overrides)."""
    return Path(os.environ.get("EDGE_TEST_DATA", "~/.cache/edge-test-data")).expanduser()


def face_detector() -> Path:
    """face_detection_short_range.tflite, extracted from the cached mediapipe wheel."""
    return _member(MEMBER, SIZE_BYTES)


def sparse_face_detector() -> Path:
    """face_detection_full_range_sparse.tflite ([1, 192, 192, 3] in [-1, 1]): its weights are
    sparse (DENSIFY operators), which no ONNX converter reads."""
    return _member(SPARSE_MEMBER, SPARSE_SIZE_BYTES)


def _member(member: str, size: int) -> Path:
    """A file of the cached mediapipe wheel, extracted once into the cache directory."""
    target = cache_dir() / Path(member).name
    if target.is_file() and target.stat().st_size == size:
        return target
    with zipfile.ZipFile(_wheel()) as wheel:
        data = wheel.read(member)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


def _wheel() -> Path:
    """The mediapipe wheel for this platform, downloaded (no dependencies) when not cached."""
    found = sorted(cache_dir().glob("mediapipe-0.10.21-*.whl"))
    if found:
        return found[0]
    cache_dir().mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "-q", MEDIAPIPE, "-d", str(cache_dir())], check=True, timeout=600)
    found = sorted(cache_dir().glob("mediapipe-0.10.21-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download {MEDIAPIPE} left no wheel in {cache_dir()}")
    return found[0]


def lfw_faces() -> tuple[np.ndarray, np.ndarray]:
    """(images [200, 128, 128, 3] float32 in [-1, 1], labels [200] int64: 1 face, 0 not)."""
    from skimage.data import lfw_subset
    from skimage.transform import resize

    crops = lfw_subset()
    inner = SIDE - 2 * BORDER
    scaled = np.stack([resize(c, (inner, inner), order=1) for c in crops])
    framed = np.pad(scaled, ((0, 0), (BORDER, BORDER), (BORDER, BORDER)))
    images = np.repeat(framed[..., None], 3, axis=-1) * 2.0 - 1.0
    labels = np.r_[np.ones(100), np.zeros(100)].astype(np.int64)
    return images.astype(np.float32), labels


def face_scores(run: Run, images: np.ndarray) -> np.ndarray:
    """Each image's best-anchor face probability; ``run`` maps a [1,128,128,3] batch to outputs."""
    return np.array([_best(run(image[None])) for image in images])


def _best(outputs: Sequence[np.ndarray]) -> float:
    """sigmoid(max logit) of the classificators output ([1, 896, 1]: last dim 1)."""
    logits = next(np.asarray(o) for o in outputs if np.shape(o)[-1] == 1)
    top = float(np.clip(logits.max(), -100.0, 100.0))
    return 1.0 / (1.0 + np.exp(-top))


def face_auc(run: Run, images: np.ndarray | None = None, labels: np.ndarray | None = None) -> float:
    """ROC AUC of ``run``'s face scores on lfw_subset (or the given images and labels)."""
    from sklearn.metrics import roc_auc_score

    if images is None or labels is None:
        images, labels = lfw_faces()
    return float(roc_auc_score(labels, face_scores(run, images)))


def ort_runner(onnx_path: Path) -> Run:
    """An onnxruntime session over the model's first input."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda batch: session.run(None, {name: batch})


def litert_runner(tflite_path: Path) -> Run:
    """A LiteRT interpreter over the model's first input."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(tflite_path))
    interp.allocate_tensors()
    index = interp.get_input_details()[0]["index"]
    outs = [d["index"] for d in interp.get_output_details()]

    def run(batch: np.ndarray) -> list[np.ndarray]:
        interp.set_tensor(index, batch)
        interp.invoke()
        return [np.array(interp.get_tensor(i)) for i in outs]

    return run


def write_face_data(out_dir: Path, every: int = 4) -> tuple[Path, Path]:
    """calib.npy (every ``every``-th image) and eval.npz (the rest, key ``input`` + labels)."""
    images, labels = lfw_faces()
    pick = np.arange(len(images)) % every == 0
    out_dir.mkdir(parents=True, exist_ok=True)
    calib, held = out_dir / "faces_calib.npy", out_dir / "faces_eval.npz"
    np.save(calib, images[pick])
    np.savez(held, **{INPUT: images[~pick], "face": labels[~pick]})
    return calib, held
