"""The ``edge`` command line. Heavy frameworks are imported inside commands, never at start-up.

Exit status: 0 success, 1 a check failed, 2 bad input or usage, 3 device/transport failure.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from edge import __version__
from edge.core.errors import EdgeError, ExitStatus, UsageError

__all__ = ["cli", "main"]

_PATH = click.Path(path_type=Path)
_HOST_HELP = "USER@HOST[:PORT] [profile access.host, else the embedded local device]."


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit status instead of raising."""
    args = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in args
    args = [a for a in args if a != "--traceback"]  # accepted anywhere on the line
    warnings.showwarning = _show_warning
    _log_progress(quiet="--json" in args or not sys.stderr.isatty())
    try:
        status = cli.main(args=args, prog_name="edge", standalone_mode=False)
    except EdgeError as exc:
        if show_traceback:
            raise
        return _fail(str(exc), exc.status)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        return _fail(exc.format_message(), ExitStatus.BAD_INPUT)
    except (click.exceptions.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except Exception as exc:
        if show_traceback:
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (re-run with --traceback "
                     "and report it)", ExitStatus.CHECK_FAILED)
    return int(status or 0)


def _log_progress(*, quiet: bool) -> None:
    """Progress bars and lines ('edge: converting ...') on a terminal's stderr; none under
    --json. Log lines print above the bars, through the same console."""
    import logging

    from edge.core import progress

    logger = logging.getLogger("edge")
    logger.handlers[:] = []
    progress.disable()
    if quiet:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
        return
    progress.enable(sys.stderr)
    handler = progress.LogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("edge: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _fail(message: str, status: int) -> int:
    line = " ".join(str(message).split())
    click.echo(f"error: {line}", err=True)
    return int(status)


def _show_warning(message: Any, category: type, *args: Any, **kwargs: Any) -> None:
    click.echo(f"warning: {message}", err=True)


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """Under --json, anything libraries print goes to stderr so stdout stays one document."""
    if not active:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _emit(as_json: bool, document: Any, text: str) -> None:
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(text)


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document on stdout, nothing else.")
report_option = click.option(
    "--report", "report_file", type=_PATH, metavar="FILE",
    help="Also write the HTML report of the result to FILE (as `edge report` does).")


def _check_report_file(path: Path | None) -> None:
    """Refuse a --report FILE that cannot be written before any long work starts."""
    if path is None:
        return
    from edge.flows.report import check_report_target

    check_report_target(path)


def _write_report(render: Any, source: Path, out: Path) -> str:
    """Render the report of ``source`` with ``render`` and write it atomically to ``out``."""
    from edge.flows.report import write_report

    return str(write_report(render(source), out))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edge")
@click.option("--traceback", is_flag=True, help="Show the Python stack on errors.")
def cli(traceback: bool) -> None:
    """Take a trained model to the devices people own, and prove how fast it runs there.

    \b
    Example:
      edge deploy model.onnx --profile rpi4 --host pi@raspberrypi.local --calib calib.npy
    """


def _with_sample(model: Path, calib: Path | None,
                 eval_: Path | None) -> tuple[Path, Path | None, Path | None]:
    """Resolve ``sample:NAME`` to the shipped model and its data (unless given)."""
    from edge.flows.sample import resolve

    sample = resolve(model)
    if sample is None:
        return model, calib, eval_
    return sample.model, calib or sample.calib, eval_ or sample.eval


# ---------------------------------------------------------------- profiles
@cli.group()
def profiles() -> None:
    """List, show, validate device profiles and print their schema.

    \b
    Example:
      edge profiles show rpi4
    """


@profiles.command("list")
@json_option
def profiles_list(as_json: bool) -> None:
    """List the shipped device profiles.

    \b
    Example:
      edge profiles list --json
    """
    from edge.core.profile import catalog_ids, load_profile
    from edge.core.tables import table

    items = [load_profile(i) for i in catalog_ids()]
    rows = [(p.id, p.name, f"{p.compute.cores} cores: {p.compute.cpu}", f"{p.memory.ram_mb} MB",
             " > ".join(p.runtimes)) for p in items]
    _emit(as_json, [{"id": p.id, "name": p.name, "runtimes": list(p.runtimes)} for p in items],
          table(("id", "name", "cpu", "ram", "runtimes"), rows))


@profiles.command("show")
@click.argument("name")
@json_option
def profiles_show(name: str, as_json: bool) -> None:
    """Show a profile (a catalog id or a file, with extends: resolved).

    \b
    Example:
      edge profiles show my-pi.yaml
    """
    import yaml

    from edge.core.profile import load_profile

    profile = load_profile(name)
    _emit(as_json, profile.to_json(), yaml.safe_dump(profile.to_json(), sort_keys=False).rstrip())


@profiles.command("validate")
@click.argument("files", nargs=-1, required=True, type=_PATH)
@json_option
def profiles_validate(files: tuple[Path, ...], as_json: bool) -> int:
    """Validate profile files; name the file and key of every error.

    \b
    Example:
      edge profiles validate profiles/*.yaml
    """
    from edge.core.profile import validate_file

    results = []
    for file in files:
        try:
            results.append({"file": str(file), "ok": True, "id": validate_file(file).id})
        except EdgeError as exc:
            results.append({"file": str(file), "ok": False, "error": str(exc)})
    lines = [f"ok     {r['file']} ({r['id']})" if r["ok"] else f"error: {r['error']}"
             for r in results]
    if as_json:
        _emit(True, results, "")
    else:
        for line, r in zip(lines, results, strict=True):
            click.echo(line, err=not r["ok"])
    return int(ExitStatus.BAD_INPUT) if any(not r["ok"] for r in results) else 0


@profiles.command("schema")
def profiles_schema() -> None:
    """Print the JSON Schema of profile files.

    \b
    Example:
      edge profiles schema > profile.schema.json
    """
    from edge.core.profile import profile_schema

    click.echo(json.dumps(profile_schema(), indent=2))


# ---------------------------------------------------------------- inspect
_SHAPE = click.option(
    "--shape", "shapes", multiple=True, metavar="NAME=DIMS[:DTYPE]",
    help="Pin an input's dims, e.g. input=1,3,224,224 (PyTorch: every input; ids=1,16:int64).")


@cli.command()
@click.argument("model", type=_PATH)
@click.option("--profile", "profile_ref", help="Check the model against this device's budget.")
@_SHAPE
@json_option
def inspect(model: Path, profile_ref: str | None, shapes: tuple[str, ...], as_json: bool) -> int:
    """Describe a model: inputs, outputs, params, MACs, size, ops, fit on a device.

    MODEL may be ONNX, TFLite, Keras (.keras/.h5), a SavedModel folder or a PyTorch
    module (.pt/.pth, needs --shape); it is described as the reference ONNX edge converts from.
    Exits 1 when the weights do not fit the profile's model budget even at int8.

    \b
    Example:
      edge inspect model.onnx --profile rpi4
      edge inspect face_detection.tflite
    """
    from edge.cli.render import render_model
    from edge.core.intake import reference_model
    from edge.core.model import inspect_model
    from edge.core.profile import load_profile

    profile = load_profile(profile_ref) if profile_ref else None
    model, _, _ = _with_sample(model, None, None)
    pins, types = _parse_shapes(shapes)
    with _stdout_to_stderr(as_json):
        _, reference = reference_model(model, shapes=pins, dtypes=types)
        info = inspect_model(reference)
    fit = _fit(info, profile) if profile else None
    document = info.to_json() | ({"fit": fit} if fit else {})
    _emit(as_json, document, render_model(info, fit and fit["summary"]))
    return int(ExitStatus.CHECK_FAILED) if fit and not fit["fits"] else 0


def _fit(info: Any, profile: Any) -> dict[str, Any]:
    """Whether the weights fit the profile's budget at fp32 and at int8 (edge's smallest)."""
    weights_mb = info.params * 4 / 2**20
    budget = profile.memory.model_budget_mb
    fits_fp32, fits = weights_mb <= budget, weights_mb / 4 <= budget
    verdict = ("fit" if fits_fp32 else "fit only at int8" if fits else "do NOT fit even at int8")
    summary = (f"{profile.id}: weights {weights_mb:.1f} MB fp32 / {weights_mb / 4:.1f} MB int8 "
               f"{verdict} the {budget} MB model budget ({profile.memory.ram_mb} MB RAM)")
    return {"profile": profile.id, "weights_mb": weights_mb, "budget_mb": budget,
            "fits": fits, "fits_fp32": fits_fp32, "summary": summary}


# ---------------------------------------------------------------- optimize
def _with(options: list[Any]) -> Any:
    """A decorator applying click options in the order listed (the first is shown first)."""
    def apply(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func
    return apply


_optimize_options = _with([
    click.option("--calib", type=_PATH, help="Calibration data: .npy, .npz or image folder."),
    click.option("--eval", "eval_", type=_PATH,
                 help="Held-out data to verify on (.npz may carry 'labels')."),
    click.option("--max-drop", type=click.FloatRange(0, 100), default=1.0, show_default=True,
                 help="Max accuracy (or top-1 agreement) loss, in points."),
    click.option("--min-cosine", type=click.FloatRange(-1, 1), default=0.98,
                 show_default=True, help="Min output cosine similarity to fp32."),
    click.option("--latency-budget", type=click.FloatRange(min=0, min_open=True),
                 help="Reject candidates whose measured p50 exceeds this (ms)."),
    click.option("-o", "--out", type=_PATH, help="Bundle directory to write."),
    _SHAPE,
])


def _parse_shapes(texts: tuple[str, ...]) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    if not texts:
        return {}, {}
    from edge.core.intake import parse_shape_flags

    return parse_shape_flags(list(texts))


def _options(opts: dict[str, Any]) -> Any:
    """OptimizeOptions from the shared optimize flags (consumed from ``opts``)."""
    from edge.core.verify import Thresholds
    from edge.flows.optimize import OptimizeOptions

    shapes, dtypes = _parse_shapes(opts.pop("shapes"))
    return OptimizeOptions(
        calib=opts.pop("calib"), eval=opts.pop("eval_"),
        latency_budget_ms=opts.pop("latency_budget"), shapes=shapes, dtypes=dtypes,
        limits=Thresholds(max_drop=opts.pop("max_drop"), min_cosine=opts.pop("min_cosine")))


@cli.command("optimize")
@click.argument("model", type=_PATH)
@click.option("--profile", "profile_ref", required=True, help="Device profile id or file.")
@_optimize_options
@click.option("--dry-run", is_flag=True, help="Print the plan; convert nothing.")
@report_option
@json_option
def optimize_cmd(model: Path, profile_ref: str, out: Path | None, dry_run: bool,
                 report_file: Path | None, as_json: bool, **opts: Any) -> int:
    """Convert, quantize and verify a model for a device; write a bundle.

    MODEL may be ONNX, TFLite, Keras, a SavedModel folder or a PyTorch module (see inspect).

    \b
    Example:
      edge optimize model.onnx --profile rpi4 --calib calib.npy --eval eval.npz -o rpi4.bundle
      edge optimize sample:digits --profile rpi4 --report digits-rpi4.html
    """
    from edge.cli.render import render_bundle
    from edge.core.profile import load_profile
    from edge.flows.optimize import optimize

    profile = load_profile(profile_ref)
    model, opts["calib"], opts["eval_"] = _with_sample(model, opts["calib"], opts["eval_"])
    options = _options(opts)
    if dry_run:
        return _print_plan(model, profile, options, as_json)
    _check_report_file(report_file)
    where = out or Path(f"{model.stem}-{profile.id}.bundle")
    with _stdout_to_stderr(as_json):
        bundle = optimize(model, profile, where, options)
        html = _write_report(_bundle_report, where, report_file) if report_file else None
    _emit(as_json, bundle.to_json() | {"bundle": str(where)} | ({"report": html} if html else {}),
          render_bundle(bundle, str(where)) + (f"\nreport: {html}" if html else ""))
    return 0 if bundle.chosen else int(ExitStatus.CHECK_FAILED)


def _bundle_report(bundle_dir: Path) -> str:
    from edge.flows.report import render_bundle_report

    return render_bundle_report(bundle_dir)


def _print_plan(model: Path, profile: Any, options: Any, as_json: bool) -> int:
    from edge.core.intake import reference_model
    from edge.core.model import inspect_model
    from edge.core.tables import table
    from edge.flows.optimize import plan_for, refuse_if_unfit

    with _stdout_to_stderr(as_json):
        _, reference = reference_model(model, shapes=options.shapes, dtypes=options.dtypes)
    info = inspect_model(reference)
    refuse_if_unfit(profile, info)
    plan = plan_for(profile, info)
    rows = [(p.candidate.id, "try" if p.keep else "skip", p.reason) for p in plan]
    _emit(as_json, [{"candidate": p.candidate.id, "keep": p.keep, "reason": p.reason}
                    for p in plan], table(("candidate", "plan", "reason"), rows))
    return 0


#: How to reach a device over SSH (every command that talks to one).
_SSH = [
    click.option("--identity", type=_PATH, help="SSH private key."),
    click.option("--known-hosts", type=_PATH, help="known_hosts file [~/.ssh/known_hosts]."),
    click.option("--trust-new-host", is_flag=True,
                 help="Accept and record an unknown host key (never a changed one)."),
]
_ACCESS = [click.option("--host", help=_HOST_HELP), *_SSH,
           click.option("--device-python", help="Python on the device [profile access.python].")]
#: Commands that only talk to a device (rollback, releases, report --on-device).
_remote_options = _with([
    click.option("--profile", "profile_ref",
                 help="Device profile (access settings, work dir) [~/.edge, no user]."),
    *_ACCESS])


# ---------------------------------------------------------------- devices
@cli.group()
def devices() -> None:
    """Talk to devices: write a profile from a live one.

    \b
    Example:
      edge devices probe pi@raspberrypi.local -o kitchen-pi.yaml
    """


@devices.command("probe")
@click.argument("target", metavar="USER@HOST[:PORT]|local")
@click.option("-o", "--out", type=_PATH, help="Profile file to write [ID.yaml].")
@click.option("--id", "profile_id", help="Profile id [from the device's host name].")
@click.option("--force", is_flag=True, help="Replace an existing profile file.")
@_with(_SSH)
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
    from devices.connect import DeviceTarget
    from edge.flows.probe import probe_to_file, render_profile

    device = DeviceTarget(host=None if target == "local" else target, identity=identity,
                          known_hosts=known_hosts, trust_new_host=trust_new_host,
                          python=device_python)
    with _stdout_to_stderr(as_json):
        result, path = probe_to_file(device, out, profile_id=profile_id, force=force)
    _emit(as_json, result.to_json() | {"file": str(path)},
          render_profile(result) + f"\nwrote {path}")
    return 0


# ---------------------------------------------------------------- device flags
def _device_options(func: Any) -> Any:
    options = [
        *_ACCESS,
        click.option("--runs", type=click.IntRange(1, 100000), default=50, show_default=True,
                     help="Timed inferences on the device (percentiles come from these)."),
        click.option("--warmup", type=click.IntRange(0, 10000), default=5, show_default=True,
                     help="Inferences run first on the device and left out of the timing."),
        click.option("--threads", type=click.IntRange(0, 1024), default=None,
                     help="Threads on the device [profile compute.threads or cores; 0: all]."),
        click.option("--provision", is_flag=True,
                     help="First install the artifact's runtime on the device: wheels for its "
                          "platform fetched on this host, installed into WORK/venv with pip "
                          "--no-index (the device needs no internet); deploy with that venv."),
    ]
    return _with(options)(func)


def _device(opts: dict[str, Any]) -> Any:
    """DeviceTarget from the shared device flags (consumed from ``opts``)."""
    import dataclasses

    return dataclasses.replace(
        _remote(opts), runs=opts.pop("runs"), warmup=opts.pop("warmup"),
        threads=opts.pop("threads"), provision=opts.pop("provision"))


@contextlib.contextmanager
def _report_device(on_device: bool, device: Any, profile_ref: str | None) -> Iterator[Any]:
    """The opened device the report measures on, or None."""
    if not on_device:
        yield None
        return
    from devices.connect import opened_device

    with opened_device(device, profile_ref) as opened:
        yield opened


def _remote(opts: dict[str, Any]) -> Any:
    from devices.connect import DeviceTarget

    return DeviceTarget(host=opts.pop("host"), identity=opts.pop("identity"),
                        known_hosts=opts.pop("known_hosts"),
                        trust_new_host=opts.pop("trust_new_host"),
                        python=opts.pop("device_python"))


# ---------------------------------------------------------------- partition
@cli.command("partition")
@click.argument("model", type=_PATH)
@click.option("--profile", "profile_ref", required=True, help="The edge device's profile.")
@click.option("--cloud", "cloud_ref", required=True, help="The cloud server's profile.")
@click.option("--bandwidth", type=click.FloatRange(min=0, min_open=True),
              help="Uplink in Mbit/s [the edge profile's link.uplink_mbps].")
@click.option("--rtt", type=click.FloatRange(min=0), help="Round trip in ms [link.rtt_ms].")
@click.option("-o", "--out", type=_PATH, help="Split directory [MODEL-PROFILE-split].")
@click.option("--compress", type=click.Choice(["none", "fp16", "int8"]), default="none",
              show_default=True, help="Send float cut tensors as fp16 or int8.")
@click.option("--calib", type=_PATH,
              help="Sample inputs for int8 scales and the check (.npy/.npz/images) [random].")
@click.option("--measure", is_flag=True,
              help="Measure per-node costs on this host with onnxruntime instead of estimating.")
@click.option("--measure-on-device", is_flag=True,
              help="Measure the edge side's per-node costs ON the device (--host) by its agent.")
@click.option("--objective", type=click.Choice(["latency", "energy", "throughput"]),
              default="latency", show_default=True,
              help="Minimise latency, device energy per frame, or the slowest pipeline stage.")
@_device_options
@_SHAPE
@report_option
@json_option
def partition_cmd(model: Path, profile_ref: str, cloud_ref: str, bandwidth: float | None,
                  rtt: float | None, out: Path | None, compress: str, calib: Path | None,
                  measure: bool, measure_on_device: bool, objective: str,
                  shapes: tuple[str, ...], report_file: Path | None, as_json: bool,
                  **device: Any) -> int:
    """Split a model between the edge device and the cloud at the optimal cut.

    The cut minimises --objective: end-to-end latency, device energy per frame (profile
    power x time + radio energy per bit), or the slowest stage of a pipelined stream.

    Writes head.onnx (runs on the device), tail.onnx (runs in the cloud) and split.yaml
    (cut tensors, predicted times, best cut per bandwidth range); every other cut of that
    table goes to cuts/ID/ so a running client can switch. Each head->tail is verified against
    the whole model. Per-node costs are estimated from MACs and each profile's peak unless
    --measure.

    \b
    Examples:
      edge partition sample:digits --profile rpi4 --cloud cloud-t4 --bandwidth 10 --rtt 20
      edge partition model.onnx --profile jetson-nano --cloud cloud-t4 --compress int8 \\
          --calib frames.npy
      edge partition model.onnx --profile rpi4 --cloud cloud-c7i --host pi@raspberrypi.local \\
          --measure --objective energy     # edge costs measured ON the Pi, cloud's here
      edge partition sample:digits --profile rpi4 --cloud cloud-t4 --report split.html
    """
    from edge.core.profile import load_profile
    from edge.flows.report import render_partition_report
    from partition.run import PartitionOptions, partition

    edge, cloud = load_profile(profile_ref), load_profile(cloud_ref)
    model, calib, _ = _with_sample(model, calib, None)
    pins, _ = _parse_shapes(shapes)
    where = out or Path(f"{model.stem}-{edge.id}-split")
    _check_report_file(report_file)
    with _stdout_to_stderr(as_json):
        report = partition(model, edge, cloud, where, PartitionOptions(
            bandwidth_mbps=bandwidth, rtt_ms=rtt, shapes=pins or None, compression=compress,
            samples=calib, measured=measure, objective=objective,
            device=_device(device) if measure_on_device or device.get("host") else None))
        html = (_write_report(render_partition_report, where, report_file) if report_file
                else None)
    _emit(as_json, report.to_json() | ({"report": html} if html else {}),
          _render_partition(report) + (f"\nreport: {html}" if html else ""))
    return 0


def _render_partition(report: Any) -> str:
    from edge.core.tables import table

    chosen = report.chosen
    rows = [("chosen", chosen["kind"], f"{chosen['total_ms']:.3f}",
             f"edge {chosen['edge_ms']:.3f} + link {chosen['transfer_ms']:.3f} + cloud "
             f"{chosen['cloud_ms']:.3f}", ", ".join(chosen["cut"]) or "-"),
            ("all-edge", "", f"{report.all_edge_ms:.3f}", "", ""),
            ("all-cloud", "", f"{report.all_cloud_ms:.3f}", "", "")]
    bands = [(f"{r['min_mbps']}-{r['max_mbps']}", r["kind"], f"{r['predicted_ms']:.3f}",
              ", ".join(r["cut"]) or "-") for r in report.bandwidth_table]
    fps = 1000 / chosen["stage_ms"] if chosen["stage_ms"] else float("inf")
    return "\n".join([
        f"link {report.bandwidth_mbps} Mbit/s, RTT {report.rtt_ms} ms; costs: {report.costs}",
        f"objective {report.objective}: chosen {chosen['total_ms']:.3f} ms, "
        f"{chosen['energy_mj']:.2f} mJ/frame on the device"
        + (" (assumed radio cost)" if (report.energy or {}).get("assumed") else "")
        + f", {fps:.1f} frames/s pipelined"
        + ("" if chosen["exact"] else " (not proven optimal: too many placements)"),
        table(("placement", "kind", "ms", "parts", "cut tensors"), rows), "",
        "best cut per bandwidth (Mbit/s):",
        table(("bandwidth", "kind", "ms at low end", "cut tensors"), bands), "",
        f"head->tail max abs diff vs the whole model: {report.max_abs_diff:.2e}"
        + ("" if report.compressed_cosine is None else
           f"; with {report.compression} on the wire: output cosine "
           f"{report.compressed_cosine:.5f}"),
        f"split: {report.out}"])


@cli.command("serve-cloud")
@click.argument("split_dir", type=_PATH)
@click.option("--host", "address", default="127.0.0.1", show_default=True,
              help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="TCP port to listen on (0: any free port, printed at start).")
@click.option("--token-file", type=_PATH, help="File with the bearer token [$EDGE_CLOUD_TOKEN].")
@click.option("--insecure-no-auth", is_flag=True, help="Serve without a token (never in public).")
@click.option("--max-body", type=click.IntRange(1), default=64 * 2**20, show_default=True,
              help="Largest request body in bytes (larger: 413).")
@click.option("--export-repository", type=_PATH,
              help="Write a Triton/KServe model repository for the tails and exit.")
@click.option("--threads", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="onnxruntime threads per inference (0: all cores).")
def serve_cloud(split_dir: Path, address: str, port: int, token_file: Path | None,
                insecure_no_auth: bool, max_body: int, export_repository: Path | None,
                threads: int) -> int:
    """Serve a split's tail over the KServe v2 REST API as model "tail".

    The other precomputed cuts' tails are served too, as "tail-ID" (see split.yaml), so
    `edge run-split` can switch cut without a restart.

    Every request but health needs "Authorization: Bearer TOKEN" (from $EDGE_CLOUD_TOKEN or
    --token-file); every request is validated (names, dtype, shape, size) and answered 4xx
    when bad. Triton, KServe or OpenVINO Model Server can serve the exported repository.

    \b
    Examples:
      EDGE_CLOUD_TOKEN=s3cret edge serve-cloud mobilenet-split --host 0.0.0.0 --port 8000
      edge serve-cloud mobilenet-split --export-repository models/
    """
    from partition.serve import main as serve_main

    argv = [str(split_dir), "--host", address, "--port", str(port), "--max-body", str(max_body),
            "--threads", str(threads)]
    argv += ["--token-file", str(token_file)] if token_file else []
    argv += ["--insecure-no-auth"] if insecure_no_auth else []
    argv += ["--export-repository", str(export_repository)] if export_repository else []
    return serve_main(argv)


@cli.command("run-split")
@click.argument("split_dir", type=_PATH)
@click.option("--url", required=True, help="The cloud server, http://HOST:PORT.")
@click.option("--input", "data", type=_PATH,
              help="Inputs (.npy/.npz/images, axis 0 = samples) [random].")
@click.option("--runs", type=click.IntRange(1, 1000000), default=10, show_default=True,
              help="Inferences to run and report (cycling through --input samples).")
@click.option("--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="Inferences run first and left out of the report.")
@click.option("--cut", default="auto", show_default=True,
              help="auto (switch with the measured link), a cut id, all-edge or all-cloud.")
@click.option("--token-file", type=_PATH, help="File with the bearer token [$EDGE_CLOUD_TOKEN].")
@click.option("--threads", type=click.IntRange(0, 1024), default=1, show_default=True,
              help="onnxruntime threads for the head.")
@click.option("--probe-every", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between link probes while running all on the device.")
@click.option("-o", "--out", type=_PATH, help="Save the outputs of every run to this .npz.")
@json_option
def run_split(split_dir: Path, url: str, data: Path | None, runs: int, warmup: int, cut: str,
              token_file: Path | None, threads: int, probe_every: float, out: Path | None,
              as_json: bool) -> int:
    """Run a split model on this device against `edge serve-cloud` (the edge client).

    Runs the head here, sends the cut tensors to the server, and returns the final outputs.
    It measures uplink bandwidth and RTT as it goes and, with --cut auto, switches to the cut
    that is best for split.yaml's objective (latency unless partitioned with --objective) at
    the measured link; a cloud it cannot reach makes it run on the device for a while.

    \b
    Example:
      EDGE_CLOUD_TOKEN=s3cret edge run-split digits-rpi4-split --url http://10.0.0.5:8000 \\
          --input frames.npy --runs 100
    """
    from partition.runsplit import RunSplitOptions, render, run

    token = _read_token(token_file)
    with _stdout_to_stderr(as_json):
        report = run(split_dir, RunSplitOptions(url=url, data=data, runs=runs, warmup=warmup,
                                                cut=cut,
                                                token=token, threads=threads,
                                                probe_every_s=probe_every, out=out))
    _emit(as_json, report, render(report))
    return 0


def _read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"--token-file {path}: {exc.strerror or exc}") from None
    if not token:
        raise UsageError(f"--token-file {path} is empty")
    return token


# ---------------------------------------------------------------- report
@cli.command("report")
@click.argument("source", metavar="BUNDLE|SPLIT_DIR|RESULTS", type=_PATH)
@click.option("-o", "--out", type=_PATH, required=True, help="HTML file to write.")
@click.option("--no-layers", is_flag=True,
              help="Bundle: skip measuring per-layer times.")
@click.option("--on-device", is_flag=True,
              help="Bundle: measure the per-layer times ON the device (--host, else the "
                   "profile's access.host, else the embedded local device) with its agent; "
                   "candidates of a runtime the device lacks on this host. Implied by --host.")
@_remote_options
@json_option
def report_cmd(source: Path, out: Path, no_layers: bool, on_device: bool,
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
    _check_report_file(out)
    device = _remote(opts)
    on_device = on_device or device.host is not None
    if on_device and (kind != "bundle" or no_layers):
        raise UsageError("--on-device/--host measure a bundle's per-layer times: give a bundle "
                         "and drop --no-layers")
    with _stdout_to_stderr(as_json), _report_device(on_device, device, profile_ref) as opened:
        text = render_report(source, layers=not no_layers, device=opened)
    path = write_report(text, out)
    plots = text.count('class="plot"')
    _emit(as_json, {"report": str(path), "kind": kind, "plots": plots, "bytes": len(text)},
          f"wrote {path} ({kind} report, {plots} plots)")
    return 0


# ---------------------------------------------------------------- bench
@cli.command()
@click.argument("source", metavar="ARTIFACT|BUNDLE", type=_PATH)
@click.option("--candidate", help="Which bundle candidate [the chosen one], e.g. tflite-int8.")
@click.option("--profile", "profile_ref", help="Profile for access settings [the bundle's].")
@_device_options
@click.option("--baseline", metavar="last|FILE",
              help="Compare with the last result kept for this device and artifact, or with "
                   "a report saved from `edge bench --json`; exit 1 on a regression.")
@click.option("--max-regression", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Allowed p50 slow-down against --baseline, percent.")
@json_option
def bench(source: Path, candidate: str | None, profile_ref: str | None, baseline: str | None,
          max_regression: float, as_json: bool, **opts: Any) -> int:
    """Benchmark an artifact ON the device (installed, not made current).

    Every result is kept on this host per device and artifact ($EDGE_CACHE_DIR/results), so
    `--baseline last` can gate a CI pipeline on latency regressions.

    \b
    Examples:
      edge bench digits-rpi4.bundle --candidate onnxruntime-int8 --host pi@raspberrypi.local
      edge bench model.tflite --runs 200       # the embedded local device
      edge bench digits-rpi4.bundle --host pi@raspberrypi.local --baseline last
    """
    from edge.cli.render import render_deploy
    from edge.core.results import compare, keep, load_baseline
    from edge.flows.deploy import BenchRequest, run_bench

    request = BenchRequest(source=source, candidate=candidate, profile=profile_ref,
                           device=_device(opts))
    with _stdout_to_stderr(as_json):
        report = run_bench(request)
    comparison = None
    found = load_baseline(baseline, report) if baseline is not None else None
    if found is not None:
        comparison = compare(report, *found, max_regression)
    keep(report, regressed=bool(comparison and comparison.regressed))
    document = report.to_json() | ({"baseline": comparison.to_json()} if comparison else {})
    text = render_deploy(report) + (f"\nbaseline: {comparison.line()}" if comparison else "")
    if baseline is not None and found is None:
        text += "\nbaseline: none kept yet for this device and artifact; this result is now one"
    _emit(as_json, document, text)
    if comparison is not None and comparison.regressed:
        return _regressed(comparison)
    return 0


def _regressed(comparison: Any) -> int:
    click.echo(f"error: latency regressed: {comparison.line()}", err=True)
    return int(ExitStatus.CHECK_FAILED)


# ---------------------------------------------------------------- deploy
@cli.command()
@click.argument("source", metavar="MODEL|BUNDLE", type=_PATH)
@click.option("--profile", "profile_ref", help="Device profile id or file (MODEL: required).")
@_device_options
@click.option("--measure-on-device", is_flag=True,
              help="Benchmark every faithful candidate on the device; activate the fastest.")
@click.option("--keep", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Releases kept on the device (the active one and the rollback target "
                   "are never removed).")
@click.option("--inventory", type=_PATH,
              help="Deploy to every host of an Ansible inventory (YAML or INI) in parallel.")
@click.option("--limit", help="Inventory hosts or groups: web,db / !db / rpi* (like Ansible).")
@click.option("--forks", type=click.IntRange(1, 256), default=5, show_default=True,
              help="Hosts deployed at once with --inventory.")
@_optimize_options
@click.option("--dry-run", is_flag=True, help="Say what would be done; touch nothing.")
@click.option("--report", "report_file", type=_PATH, metavar="FILE",
              help="Also write the HTML report of the deployed bundle, with the device's "
                   "history, to FILE (--inventory: FILE-PROFILE.html per bundle when several).")
@json_option
def deploy(source: Path, profile_ref: str | None, measure_on_device: bool, keep: int,
           inventory: Path | None, limit: str | None, forks: int, out: Path | None,
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
      edge deploy sample:digits --profile rpi4 --report deploy.html
    """
    from edge.cli.render import render_bundle, render_deploy_outcome
    from edge.core.results import keep as keep_result
    from edge.flows.deploy import DeployRequest, run_deploy_outcome

    source, opts["calib"], opts["eval_"] = _with_sample(source, opts["calib"], opts["eval_"])
    if not dry_run:
        _check_report_file(report_file)
    if inventory is not None:
        return _deploy_fleet(source, inventory, limit, forks, profile_ref, out,
                             measure_on_device, dry_run, as_json, opts, report_file, keep)
    if limit is not None:
        raise UsageError("--limit selects inventory hosts: give --inventory too")
    request = DeployRequest(source=source, profile=profile_ref, device=_device(opts),
                            options=_options(opts), out=out,
                            measure_on_device=measure_on_device, keep=keep)
    if dry_run:
        from edge.flows.deploy import describe

        _emit(as_json, describe(request), "\n".join(describe(request)["steps"]))
        return 0
    with _stdout_to_stderr(as_json):
        outcome, bundle, bundle_dir = run_deploy_outcome(request)
    keep_result(outcome.report)
    with _stdout_to_stderr(as_json):
        html = _write_report(_bundle_report, bundle_dir, report_file) if report_file else None
    text = render_bundle(bundle, str(bundle_dir)) + "\n\n" + render_deploy_outcome(outcome)
    text += f"\nreport: {html}" if html else ""
    _emit(as_json, outcome.to_json() | {"bundle": str(bundle_dir)}
          | ({"report": html} if html else {}), text)
    return 0


def _deploy_fleet(source: Path, inventory: Path, limit: str | None, forks: int,
                  profile_ref: str | None, out: Path | None, measure_on_device: bool,
                  dry_run: bool, as_json: bool, opts: dict[str, Any],
                  report_file: Path | None = None, keep: int = 3) -> int:
    """``edge deploy --inventory``: one bundle per profile, then every host in parallel."""
    from edge.core.results import keep as keep_result
    from edge.flows.fleet import FleetRequest, describe_fleet, render_fleet, run_fleet

    request = FleetRequest(source=source, inventory=inventory, limit=limit, forks=forks,
                           profile=profile_ref, device=_device(opts), options=_options(opts),
                           out_dir=out, measure_on_device=measure_on_device, keep=keep)
    if dry_run:
        plan = describe_fleet(request)
        _emit(as_json, plan, "\n".join(plan["steps"]))
        return 0
    with _stdout_to_stderr(as_json):
        report = run_fleet(request)
    for host in report.hosts:  # each host's measurement joins its history, as a deploy's does
        if host.report is not None:
            keep_result(host.report)
    with _stdout_to_stderr(as_json):
        html = _fleet_reports(report, report_file) if report_file else []
    _emit(as_json, report.to_json() | ({"reports": html} if report_file else {}),
          render_fleet(report) + "".join(f"\nreport: {h}" for h in html))
    return int(report.exit_status)


def _fleet_reports(report: Any, out: Path) -> list[str]:
    """One HTML report per bundle the fleet deploy built: OUT, or OUT-PROFILE when several."""
    built = [b for b in report.bundles if b.bundle]
    names = ([out] if len(built) == 1
             else [out.with_name(f"{out.stem}-{b.profile}{out.suffix or '.html'}") for b in built])
    return [_write_report(_bundle_report, Path(b.bundle), name)
            for b, name in zip(built, names, strict=True)]


@cli.command()
@click.option("--to", "release", metavar="RELEASE",
              help="Release id (or a unique prefix) [the previously active release].")
@_remote_options
@json_option
def rollback(release: str | None, profile_ref: str | None, as_json: bool, **opts: Any) -> int:
    """Switch the device back to an earlier release (health-checked before the switch).

    \b
    Examples:
      edge rollback --host pi@raspberrypi.local --profile rpi4
      edge rollback --to 3f2a9c --host pi@raspberrypi.local --profile rpi4
    """
    from edge.cli.render import render_rollback
    from edge.flows.deploy import RollbackRequest, run_rollback

    request = RollbackRequest(profile=profile_ref, device=_remote(opts), to=release)
    with _stdout_to_stderr(as_json):
        report = run_rollback(request)
    _emit(as_json, report.to_json(), render_rollback(report))
    return 0


@cli.command()
@click.option("--prune", "prune_keep", type=click.IntRange(1, 1000),
              help="First remove the oldest inactive releases beyond this many.")
@_remote_options
@json_option
def releases(prune_keep: int | None, profile_ref: str | None, as_json: bool,
             **opts: Any) -> int:
    """List the releases installed on the device, the active one and the history.

    \b
    Example:
      edge releases --host pi@raspberrypi.local --profile rpi4
    """
    from edge.cli.render import render_releases
    from edge.flows.deploy import ReleasesRequest, run_releases

    request = ReleasesRequest(profile=profile_ref, device=_remote(opts), prune_keep=prune_keep)
    with _stdout_to_stderr(as_json):
        report = run_releases(request)
    _emit(as_json, report.to_json(), render_releases(report))
    return 0
