"""``edge report``: one self-contained HTML report of a bundle, a split or device results."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from edge.cli.common import PATH, check_report_file, json_option, remote, remote_options
from edge.cli.output import emit, stdout_to_stderr
from edge.core.errors import UsageError

__all__ = ["report"]


@click.command("report")
@click.argument("source", metavar="BUNDLE|SPLIT_DIR|RESULTS", type=PATH)
@click.option("-o", "--out", type=PATH, required=True, help="HTML file to write.")
@click.option("--no-layers", is_flag=True,
              help="Bundle: skip measuring per-layer times.")
@click.option("--on-device", is_flag=True,
              help="Bundle: measure the per-layer times ON the device (--host, else the "
                   "profile's access.host, else the embedded local device) with its agent; "
                   "candidates of a runtime the device lacks on this host. Implied by --host.")
@remote_options
@json_option
def report(source: Path, out: Path, no_layers: bool, on_device: bool,
           profile_ref: str | None, as_json: bool, **opts: Any) -> int:
    """Write one self-contained HTML report (inline SVG plots, no network needed to view).

    A bundle: candidates on a latency x fidelity plane, per-layer time of up to six candidates
    on their own runtimes (ONNX Runtime and OpenVINO profilers, TFLite prefix timings; measured
    on this host), each device's history from $EDGE_CACHE_DIR/results, the tables.
    A split: every cut's predicted latency against bandwidth, with the regimes of split.yaml.
    A results folder: the history of every device in it.

    \b
    Examples:
      edge report digits-rpi4.bundle -o report.html
      edge report digits-rpi4-split -o split.html
      edge report digits-rpi4.bundle -o pi.html --host pi@raspberrypi.local --profile rpi4
    """
    from edge.flows.report import render_report, report_kind, write_report

    kind = report_kind(source)
    check_report_file(out)
    device = remote(opts)
    on_device = on_device or device.host is not None
    if on_device and (kind != "bundle" or no_layers):
        raise UsageError("--on-device/--host measure a bundle's per-layer times: give a bundle "
                         "and drop --no-layers")
    with stdout_to_stderr(as_json), _report_device(on_device, device, profile_ref) as opened:
        text = render_report(source, layers=not no_layers, device=opened)
    path = write_report(text, out)
    plots = text.count('class="plot"')
    emit(as_json, {"report": str(path), "kind": kind, "plots": plots, "bytes": len(text)},
         f"wrote {path} ({kind} report, {plots} plots)")
    return 0


@contextlib.contextmanager
def _report_device(on_device: bool, device: Any, profile_ref: str | None) -> Iterator[Any]:
    """The opened device the report measures on, or None."""
    if not on_device:
        yield None
        return
    from edge.flows.deploy import opened_device

    with opened_device(device, profile_ref) as opened:
        yield opened
