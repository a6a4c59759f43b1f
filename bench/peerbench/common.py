"""Constants shared by the peer benchmark's parts: paths, the profile, edge's thresholds."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "bench" / ".cache"
BIN = Path(sys.executable).parent
PROFILE = "x86-64"
#: scikit-image sample images that ship inside the package (no download); one class each.
IMAGES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "hubble_deep_field",
          "immunohistochemistry", "retina", "coins", "moon", "brick", "gravel")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
SIZE = 224
#: MobileNetV2 inverted-residual settings: expansion t, channels c, repeats n, stride s.
MNV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
        (6, 160, 3, 2), (6, 320, 1, 1))
#: Residual branches start near identity: their last BatchNorm's gamma (see _make_cnn).
RESIDUAL_GAMMA = 0.2
CNN_RECIPE = "cnn-v2"  # cache key of the CNN build recipe; bump when _make_cnn changes
ONNX2TF_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
#: edge's default fidelity thresholds (edge optimize --max-drop / --min-cosine defaults).
MIN_COSINE, MAX_DROP = 0.98, 1.0
NOISE = 0.10  # differences under ~10% are noise on this shared machine
GEMM_N = 2048

#: one sample in, every output out (a list, in the runtime's order)
Run = Callable[[np.ndarray], list[np.ndarray]]

