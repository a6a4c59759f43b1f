"""``edge inspect``: describe a model and its fit in a device's budget."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from edge.cli.common import (
    ARG,
    PATH,
    SHAPE,
    TRUST_CODE,
    json_option,
    parse_args,
    parse_shapes,
    with_sample,
)
from edge.cli.output import emit, stdout_to_stderr
from edge.core.errors import ExitStatus
from edge.core.units import MB

__all__ = ["inspect"]

log = logging.getLogger("edge")


@click.command()
@click.argument("model", type=PATH)
@click.option("--profile", "profile_ref", help="Check the model against this device's budget.")
@SHAPE
@ARG
@TRUST_CODE
@json_option
def inspect(model: Path, profile_ref: str | None, shapes: tuple[str, ...],
            arg_values: tuple[str, ...], trust_model_code: bool, as_json: bool) -> int:
    """Describe a model: inputs, outputs, params, MACs, size, ops, fit on a device.

    MODEL may be ONNX, TFLite, Keras (.keras/.h5), a SavedModel folder or a PyTorch
    module (.pt/.pth, or TorchScript .jit; needs --shape, and --arg for a forward argument
    that is not a tensor: its value is baked into the reference); it is described as the
    reference ONNX edge converts from, or, for a .tflite no converter turns into a faithful
    ONNX model, as the .tflite itself (read with LiteRT, MACs not counted), with a warning
    naming what failed.
    MACs of inputs with symbolic dims (other than the batch) are a lower bound, with a
    warning: give --shape for the real count.
    A model that would run code from its file when read (a pickled PyTorch module, a Keras
    Lambda, a SavedModel with file, Python or network ops) is refused (exit 2) unless
    --trust-model-code.
    Exits 1 when the weights do not fit the profile's model budget even at int8.

    \b
    Example:
      edge inspect model.onnx --profile rpi4
      edge inspect face_detection.tflite
      edge inspect silero_vad.jit --shape x=1,512 --arg sr=16000
    """
    from edge.cli.render import render_model
    from edge.core.intake import inspect_reference, reference_model
    from edge.core.model import macs_caveat, ort_refusal, unrunnable
    from edge.core.profile import load_profile

    profile = load_profile(profile_ref) if profile_ref else None
    model, _, _ = with_sample(model, None, None)
    pins, types = parse_shapes(shapes)
    values = parse_args(arg_values)
    with stdout_to_stderr(as_json):
        _, reference = reference_model(model, shapes=pins, dtypes=types, tflite_fallback=True,
                                       trust_code=trust_model_code, args=values)
        info = inspect_reference(reference)
    fit = _fit(info, profile) if profile else None
    caveat = macs_caveat(info)
    if caveat:
        log.warning("%s", caveat)
    odd = unrunnable(info) or (ort_refusal(reference) if reference.suffix == ".onnx" else None)
    if odd:  # described all the same; optimize, deploy and partition refuse it
        log.warning("edge cannot optimize or run this model: %s", odd)
    document = (info.to_json() | {"precision": info.precision,
                                   "macs_lower_bound": caveat is not None}
                | ({"fit": fit} if fit else {}) | ({"args": values} if values else {}))
    baked = "".join(f"\nbaked argument: {n}={v}" for n, v in values.items())
    emit(as_json, document, render_model(info, fit["summary"] if fit else None) + baked)
    return int(ExitStatus.CHECK_FAILED) if fit and not fit["fits"] else 0


def _fit(info: Any, profile: Any) -> dict[str, Any]:
    """Whether the weights fit the profile's budget at fp32 and at int8 (edge's smallest)."""
    weights_mb = info.params * 4 / MB
    budget = profile.memory.model_budget_mb
    fits_fp32, fits = weights_mb <= budget, weights_mb / 4 <= budget
    verdict = ("fit" if fits_fp32 else "fit only at int8" if fits else "do NOT fit even at int8")
    summary = (f"{profile.id}: weights {weights_mb:.1f} MB fp32 / {weights_mb / 4:.1f} MB int8 "
               f"{verdict} the {budget} MB model budget ({profile.memory.ram_mb} MB RAM)")
    return {"profile": profile.id, "weights_mb": weights_mb, "budget_mb": budget,
            "fits": fits, "fits_fp32": fits_fp32, "summary": summary}
