"""``edge devices probe``: write a profile from a live device."""

from __future__ import annotations

from pathlib import Path

import click

from edge.cli.common import PATH, SSH, json_option, with_options
from edge.cli.output import emit, stdout_to_stderr

__all__ = ["devices"]


@click.group()
def devices() -> None:
    """Talk to devices: write a profile from a live one.

    \b
    Example:
      edge devices probe pi@raspberrypi.local -o kitchen-pi.yaml
    """


@devices.command("probe")
@click.argument("target", metavar="USER@HOST[:PORT]|local")
@click.option("-o", "--out", type=PATH, help="Profile file to write [ID.yaml].")
@click.option("--id", "profile_id", help="Profile id [from the device's host name].")
@click.option("--force", is_flag=True, help="Replace an existing profile file.")
@with_options(SSH)
@click.option("--device-python", help="Python on the device [python3].")
@json_option
def devices_probe(target: str, out: Path | None, profile_id: str | None, force: bool,
                  identity: Path | None, known_hosts: Path | None, trust_new_host: bool,
                  device_python: str | None, as_json: bool) -> int:
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
    emit(as_json, result.to_json() | {"file": str(path)},
         render_profile(result) + f"\nwrote {path}")
    return 0
