"""``edge deploy``: optimize (given a model), push a release, benchmark it ON the device,
activate it; to one device or, with --inventory, to a fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edge.cli.common import (
    PATH,
    bundle_report,
    check_report_file,
    device,
    device_options,
    json_option,
    name_option,
    on_device_option,
    optimize_options,
    optimize_settings,
    with_sample,
    write_report,
)
from edge.cli.output import emit, stdout_to_stderr
from edge.cli.render_fleet import render_fleet
from edge.core.errors import UsageError

__all__ = ["deploy"]


@click.command()
@click.argument("source", metavar="MODEL|BUNDLE", type=PATH)
@click.option("--profile", "profile_ref", help="Device profile id or file (MODEL: required).")
@device_options
@on_device_option("Benchmark every faithful candidate ON the device and activate the one "
                  "chosen from those timings [default with --host, a profile's access.host "
                  "or --inventory; --no-on-device: the bundle's choice, measured alone].",
                  negatable=True)
@name_option("The model's slot on the device: its own current release and rollback, beside "
             "the other models there [the model file's stem, e.g. digits].")
@click.option("--keep", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Releases kept on the device (the active one and the rollback target "
                   "are never removed).")
@click.option("--inventory", type=PATH,
              help="Deploy to every host of an Ansible inventory (YAML or INI) in parallel.")
@click.option("--limit", help="Inventory hosts or groups: web,db / !db / rpi* (like Ansible).")
@click.option("--forks", type=click.IntRange(1, 256), default=5, show_default=True,
              help="Hosts deployed at once with --inventory.")
@click.option("--canary", type=click.IntRange(1, None), metavar="N",
              help="With --inventory: the first N selected hosts go first, as their own stage.")
@click.option("--batch", metavar="N|P%",
              help="With --inventory: the other hosts then go in stages of N hosts (or P% of "
                   "the selected hosts, at least 1), one stage after another.")
@click.option("--max-fail", metavar="N|P%",
              help="With --inventory: failed hosts a stage may have; one more halts the "
                   "rollout and rolls that stage back to its previous release [default: 0 "
                   "with --canary or --batch].")
@click.option("--engine", type=click.Choice(["edge", "ansible"]), default="edge",
              show_default=True,
              help="Who drives an --inventory deploy: edge itself, or ansible-playbook with "
                   "the edge.fleet collection (edge[fleet]; the bundle's choice on each host).")
@click.option("--candidate", metavar="ID",
              help="Deploy this faithful candidate of the bundle, e.g. tflite-fp32 [the "
                   "bundle's choice, or with --on-device the one its timings choose]; given "
                   "a model, every candidate is converted first.")
@click.option("--allow-fallback", is_flag=True,
              help="Activate an artifact that ran materially away from the accelerator it was "
                   "made for (more than 10 % of its work elsewhere) [exit 1, the device "
                   "keeping its current release].")
@optimize_options
@click.option("--dry-run", is_flag=True, help="Say what would be done; touch nothing.")
@click.option("--report", "report_file", type=PATH, metavar="FILE",
              help="Also write the HTML report of the deployed bundle, with the device's "
                   "history, to FILE (--inventory: FILE-PROFILE.html per bundle when several).")
@json_option
def deploy(source: Path, profile_ref: str | None, on_device: bool | None,
           measure_on_device: bool, slot: str | None,
           keep: int, inventory: Path | None, limit: str | None, forks: int,
           canary: int | None, batch: str | None, max_fail: str | None, engine: str,
           candidate: str | None, allow_fallback: bool, out: Path | None,
           dry_run: bool, report_file: Path | None, as_json: bool, **opts: Any) -> int:
    """Optimize (if given a model), push to the device, benchmark ON the device, report.

    MODEL may be sample:digits, a CNN shipped with edge (with its calibration and labelled
    evaluation data).

    \b
    Examples:
      edge deploy sample:digits --profile rpi4        # no device needed
      edge deploy model.onnx --profile rpi4 --host pi@raspberrypi.local --calib calib.npy
      edge deploy rpi4.bundle --host pi@10.0.0.7:2222 --identity ~/.ssh/id_ed25519
      edge deploy model.onnx --profile rpi4          # the embedded local device
      edge deploy rpi4.bundle --host pi@raspberrypi.local --no-on-device  # as chosen
      edge deploy sample:digits --profile rpi4 --report deploy.html
      edge deploy rpi4.bundle --inventory hosts.yml --canary 1 --batch 25%
      edge deploy face.onnx --profile rpi5 --host pi@pi5.local --name face  # beside the others
      edge deploy rpi4.bundle --candidate tflite-fp32   # another candidate: a new release
    """
    source, opts["calib"], opts["eval_"] = with_sample(source, opts["calib"], opts["eval_"])
    if not dry_run:
        check_report_file(report_file)
    if inventory is None and limit is not None:
        raise UsageError("--limit selects inventory hosts: give --inventory too")
    staged = {"--canary": canary, "--batch": batch, "--max-fail": max_fail}
    if inventory is None and any(v is not None for v in staged.values()):
        flag = next(k for k, v in staged.items() if v is not None)
        raise UsageError(f"{flag} stages a fleet rollout: give --inventory too")
    if inventory is None and engine != "edge":
        raise UsageError(f"--engine {engine} deploys to a fleet: give --inventory too")
    if inventory is not None and allow_fallback:
        raise UsageError("--allow-fallback deploys to one device; a fleet's hosts refuse an "
                         "artifact that ran away from its accelerator: drop one of them")
    if inventory is not None and candidate is not None:
        raise UsageError("--candidate deploys to one device; a fleet gets the bundle's choice "
                         "(or with --on-device each host's own): drop --candidate or --inventory")
    fields = {"source": source, "profile": profile_ref, "device": device(opts),
              "options": optimize_settings(opts), "keep": keep, "name": slot,
              "measure_on_device": True if measure_on_device else on_device}
    if inventory is not None:
        from edge.flows.fleet import FleetRequest
        from edge.flows.fleet_stages import Staging, parse_share

        staging = Staging(canary=canary, batch=parse_share(batch, "--batch", least=1),
                          max_fail=parse_share(max_fail, "--max-fail"))
        request = FleetRequest(inventory=inventory, limit=limit, forks=forks, out_dir=out,
                               staging=staging, **fields)
        return _deploy_fleet(request, dry_run, as_json, report_file, engine)
    from edge.flows.deploy import DeployRequest

    return _deploy_one(DeployRequest(out=out, candidate=candidate, allow_fallback=allow_fallback,
                                     **fields), dry_run, as_json, report_file)


def _deploy_one(request: Any, dry_run: bool, as_json: bool, report_file: Path | None) -> int:
    """One device: the release flow, its measurement kept, the outcome shown."""
    from edge.cli.render import render_bundle, render_deploy_outcome
    from edge.cli.verdict import deploy_verdict
    from edge.core.bundle import version_drift
    from edge.flows.deploy import describe, run_deploy_outcome

    if dry_run:
        plan = describe(request)
        emit(as_json, plan, "\n".join(plan["steps"]))
        return 0
    with stdout_to_stderr(as_json):
        outcome, bundle, bundle_dir = run_deploy_outcome(request)
    with stdout_to_stderr(as_json):
        html = write_report(bundle_report, bundle_dir, report_file) if report_file else None
    text = render_bundle(bundle, str(bundle_dir)) + "\n\n" + render_deploy_outcome(outcome, bundle)
    verdict = deploy_verdict(outcome.report, outcome.previous)
    text += (f"\nreport: {html}" if html else "") + f"\nverdict: {verdict}"
    drift = version_drift(bundle, outcome.report.candidate, outcome.report.bench)
    emit(as_json, outcome.to_json() | {"bundle": str(bundle_dir), "verdict": verdict}
         | ({"report": html} if html else {}) | ({"versions": drift} if drift else {}), text)
    return 0


def _deploy_fleet(request: Any, dry_run: bool, as_json: bool, report_file: Path | None,
                  engine: str = "edge") -> int:
    """``edge deploy --inventory``: one bundle per profile, then every host in parallel."""
    from edge.flows.fleet import describe_fleet, run_fleet
    from edge.flows.fleet_ansible import describe_fleet_ansible, run_fleet_ansible

    if dry_run:
        plan = (describe_fleet_ansible if engine == "ansible" else describe_fleet)(request)
        emit(as_json, plan, "\n".join(plan["steps"]))
        return 0
    with stdout_to_stderr(as_json):
        report = (run_fleet_ansible if engine == "ansible" else run_fleet)(request)
    with stdout_to_stderr(as_json):
        html = _fleet_reports(report, report_file) if report_file else []
    emit(as_json, report.to_json() | ({"reports": html} if report_file else {}),
         render_fleet(report) + "".join(f"\nreport: {h}" for h in html))
    return int(report.exit_status)


def _fleet_reports(report: Any, out: Path) -> list[str]:
    """One HTML report per bundle the fleet deploy built: OUT, or OUT-PROFILE when several."""
    built = [b for b in report.bundles if b.bundle]
    names = ([out] if len(built) == 1
             else [out.with_name(f"{out.stem}-{b.profile}{out.suffix or '.html'}") for b in built])
    return [write_report(bundle_report, Path(b.bundle), name)
            for b, name in zip(built, names, strict=True)]
