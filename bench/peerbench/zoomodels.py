"""Trained models of the zoo (tests/support/zoo_entries.py) as peers.py models.

The peers start from the ONNX edge itself reads the zoo file into (``reference_model``, edge's
intake: a Keras or TFLite file converted by tf2onnx and checked, an ONNX file fixed if it must
be), made in this child process with edge's conversion cache at bench/.cache/edge, the cache
``edge optimize`` then uses. ``edge optimize`` gets the original file with the entry's
``--metric`` and ``--shape`` flags. Calibration = the zoo's calibration samples, held out = the
zoo's held-out samples (``zoo.split``: never overlapping), neither labelled.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from .common import CACHE, ROOT

#: peers.py model name -> zoo entry (tests/support/zoo_entries.py)
ZOO = {"fer": "FER", "hand": "HAND_LANDMARK", "oww": "OWW_EMBED"}


def entry(model: str) -> Any:
    """The zoo entry of a peers.py model name."""
    sys.path.insert(0, str(ROOT))
    from tests.support import zoo_entries

    return getattr(zoo_entries, ZOO[model])


def build_zoo(model: str, work: Path) -> dict[str, Any]:
    """Child process: the original file, its reference ONNX, calibration and held-out .npy."""
    found = entry(model)  # puts the repository on sys.path
    from tests.support import zoo

    if len(zoo.samples(found)) != 1:
        raise SystemExit(f"{found.name}: peers.py feeds one input; this model has several")
    source = zoo.model(found)
    calib, held = zoo.write_data(found, work)
    onnx = work / "reference.onnx"
    shutil.copyfile(reference_onnx(source, found.shapes), onnx)
    return {"onnx": str(onnx), "source": str(source), "calib": str(calib), "eval": str(held),
            "metrics": list(found.metrics), "shapes": list(found.shapes), "entry": found.name,
            "package": found.spec, "member": found.member, "task": found.task}


def reference_onnx(source: Path, shapes: tuple[str, ...]) -> Path:
    """edge's reference ONNX for ``source`` (edge's own intake, edge's cache under bench/)."""
    os.environ["EDGE_CACHE_DIR"] = str(CACHE / "edge")
    from edge.core.intake import parse_shapes, reference_model

    pins = parse_shapes(shapes) if shapes else None
    _, reference = reference_model(source, shapes=pins)
    return Path(reference)
