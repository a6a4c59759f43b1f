"""``edge export mender`` and ``edge export mender-module``: a bundle's release for another
deployment engine (a Mender artifact, and the update module that installs it on a device)."""

from __future__ import annotations

from pathlib import Path

import click

from edge.cli.common import PATH, json_option
from edge.cli.output import emit, stdout_to_stderr

__all__ = ["export"]


@click.group()
def export() -> None:
    """Package a bundle's release for another deployment engine (Mender).

    \b
    Example:
      edge export mender digits-rpi4.bundle --device-type raspberrypi4 -o release.mender
    """


@export.command("mender")
@click.argument("bundle", type=PATH)
@click.option("--device-type", required=True, metavar="TYPE",
              help="Mender device type the artifact installs on (the device's device_type).")
@click.option("-o", "--output", "out", type=PATH, required=True, metavar="FILE",
              help="The artifact to write (release.mender); written only once validated.")
@click.option("--artifact-name", metavar="NAME",
              help="Mender artifact name [<bundle name>-<release id>].")
@click.option("--candidate", metavar="ID", help="Ship this candidate [the bundle's choice].")
@click.option("--work-dir", default="~/.edge", show_default=True, metavar="DIR",
              help="edge's work dir on the device (~ is the Mender client's user's home).")
@click.option("--device-python", "python", default="python3", show_default=True, metavar="PY",
              help="Python on the device that runs the agent and the model's runtime.")
@click.option("--keep", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Releases kept on the device after a commit (current and previous always).")
@json_option
def mender(bundle: Path, device_type: str, out: Path, artifact_name: str | None,
           candidate: str | None, work_dir: str, python: str, keep: int, as_json: bool) -> None:
    """Write a Mender artifact (module-image, type edge-release) of the bundle's release.

    Built and validated with Debian's mender-artifact tool. The device needs the update
    module once: edge export mender-module.

    \b
    Examples:
      edge export mender digits-rpi4.bundle --device-type raspberrypi4 -o release.mender
      edge export mender digits-rpi4.bundle --device-type raspberrypi4 -o release.mender \\
          --work-dir /home/pi/.edge --device-python /opt/venv/bin/python3
    """
    from edge.flows.mender import MenderRequest, export_mender

    request = MenderRequest(bundle=bundle, device_type=device_type, out=out,
                            artifact_name=artifact_name, candidate=candidate, work_dir=work_dir,
                            python=python, keep=keep)
    with stdout_to_stderr(as_json):
        report = export_mender(request)
    text = (f"wrote {report.out} ({report.size_bytes / 1e6:.2f} MB): artifact "
            f"{report.artifact_name}, device type {report.device_type}, payload "
            f"{report.payload_type}\n"
            f"release {report.release} ({report.candidate}): {', '.join(report.files)}\n"
            f"validated with mender-artifact validate; the device needs the update module at "
            f"{report.module_path} (edge export mender-module)")
    emit(as_json, report.to_json(), text)


@export.command("mender-module")
@click.option("-o", "--output", "out", type=PATH, required=True, metavar="PATH",
              help="File to write, or a folder to write edge-release in.")
@json_option
def mender_module(out: Path, as_json: bool) -> None:
    """Write edge's Mender update module (edge-release) for installing on devices.

    \b
    Example:
      edge export mender-module -o edge-release
    """
    from edge.flows.mender import export_module

    report = export_module(out)
    emit(as_json, report.to_json(),
         f"wrote {report.out}; install it on each device as {report.module_path} (mode 755)")
