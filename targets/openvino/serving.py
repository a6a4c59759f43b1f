"""A ready OpenVINO Model Server (OVMS) configuration for an IR, beside it in the bundle.

The bundle gets ``serving/ovms/config.json`` and the IR under ``serving/ovms/models/model/1/``
(OVMS serves numbered versions of a model folder; ``base_path`` is relative to the config), so
``ovms --config_path serving/ovms/config.json --port 9000`` serves the chosen IR computing as
edge verified it: ``plugin_config`` carries the INFERENCE_PRECISION_HINT edge loaded it with.
MLServer has no OpenVINO runtime (its runtimes: scikit-learn, XGBoost, LightGBM, MLflow,
Hugging Face, CatBoost, Alibi), so no MLServer settings are written for an IR.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["CONFIG", "MODEL_DIR", "ovms_config", "serving_files"]

CONFIG = "serving/ovms/config.json"
MODEL_DIR = "serving/ovms/models/model/1"
#: precision -> the INFERENCE_PRECISION_HINT the IR is verified with (fp32's ops are also
#: marked precise in the IR itself).
HINTS = {"fp32": "f32", "fp16": "f32", "int8": "f32", "int8-dynamic": "f32", "bf16": "bf16"}


def ovms_config(precision: str) -> dict[str, object]:
    """OVMS's config.json for the IR of ``precision`` under ``models/model/1``."""
    plugin = {"INFERENCE_PRECISION_HINT": HINTS[precision], "PERFORMANCE_HINT": "LATENCY"}
    return {"model_config_list": [{"config": {
        "name": "model", "base_path": "models/model", "target_device": "CPU",
        "plugin_config": plugin}}]}


def serving_files(ir: Path, precision: str) -> dict[str, Path]:
    """Bundle-relative name -> file: the config (written beside ``ir``) and the IR's files."""
    config = ir.with_name(f"{ir.stem}.ovms.json")
    config.write_text(json.dumps(ovms_config(precision), indent=1) + "\n")
    weights = ir.with_suffix(".bin")
    return {CONFIG: config, f"{MODEL_DIR}/model.xml": ir, f"{MODEL_DIR}/model.bin": weights}
