"""``edge partition``, ``edge serve-cloud`` and ``edge run-split``: split a model between the
device and the cloud, serve the cloud side, run the device side against it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from edge.cli.common import (
    ARG,
    PATH,
    SHAPE,
    TRUST_CODE,
    Finite,
    check_report_file,
    device,
    device_options,
    json_option,
    on_device_option,
    parse_args,
    parse_shapes,
    report_option,
    with_sample,
    write_report,
)
from edge.cli.output import emit, stdout_to_stderr
from edge.cli.render_partition import render_partition, render_run_split
from edge.core.errors import UsageError
from edge.core.extras import require

if TYPE_CHECKING:
    from partition.solve import ObjectiveName

__all__ = ["partition", "run_split", "serve_cloud"]

_TOKEN_FILE = click.option("--token-file", type=PATH,
                           help="File with the bearer token [$EDGE_CLOUD_TOKEN].")


@click.command("partition")
@click.argument("model", type=PATH)
@click.option("--profile", "profile_ref", required=True, help="The edge device's profile.")
@click.option("--cloud", "cloud_ref", required=True, help="The cloud server's profile.")
@click.option("--bandwidth", type=Finite(min=0, min_open=True),
              help="Uplink in Mbit/s [the edge profile's link.uplink_mbps].")
@click.option("--rtt", type=Finite(min=0), help="Round trip in ms [link.rtt_ms].")
@click.option("-o", "--out", type=PATH, help="Split directory [MODEL-PROFILE-split].")
@click.option("--compress", type=click.Choice(["none", "fp16", "int8"]), default="none",
              show_default=True, help="Send float cut tensors as fp16 or int8.")
@click.option("--calib", type=PATH,
              help="Sample inputs for int8 scales and the check (.npy/.npz/images) [random].")
@click.option("--measure", is_flag=True,
              help="Measure per-node costs on this host with onnxruntime instead of estimating.")
@on_device_option("Measure the edge side's per-node costs ON the device (--host, else the "
                  "profile's access.host, else the embedded local device) by its agent. "
                  "Implied by --host.")
@click.option("--objective", type=click.Choice(["latency", "energy", "throughput"]),
              default="latency", show_default=True,
              help="Minimise latency, device energy per frame, or the slowest pipeline stage.")
@device_options
@SHAPE
@ARG
@TRUST_CODE
@report_option
@json_option
def partition(model: Path, profile_ref: str, cloud_ref: str, bandwidth: float | None,
              rtt: float | None, out: Path | None, compress: str, calib: Path | None,
              measure: bool, on_device: bool, measure_on_device: bool, objective: str,
              shapes: tuple[str, ...], arg_values: tuple[str, ...], trust_model_code: bool,
              report_file: Path | None,
              as_json: bool, **flags: Any) -> int:
    """Split a model between the edge device and the cloud at the optimal cut.

    The cut minimises --objective: end-to-end latency, device energy per frame (profile
    power x time + radio energy per bit), or the slowest stage of a pipelined stream.

    Writes head.onnx (runs on the device), tail.onnx (runs in the cloud) and split.yaml
    (cut tensors, predicted times, best cut per bandwidth range); every other cut of that
    table goes to cuts/ID/ so a running client can switch. Each head->tail is verified against
    the whole model. Per-node costs are estimated from MACs and each profile's peak unless
    --measure (this host) or --on-device.

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
    from edge.flows.partition import PartitionOptions
    from edge.flows.partition import partition as run_partition
    from edge.flows.report import render_partition_report

    edge, cloud = load_profile(profile_ref), load_profile(cloud_ref)
    model, calib, _ = with_sample(model, calib, None)
    pins, _ = parse_shapes(shapes)
    where = out or Path(f"{model.stem}-{edge.id}-split")
    check_report_file(report_file)
    measured_on = on_device or measure_on_device or bool(flags.get("host"))
    with stdout_to_stderr(as_json):
        report = run_partition(model, edge, cloud, where, PartitionOptions(
            bandwidth_mbps=bandwidth, rtt_ms=rtt, shapes=pins or None,
            args=parse_args(arg_values) or None, compression=compress,
            samples=calib, measured=measure, objective=cast("ObjectiveName", objective),
            device=device(flags) if measured_on else None, trust_code=trust_model_code))
        html = (write_report(render_partition_report, where, report_file) if report_file
                else None)
    emit(as_json, report.to_json() | ({"report": html} if html else {}),
         render_partition(report) + (f"\nreport: {html}" if html else ""))
    return 0


