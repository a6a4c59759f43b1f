"""``edge optimize``: convert, quantize and verify a model for a device; write a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edge.cli.common import (
    PATH,
    bundle_report,
    check_report_file,
    json_option,
    optimize_options,
    optimize_settings,
    report_option,
    with_sample,
    write_report,
)
from edge.cli.output import emit, stdout_to_stderr
from edge.core.errors import ExitStatus
from edge.core.extras import not_installed
from edge.core.tables import table

__all__ = ["optimize"]


@click.command("optimize")
@click.argument("model", type=PATH)
@click.option("--profile", "profile_ref", required=True, help="Device profile id or file.")
@optimize_options
@click.option("--dry-run", is_flag=True, help="Print the plan; convert nothing.")
@report_option
@json_option
def optimize(model: Path, profile_ref: str, out: Path | None, dry_run: bool,
             report_file: Path | None, as_json: bool, **opts: Any) -> int:
    """Convert, quantize and verify a model for a device; write a bundle.

    MODEL may be ONNX, TFLite, Keras, a SavedModel folder or a PyTorch module (see inspect).

    \b
    Example:
      edge optimize model.onnx --profile rpi4 --calib calib.npy --eval eval.npz -o rpi4.bundle
      edge optimize sample:digits --profile rpi4 --report digits-rpi4.html
      edge optimize det.onnx --profile x86-64 --calib imgs/ --metric output0=yolo
    """
    from edge.cli.render import render_bundle
    from edge.cli.verdict import optimize_verdict
    from edge.core.profile import load_profile
    from edge.flows.budgets import host_is
    from edge.flows.optimize import optimize as run_optimize

    profile = load_profile(profile_ref)
    model, opts["calib"], opts["eval_"] = with_sample(model, opts["calib"], opts["eval_"])
    options = optimize_settings(opts)
    if dry_run:
        return _print_plan(model, profile, options, as_json)
    check_report_file(report_file)
    where = out or Path(f"{model.stem}-{profile.id}.bundle")
    with stdout_to_stderr(as_json):
        bundle = run_optimize(model, profile, where, options)
        html = write_report(bundle_report, where, report_file) if report_file else None
    verdict = optimize_verdict(bundle, str(where), timed_here=host_is(profile))
    emit(as_json, bundle.to_json() | {"bundle": str(where), "verdict": verdict}
         | ({"report": html} if html else {}), render_bundle(bundle, str(where))
         + (f"\nreport: {html}" if html else "") + f"\nverdict: {verdict}")
    return 0 if bundle.chosen else int(ExitStatus.CHECK_FAILED)


def _print_plan(model: Path, profile: Any, options: Any, as_json: bool) -> int:
    """``--dry-run``: the plan, as ``{"profile", "plan": [...]}`` under --json."""
    from edge.core.intake import inspect_reference, reference_model
    from edge.core.verify import check_metrics
    from edge.flows.optimize import plan_for, refuse_if_unfit, work_policy
    from edge.flows.worklist import describe

    with stdout_to_stderr(as_json):
        origin, reference = reference_model(model, shapes=options.shapes,
                                            dtypes=options.dtypes, tflite_fallback=True,
                                            trust_code=options.trust_code, args=options.args)
    info = inspect_reference(reference)
    refuse_if_unfit(profile, info)
    check_metrics(options.limits, [o.name for o in info.outputs])
    plan = plan_for(profile, info, origin.format, options.prune)
    listed, how = describe(plan, work_policy(plan, profile, options, info))
    reasons, extras = not_installed([p.reason for p in plan])
    rows = [(p.candidate.id, "try" if p.keep else "skip", why)
            for p, why in zip(plan, reasons, strict=True)]
    emit(as_json, {"profile": profile.id, "plan": listed, "work": how},
         "\n".join([table(("candidate", "plan", "reason"), rows), *([extras] if extras else []),
                    how]))
    return 0
