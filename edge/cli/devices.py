"""``edge devices probe``: write a profile from a live device; ``edge devices compare``:
estimate a model's latency on every catalog device."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from edge.cli.common import PATH, SSH, TRUST_CODE, json_option, with_options, with_sample
from edge.cli.output import emit, stdout_to_stderr
from edge.core.errors import UsageError

if TYPE_CHECKING:
    from devices.connect import DeviceTarget
    from edge.core.profile import Profile

__all__ = ["devices"]


@click.group()
def devices() -> None:
    """Talk to devices: write a profile from a live one; compare devices for a model.

    \b
    Examples:
      edge devices probe pi@raspberrypi.local -o kitchen-pi.yaml
      edge devices compare sample:digits
    """


@devices.command("probe")
@click.argument("target", metavar="USER@HOST[:PORT]|local")
@click.option("-o", "--out", type=PATH, help="Profile file to write [ID.yaml].")
@click.option("--id", "profile_id", help="Profile id [from the device's host name].")
@click.option("--force", is_flag=True, help="Replace an existing profile file.")
@with_options(SSH)
@click.option("--device-python", help="Python on the device [python3].")
@click.option("--calibrate", is_flag=True,
              help="Also time edge's probe models there and keep the device's latency model "
                   "under the profile's id (edge devices compare uses it).")
@json_option
def devices_probe(target: str, out: Path | None, profile_id: str | None, force: bool,
                  identity: Path | None, known_hosts: Path | None, trust_new_host: bool,
                  device_python: str | None, calibrate: bool, as_json: bool) -> int:
    """Write a profile from a live device: CPU, cores, memory, arch, python, runtimes,
    accelerators read from it; estimates and placeholders are marked ASSUMED for you to edit.

    \b
    Examples:
      edge devices probe pi@raspberrypi.local -o kitchen-pi.yaml
      edge devices probe local --id this-laptop     # the embedded local device
    """
    from edge.flows.probe import DeviceTarget, probe_to_file, render_profile

    device = DeviceTarget(host=None if target == "local" else target, identity=identity,
                          known_hosts=known_hosts, trust_new_host=trust_new_host,
                          python=device_python)
    with stdout_to_stderr(as_json):
        result, path = probe_to_file(device, out, profile_id=profile_id, force=force)
        calibrated = _calibrated(device, result.profile) if calibrate else None
    emit(as_json, result.to_json() | {"file": str(path)} | (calibrated or {}),
         render_profile(result) + f"\nwrote {path}" + "".join(
             f"\ncalibration: {line}" for line in (calibrated or {}).get("summary", ())))
    return 0


def _calibrated(device: DeviceTarget, profile: Profile) -> dict[str, Any]:
    """The device calibrated under the profile's id: what --json and the text add."""
    from devices.measure import Rounds
    from edge.flows.calibrate import calibrate_target, summary

    found, kept = calibrate_target(device, profile.id, threads=profile.compute.default_threads,
                                   rounds=Rounds(rounds=5, calls=20, warmup=3))
    return {"calibration": found.to_json(), "calibration_file": str(kept),
            "summary": summary(found)}


@devices.command("compare")
@click.argument("model", type=PATH)
@click.option("--profiles", "profile_ids", metavar="ID[,ID...]",
              help="Compare only these profiles (catalog ids or profile files) [every catalog "
                   "profile].")
@TRUST_CODE
@json_option
def devices_compare(model: Path, profile_ids: str | None, trust_model_code: bool,
                    as_json: bool) -> int:
    """Estimate, offline, how fast each device would run MODEL: the fastest candidate edge
    would try on each profile, its latency with an interval, its working memory and the energy
    of one inference, fastest first.

    Estimates, not measurements: the model's work against each profile's peak figures (an
    accelerator's TOPS for a candidate made for it), corrected by the timings edge kept of that
    runtime and precision. "calibrated": kept on that profile; "from P": the nearest
    calibrated profile's corrections, the interval widened; "roofline": nothing kept, the
    interval open above. Nothing is converted or verified (edge optimize --profile P does).

    \b
    Examples:
      edge devices compare sample:digits
      edge devices compare model.onnx --profiles rpi4,rpi5,orangepi5 --json
    """
    from edge.cli.render_compare import render_compare
    from edge.core.intake import inspect_reference, reference_model
    from edge.flows.compare import compare

    model, _, _ = with_sample(model, None, None)
    asked = tuple(p.strip() for p in (profile_ids or "").split(",") if p.strip())
    with stdout_to_stderr(as_json):
        _, reference = reference_model(model, trust_code=trust_model_code)
        if reference.suffix != ".onnx":
            raise UsageError(f"{model}: compare estimates from an ONNX model's work, and this "
                             "model has no faithful ONNX form (edge inspect says why)")
        report = compare(reference, inspect_reference(reference), asked)
    emit(as_json, report.to_json(), render_compare(report))
    return 0
