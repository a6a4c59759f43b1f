"""``edge bench``: measure an artifact ON the device without activating it; gate on latency
regressions against a kept or saved baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edge.cli.common import PATH, Finite, device, device_options, json_option, name_option
from edge.cli.output import emit, stdout_to_stderr
from edge.core.errors import ExitStatus

__all__ = ["bench"]


@click.command()
@click.argument("source", metavar="ARTIFACT|BUNDLE", type=PATH)
@click.option("--candidate", help="Which bundle candidate [the chosen one], e.g. tflite-int8.")
@click.option("--profile", "profile_ref", help="Profile for access settings [the bundle's].")
@device_options
@click.option("--baseline", metavar="last|FILE",
              help="Compare with the last result kept for this device and artifact, or with "
                   "a report saved from `edge bench --json`; exit 1 on a regression.")
@click.option("--max-regression", type=Finite(min=0), metavar="PCT",
              help="Allowed p50 slow-down against --baseline, percent [a slow-down significant "
                   "over the interleaved rounds (one-sided Mann-Whitney p < 0.01) and beyond "
                   "the baseline's deviation between rounds (2 % to 10 %); 10 % when the "
                   "rounds are too few].")
@click.option("--allow-fallback", is_flag=True,
              help="Accept an artifact that ran materially away from the accelerator it was "
                   "made for (more than 10 % of its work elsewhere) [exit 1 naming the layers].")
@name_option("The model's slot whose current release \"active\" is said of [any slot].")
@json_option
def bench(source: Path, candidate: str | None, profile_ref: str | None, baseline: str | None,
          max_regression: float | None, allow_fallback: bool, slot: str | None, as_json: bool,
          **opts: Any) -> int:
    """Benchmark an artifact ON the device (installed, not made current).

    Every result is kept on this host per device and artifact ($EDGE_CACHE_DIR/results), so
    `--baseline last` can gate a CI pipeline on latency regressions: exit 1 is a regression,
    4 a bug in edge, never a regression. What ran each layer (unit, precision) is read from
    the runtime; an artifact made for an accelerator that ran elsewhere is exit 1 too.

    \b
    Examples:
      edge bench digits-rpi4.bundle --candidate onnxruntime-int8 --host pi@raspberrypi.local
      edge bench model.tflite --runs 200       # the embedded local device
      edge bench digits-rpi4.bundle --host pi@raspberrypi.local --baseline last
    """
    from edge.cli.render import render_deploy
    from edge.flows.deploy import BenchRequest, run_gated_bench

    request = BenchRequest(source=source, candidate=candidate, profile=profile_ref,
                           device=device(opts), baseline=baseline,
                           max_regression=max_regression, name=slot)
    with stdout_to_stderr(as_json):
        outcome = run_gated_bench(request)
    comparison = outcome.comparison
    document = outcome.report.to_json() | (
        {"baseline": comparison.to_json()} if comparison else {})
    text = render_deploy(outcome.report) + (
        f"\nbaseline: {comparison.line()}" if comparison else "")
    if outcome.no_baseline_yet:
        text += "\nbaseline: none kept yet for this device and artifact; this result is now one"
    emit(as_json, document, text)
    fell_back = outcome.report.bench.fell_back
    if fell_back and not allow_fallback:
        click.echo(f"error: {outcome.report.candidate} fell back: {fell_back} "
                   "(--allow-fallback accepts it)", err=True)
        return int(ExitStatus.CHECK_FAILED)
    if comparison is not None and comparison.regressed:
        click.echo(f"error: latency regressed: {comparison.line()}", err=True)
        return int(ExitStatus.CHECK_FAILED)
    return 0
