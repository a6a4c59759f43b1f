"""``edge releases`` and ``edge rollback``: the releases installed on a device."""

from __future__ import annotations

from typing import Any

import click

from edge.cli.common import json_option, name_option, remote, remote_options
from edge.cli.output import emit, stdout_to_stderr

__all__ = ["releases", "rollback"]


@click.command()
@click.option("--to", "release", metavar="RELEASE",
              help="Release id (or a unique prefix) [the previously active release].")
@name_option("Which model's slot [the device's only one].")
@remote_options
@json_option
def rollback(release: str | None, slot: str | None, profile_ref: str | None, as_json: bool,
             **opts: Any) -> int:
    """Switch a model on the device back to an earlier release (health-checked before the
    switch); the device's other models keep theirs.

    \b
    Examples:
      edge rollback --host pi@raspberrypi.local --profile rpi4
      edge rollback --to 3f2a9c --host pi@raspberrypi.local --profile rpi4
      edge rollback --name face --host pi@raspberrypi.local --profile rpi4
    """
    from edge.cli.render import render_rollback
    from edge.flows.deploy import RollbackRequest, run_rollback

    request = RollbackRequest(profile=profile_ref, device=remote(opts), to=release, name=slot)
    with stdout_to_stderr(as_json):
        report = run_rollback(request)
    emit(as_json, report.to_json(), render_rollback(report))
    return 0


@click.command()
@click.option("--prune", "prune_keep", type=click.IntRange(1, 1000),
              help="First remove the oldest releases beyond this many that no model runs "
                   "or would roll back to.")
@name_option("Which model's slot: its active release and history [the device's only one; "
             "several: what each runs].")
@remote_options
@json_option
def releases(prune_keep: int | None, slot: str | None, profile_ref: str | None, as_json: bool,
             **opts: Any) -> int:
    """List the releases installed on the device, what each model's slot runs, and a slot's
    history.

    \b
    Examples:
      edge releases --host pi@raspberrypi.local --profile rpi4
      edge releases --name face --host pi@raspberrypi.local --profile rpi4
    """
    from edge.cli.render import render_releases
    from edge.flows.deploy import ReleasesRequest, run_releases

    request = ReleasesRequest(profile=profile_ref, device=remote(opts), prune_keep=prune_keep,
                              name=slot)
    with stdout_to_stderr(as_json):
        report = run_releases(request)
    emit(as_json, report.to_json(), render_releases(report))
    return 0
