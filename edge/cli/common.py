"""Options and helpers shared by the command modules. Imports only click at start-up; what a
helper needs (profiles, devices, reports) is imported when it runs."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from edge.flows.sample import resolve

__all__ = ["ACCESS", "ARG", "PATH", "SHAPE", "SSH", "TRUST_CODE", "Finite", "bundle_report",
           "check_report_file", "device", "device_options", "json_option", "on_device_option",
           "optimize_options", "optimize_settings", "parse_args", "parse_shapes", "remote",
           "remote_options", "report_option", "with_options", "with_sample", "write_report"]

PATH = click.Path(path_type=Path)


class Finite(click.FloatRange):
    """A float range that refuses NaN and Inf (``nan <= 0`` is False, so a plain range lets
    NaN through: ``--bandwidth nan`` chose "nan ms")."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

_HOST_HELP = "USER@HOST[:PORT] [profile access.host, else the embedded local device]."


def with_options(options: list[Any]) -> Callable[[Any], Any]:
    """A decorator applying click options in the order listed (the first is shown first)."""
    def apply(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func
    return apply


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON object on stdout (with its \"warnings\"), "
                                "nothing else.")


def name_option(help_text: str) -> Callable[[Any], Any]:
    """``--name NAME``: the model's slot on the device (its own current release and
    rollback)."""
    return click.option("--name", "slot", metavar="NAME", help=help_text)


report_option = click.option(
    "--report", "report_file", type=PATH, metavar="FILE",
    help="Also write the HTML report of the result to FILE (as `edge report` does).")
SHAPE = click.option(
    "--shape", "shapes", multiple=True, metavar="NAME=DIMS[:DTYPE]",
    help="Pin an input's dims, e.g. input=1,3,224,224 (PyTorch: every input; ids=1,16:int64).")
ARG = click.option(
    "--arg", "arg_values", multiple=True, metavar="NAME=VALUE",
    help="A PyTorch forward's non-tensor argument (int, float, bool or str), e.g. sr=16000: "
         "baked into the exported model as a constant (repeatable).")
TRUST_CODE = click.option(
    "--trust-model-code", "trust_model_code", is_flag=True,
    help="Read a model that runs code from its file when loaded (a pickled PyTorch module, a "
         "Keras Lambda layer, a SavedModel with file, Python or network ops): only for a "
         "model you trust.")


# ---------------------------------------------------------------- --on-device
def on_device_option(help_text: str, negatable: bool = False) -> Callable[[Any], Any]:
    """``--on-device``, and the hidden ``--measure-on-device`` it replaced: same meaning, with
    a deprecation warning. The command reads ``on_device or measure_on_device``; ``negatable``:
    ``--on-device/--no-on-device``, None when neither was given (the command's default)."""
    flag = (click.option("--on-device/--no-on-device", default=None, help=help_text)
            if negatable else click.option("--on-device", is_flag=True, help=help_text))
    return with_options([
        flag,
        click.option("--measure-on-device", is_flag=True, hidden=True,
                     callback=_deprecated_spelling),
    ])


def _deprecated_spelling(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        logging.getLogger("edge").warning(
            "--measure-on-device is deprecated and will be removed: use --on-device")
    return value


# ---------------------------------------------------------------- files and models
def check_report_file(path: Path | None) -> None:
    """Refuse a --report FILE that cannot be written before any long work starts."""
    if path is None:
        return
    from edge.flows.report import check_report_target

    check_report_target(path)


def write_report(render: Callable[[Path], str], source: Path, out: Path) -> str:
    """Render the report of ``source`` with ``render`` and write it atomically to ``out``."""
    from edge.flows.report import write_report as write

    return str(write(render(source), out))


def bundle_report(bundle_dir: Path) -> str:
    """The HTML report of a bundle (``--report`` of optimize and deploy)."""
    from edge.flows.report import render_bundle_report

    return render_bundle_report(bundle_dir)


def with_sample(model: Path, calib: Path | None,
                eval_: Path | None) -> tuple[Path, Path | None, Path | None]:
    """Resolve ``sample:NAME`` to the shipped model and its data (unless given)."""
    sample = resolve(model)
    if sample is None:
        return model, calib, eval_
    return sample.model, calib or sample.calib, eval_ or sample.eval


def parse_shapes(texts: tuple[str, ...]) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """``--shape`` flags as (dims by input, dtypes by input)."""
    if not texts:
        return {}, {}
    from edge.core.intake import parse_shape_flags

    return parse_shape_flags(list(texts))


def parse_args(texts: tuple[str, ...]) -> dict[str, str]:
    """``--arg NAME=VALUE`` flags as {name: value text} (typed by forward's schema later)."""
    if not texts:
        return {}
    from edge.core.intake import parse_arg_flags

    return parse_arg_flags(list(texts))


# ---------------------------------------------------------------- optimize flags
optimize_options = with_options([
    click.option("--calib", type=PATH, help="Calibration data: .npy, .npz or image folder."),
    click.option("--eval", "eval_", type=PATH,
                 help="Held-out data to verify on (.npz may carry 'labels')."),
    click.option("--max-drop", type=Finite(0, 100), default=1.0, show_default=True,
                 help="Max accuracy (or top-1 agreement) loss, in points."),
    click.option("--min-cosine", type=Finite(-1, 1), default=0.98,
                 show_default=True, help="Min output cosine similarity to fp32."),
    click.option("--max-error", type=Finite(0, min_open=True), default=0.10,
                 show_default=True, help="Max RMS error of an output relative to its spread "
                 "across samples (regression: relative error)."),
    click.option("--metric", "metrics", multiple=True, metavar="OUTPUT=KIND|MODULE:FUNCTION",
                 help="How to judge an output (repeatable): KIND is values, classes, probs, "
                      "sequence[:layout=tnc], ctc[:blank=K,layout=tnc], exact, yolo[:obj], "
                      "ssd[:scores=OUTPUT], regression, embedding[:threshold=T] or "
                      "multilabel[:threshold=T,k=K] (layout=tnc: time first, [T, N, C]); "
                      "OUTPUT may be '*'. MODULE:FUNCTION is your own check (see docs)."),
    click.option("--latency-budget", type=Finite(min=0, min_open=True),
                 help="Reject candidates whose p50 exceeds this (ms): timed on this host "
                      "when it is the device's kind, or on the device with deploy "
                      "--on-device; with a budget, the candidate within it that loses the "
                      "least fidelity is chosen."),
    click.option("--size-budget", type=Finite(min=0, min_open=True), metavar="MB",
                 help="Reject candidates whose files take more than MB on disk; with a "
                      "budget, the candidate within it that loses the least fidelity is "
                      "chosen."),
    click.option("--prune", type=Finite(0, 1, min_open=True, max_open=True), is_flag=False,
                 flag_value=0.5, default=None, metavar="[RATIO]",
                 help="Also try pruned candidates: RATIO of the channels (0.5 when bare) "
                      "removed, then distilled from the original on the calibration data; "
                      "judged by the same fidelity gates."),
    click.option("--prune-budget", type=Finite(0), default=180.0, show_default=True,
                 metavar="SECONDS", help="Time budget of --prune's distillation."),
    click.option("--exhaustive", is_flag=True,
                 help="Convert and verify every candidate, also those that cannot be chosen "
                      "(by default they are skipped, each with the reason)."),
    click.option("--time-budget", type=Finite(min=0, min_open=True), metavar="SECONDS",
                 help="Stop trying candidates after SECONDS (likely winners are tried first): "
                      "the best faithful one found, with what was left out and why."),
    click.option("-o", "--out", type=PATH, help="Bundle directory to write."),
    SHAPE,
    ARG,
    TRUST_CODE,
])


def optimize_settings(opts: dict[str, Any]) -> Any:
    """OptimizeOptions from the shared optimize flags (consumed from ``opts``)."""
    from edge.core.verify import Thresholds, parse_metrics
    from edge.flows.optimize import OptimizeOptions
    from edge.flows.prune import PruneOptions

    shapes, dtypes = parse_shapes(opts.pop("shapes"))
    pairs, custom = parse_metrics(opts.pop("metrics"))
    ratio, budget = opts.pop("prune"), opts.pop("prune_budget")
    return OptimizeOptions(
        calib=opts.pop("calib"), eval=opts.pop("eval_"),
        latency_budget_ms=opts.pop("latency_budget"), size_budget_mb=opts.pop("size_budget"),
        shapes=shapes, dtypes=dtypes, args=parse_args(opts.pop("arg_values")),
        trust_code=opts.pop("trust_model_code"), exhaustive=opts.pop("exhaustive"),
        time_budget_s=opts.pop("time_budget"),
        prune=None if ratio is None else PruneOptions(ratio=ratio, budget_s=budget),
        limits=Thresholds(max_drop=opts.pop("max_drop"), min_cosine=opts.pop("min_cosine"),
                          max_error=opts.pop("max_error"), metrics=pairs, custom=custom))


# ---------------------------------------------------------------- device flags
#: How to reach a device over SSH (every command that talks to one).
SSH = [
    click.option("--identity", type=PATH, help="SSH private key."),
    click.option("--known-hosts", type=PATH, help="known_hosts file [~/.ssh/known_hosts]."),
    click.option("--trust-new-host", is_flag=True,
                 help="Accept and record an unknown host key (never a changed one)."),
]
ACCESS = [click.option("--host", help=_HOST_HELP), *SSH,
          click.option("--device-python", help="Python on the device [profile access.python].")]
#: Commands that only talk to a device (rollback, releases, report --on-device).
remote_options = with_options([
    click.option("--profile", "profile_ref",
                 help="Device profile (access settings, work dir) [~/.edge, no user]."),
    *ACCESS])
#: Commands that measure on a device (deploy, bench, partition --on-device).
device_options = with_options([
    *ACCESS,
    click.option("--runs", type=click.IntRange(1, 100000), default=50, show_default=True,
                 help="Timed inferences on the device, spread over 5 interleaved rounds "
                      "(percentiles come from these)."),
    click.option("--warmup", type=click.IntRange(0, 10000), default=5, show_default=True,
                 help="Untimed inferences before each round's timed ones on the device."),
    click.option("--threads", type=click.IntRange(0, 1024), default=None,
                 help="Threads on the device [profile compute.threads or cores; 0: all]."),
    click.option("--provision", is_flag=True,
                 help="First install the artifact's runtime on the device: wheels for its "
                      "platform fetched on this host, installed into WORK/venv with pip "
                      "--no-index (the device needs no internet); deploy with that venv."),
])


def remote(opts: dict[str, Any]) -> Any:
    """DeviceTarget from the access flags (consumed from ``opts``)."""
    from devices.connect import DeviceTarget

    host = opts.pop("host")
    if host is not None and not host.strip():
        raise click.BadParameter("is empty: give USER@HOST[:PORT], or leave --host out for "
                                 "the profile's access.host", param_hint="--host")
    return DeviceTarget(host=host, identity=opts.pop("identity"),
                        known_hosts=opts.pop("known_hosts"),
                        trust_new_host=opts.pop("trust_new_host"),
                        python=opts.pop("device_python"))


def device(opts: dict[str, Any]) -> Any:
    """DeviceTarget from the access and measuring flags (consumed from ``opts``)."""
    return dataclasses.replace(
        remote(opts), runs=opts.pop("runs"), warmup=opts.pop("warmup"),
        threads=opts.pop("threads"), provision=opts.pop("provision"))