def _no_host(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(f"serve-cloud has no --host: it listens on --bind ADDR (--host "
                               f"names the device in other commands); use --bind {value}")


@click.command("serve-cloud")
@click.argument("split_dir", type=PATH)
@click.option("--bind", "address", metavar="ADDR", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="KServe v2 REST port (0: any free port, printed at start).")
@click.option("--grpc-port", type=click.IntRange(0, 65535),
              help="KServe v2 gRPC port (0: any free port) [--port + 1].")
@click.option("--host", hidden=True, expose_value=False, callback=_no_host)
@_TOKEN_FILE
@click.option("--insecure-no-auth", is_flag=True, help="Serve without a token (never in public).")
@click.option("--max-body", type=click.IntRange(1), default=64 * 2**20, show_default=True,
              help="Largest request body in bytes (larger: 413, before it is read).")
@click.option("--max-batch", type=click.IntRange(1, 4096),
              help="Dynamic batching: most requests merged into one run (1: off) [the cloud "
                   "profile's serving.max_batch, else 16].")
@click.option("--max-delay", type=Finite(0, 1000),
              help="Dynamic batching: longest wait for a batch to fill, ms [the cloud profile's "
                   "serving.max_delay_ms, else 2].")
@click.option("--max-inflight", type=click.IntRange(1), default=256, show_default=True,
              help="Inferences in progress at once (more: 503 at once).")
@click.option("--workers", type=click.IntRange(0, 64), default=0, show_default=True,
              help="MLServer inference worker processes (0: in the server process).")
@click.option("--processes", type=click.IntRange(1, 256),
              help="Server processes sharing the ports (each loads the tails) [the cloud "
                   "profile's serving.processes, else this host's cores, at most 8].")
@click.option("--threads", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="onnxruntime threads per inference (0: the cores, shared by --processes).")
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="Serve Prometheus metrics on this port (no token: keep it private).")
@click.option("--export-repository", type=PATH,
              help="Write the model repository (MLServer, Triton, KServe) and exit.")
def serve_cloud(split_dir: Path, address: str, port: int, grpc_port: int | None,
                token_file: Path | None, insecure_no_auth: bool, max_body: int,
                max_batch: int | None, max_delay: float | None, max_inflight: int, workers: int,
                processes: int | None,
                threads: int, metrics_port: int | None, export_repository: Path | None) -> int:
    """Serve a split's tail on MLServer over KServe v2 REST and gRPC as model "tail".

    The other precomputed cuts' tails are served too, as "tail-ID" (see split.yaml), so
    `edge run-split` can switch cut without a restart. Requests are merged into batches
    (--max-batch, --max-delay) when the tail verifies at batch 1 and at the max batch.

    Every request but health needs "Authorization: Bearer TOKEN" (from $EDGE_CLOUD_TOKEN or
    --token-file), on REST and gRPC; every request is validated (names, dtype, shape, size)
    and answered 4xx when bad. --export-repository writes what MLServer, Triton and KServe
    load (docs/architecture.md shows the way from one box to a cluster).

    \b
    Examples:
      EDGE_CLOUD_TOKEN=s3cret edge serve-cloud mobilenet-split --bind 0.0.0.0
      edge serve-cloud mobilenet-split --export-repository models/
    """
    require("cloud", "mlserver", "uvicorn", "orjson", "grpc", why="edge serve-cloud")
    from edge.flows.serve_cloud import ServeOptions, chosen_serving, resolve_token, serve_forever
    from edge.flows.serve_cloud import export_repository as export_to

    batching, processes, source = chosen_serving(split_dir, max_batch, max_delay, processes)
    if export_repository:
        for tail in export_to(split_dir, export_repository, batching, threads):
            click.echo(f"{export_repository / tail.name}  "
                       f"{'batch up to ' + str(tail.max_batch) if tail.max_batch else tail.note}")
        return 0
    if grpc_port is None:  # beside the REST port, as Triton's 8000/8001
        grpc_port = port + 1 if 0 < port < 65535 else 0
    options = ServeOptions(host=address, port=port, grpc_port=grpc_port,
                           token=resolve_token(None, token_file),
                           insecure_no_auth=insecure_no_auth, max_body=max_body,
                           max_inflight=max_inflight, threads=threads, workers=workers,
                           processes=processes, batching=batching, metrics_port=metrics_port,
                           source=source)
    return serve_forever(split_dir, options)


@click.command("run-split")
@click.argument("split_dir", type=PATH)
@click.option("--url", required=True, help="The cloud server, http://HOST:PORT.")
@click.option("--input", "data", type=PATH,
              help="Inputs (.npy/.npz/images, axis 0 = samples) [random].")
@click.option("--runs", type=click.IntRange(1, 1000000), default=10, show_default=True,
              help="Inferences to run and report (cycling through --input samples).")
@click.option("--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="Inferences run first and left out of the report.")
@click.option("--cut", default="auto", show_default=True,
              help="auto (switch with the measured link), a cut id, all-edge or all-cloud.")
@_TOKEN_FILE
@click.option("--threads", type=click.IntRange(0, 1024), default=1, show_default=True,
              help="onnxruntime threads for the head.")
@click.option("--probe-every", type=Finite(min=0), default=5.0, show_default=True,
              help="Seconds between link probes while running all on the device.")
@click.option("--protocol", type=click.Choice(["auto", "http", "grpc"]), default="auto",
              show_default=True, help="auto: gRPC when the server offers it, else REST.")
@click.option("--timeout", type=Finite(min=0, min_open=True, max=86400), default=30.0,
              show_default=True,
              help="Seconds one request to the server may take, its whole reply included.")
@click.option("-o", "--out", type=PATH, help="Save the outputs of every run to this .npz.")
@json_option
def run_split(split_dir: Path, url: str, data: Path | None, runs: int, warmup: int, cut: str,
              token_file: Path | None, threads: int, probe_every: float, protocol: str,
              timeout: float, out: Path | None, as_json: bool) -> int:
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
    from edge.flows.runsplit import RunSplitOptions, run

    options = RunSplitOptions(url=url, data=data, runs=runs, warmup=warmup, cut=cut,
                              token=_read_token(token_file), threads=threads,
                              probe_every_s=probe_every, out=out, protocol=protocol,
                              timeout_s=timeout)
    with stdout_to_stderr(as_json):
        report = run(split_dir, options)
    emit(as_json, report, render_run_split(report))
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
