"""``edge pack plan|deploy PACK.yaml``: several models on one device, planned together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edge.cli.common import json_option, remote, remote_options
from edge.cli.output import emit, stdout_to_stderr

__all__ = ["pack"]


@click.group()
def pack() -> None:
    """Several models on one device: each one's candidate, unit and threads chosen together so
    that every rate and latency objective holds when they run at once.

    \b
    PACK.yaml:
      models:
        - {model: detector.onnx, calib: frames.npy, rate: 15, p99_ms: 60}
        - {model: kws.onnx, name: kws, rate: 50, p99_ms: 20, priority: 2}

    \b
    Example:
      edge pack plan camera.yaml --profile rock5b --dry-run
    """


def _pack_options(command: Any) -> Any:
    command = click.argument("pack_file", metavar="PACK.yaml",
                             type=click.Path(path_type=Path, dir_okay=False))(command)
    command = click.option("--seconds", type=click.FloatRange(0.5, 600), default=5.0,
                           show_default=True,
                           help="Length of each co-run phase (each model alone, then all "
                                "together).")(command)
    command = click.option("--tries", type=click.IntRange(1, 10), default=3,
                           show_default=True,
                           help="Plans co-run in turn until one holds every objective.")(command)
    command = click.option("-o", "--out", type=click.Path(path_type=Path, file_okay=False),
                           help="Folder for the bundles and pack.json [NAME-PROFILE.pack]."
                           )(command)
    return command


@pack.command()
@_pack_options
@click.option("--dry-run", is_flag=True,
              help="Plan from the profile's figures alone: nothing converted or connected.")
@remote_options
@json_option
def plan(pack_file: Path, seconds: float, tries: int, out: Path | None, dry_run: bool,
         profile_ref: str | None, as_json: bool, **opts: Any) -> int:
    """Plan the pack for a device and prove it there (or --dry-run: estimate it).

    \b
    Examples:
      edge pack plan camera.yaml --profile rock5b --dry-run
      edge pack plan camera.yaml --profile rpi5 --host pi@raspberrypi.local
    """
    return _run(pack_file, profile_ref, opts, as_json, seconds=seconds, tries=tries, out=out,
                dry_run=dry_run)


@pack.command()
@_pack_options
@remote_options
@json_option
def deploy(pack_file: Path, seconds: float, tries: int, out: Path | None,
           profile_ref: str | None, as_json: bool, **opts: Any) -> int:
    """Plan the pack, prove it on the device, then make every model current as one.

    \b
    Example:
      edge pack deploy camera.yaml --profile rpi5 --host pi@raspberrypi.local
    """
    return _run(pack_file, profile_ref, opts, as_json, seconds=seconds, tries=tries, out=out,
                deploy=True)


def _run(pack_file: Path, profile_ref: str | None, opts: dict[str, Any], as_json: bool,
         **asked: Any) -> int:
    from edge.cli.render_pack import render_pack
    from edge.flows.pack import PackRequest, report_json, run_pack

    if profile_ref is None:
        raise click.UsageError("give --profile (the device the pack is planned for)")
    request = PackRequest(pack=pack_file, profile=profile_ref, device=remote(opts), **asked)
    with stdout_to_stderr(as_json):
        report = run_pack(request)
    document = report_json(report)
    emit(as_json, document, render_pack(document))
    return 0
