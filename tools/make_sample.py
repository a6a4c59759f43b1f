"""Rebuild the sample model edge ships (edge/samples/): a digits CNN trained on scikit-learn's
digits, its calibration split and its labelled held-out split.

    python tools/make_sample.py        # needs the test extra (torch, scikit-learn)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.digits import train_digits  # noqa: E402


def main() -> None:
    """Train and copy the files into edge/samples/."""
    out = ROOT / "edge" / "samples"
    with tempfile.TemporaryDirectory() as tmp:
        model = train_digits(Path(tmp))
        for src, name in ((model.onnx, "digits.onnx"), (model.calib, "digits_calib.npy"),
                          (model.eval, "digits_eval.npz")):
            shutil.copyfile(src, out / name)
    print(f"wrote {out} (held-out fp32 accuracy {model.float_accuracy:.3f})")


if __name__ == "__main__":
    main()
