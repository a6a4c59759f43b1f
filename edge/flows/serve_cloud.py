"""``edge serve-cloud``: every cut's tail on a serving engine (MLServer), behind edge's front
layer.

The served names are "tail" (the chosen cut) and "tail-cN" (every other precomputed cut), over
KServe v2 REST (JSON and binary tensor data) and gRPC. :func:`serve_forever` serves in this
process (the CLI); :func:`serve` starts a child process and returns a handle (tests, benches,
anything that also imports tritonclient's gRPC, whose messages clash with MLServer's).
:func:`export_repository` writes what Triton, MLServer and KServe load. The hand-written server
this replaces is at commit a328948 (the benchmark baseline, docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

from edge.core.documents import ServingDocument
from edge.core.errors import UsageError
from edge.core.files import only_regular_files
from edge.core.model import ort_refusal
from edge.flows.cloud.batch import ServedTail, tensor_specs
from edge.flows.cloud.engine import DEFAULT_ENGINE, Limits, ServeConfig, load_engine
from edge.flows.cloud.repository import Batching, is_repository, servable, write_repository
from partition.kserve import TOKEN_ENV
from partition.split import read_split_yaml

__all__ = ["Batching", "EdgeCloudServer", "ServeOptions", "chosen_serving", "default_processes",
           "export_repository", "resolve_tail", "resolve_tails", "serve", "serve_forever",
           "split_serving"]

MODEL_NAME = "tail"
DEFAULT_MAX_BODY = 64 * 2**20
_READY = re.compile(r"serving .* on http://(?P<host>\S+):(?P<port>\d+)/v2 and grpc "
                    r"\S+:(?P<grpc>\d+)")


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeOptions:
    """How serve-cloud serves (the CLI's flags; ``token`` None with ``insecure_no_auth``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int = 8001
    token: str | None = None
    insecure_no_auth: bool = False
    max_body: int = DEFAULT_MAX_BODY
    max_json: int = 16 * 2**20
    max_inflight: int = 256
    header_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    threads: int = 0
    workers: int = 0
    processes: int = 1
    batching: Batching = field(default_factory=Batching)
    metrics_port: int | None = None
    verbose: bool = False
    source: str = "defaults"  # where batching and processes came from (said at start)
    engine: str = DEFAULT_ENGINE  # edge.flows.cloud.engine.ENGINES


def default_processes() -> int:
    """Server processes when neither the flags nor the cloud profile say: the cores, at most 8
    (one Python process serves on about one core)."""
    return max(1, min(os.cpu_count() or 1, 8))


def split_serving(split: str | os.PathLike[str]) -> ServingDocument | None:
    """The serving settings split.yaml recorded from its cloud profile, if any."""
    p = Path(split)
    if not (p / "split.yaml").is_file():
        return None
    return read_split_yaml(p).serving


def chosen_serving(split: str | os.PathLike[str], max_batch: int | None,
                   max_delay_ms: float | None, processes: int | None) -> tuple[Batching, int, str]:
    """Batching and processes: each flag given, else the split's cloud profile, else the
    defaults; and where they came from."""
    only_regular_files(Path(split), "split folder")
    recorded = split_serving(split)
    base = recorded or ServingDocument()
    batching = Batching(max_batch=base.max_batch if max_batch is None else max_batch,
                        max_delay_ms=base.max_delay_ms if max_delay_ms is None else max_delay_ms)
    count = processes or base.processes or default_processes()
    given = [name for name, value in (("--max-batch", max_batch), ("--max-delay", max_delay_ms),
                                      ("--processes", processes)) if value is not None]
    rest = f"cloud profile {recorded.cloud}" if recorded and recorded.cloud else "defaults"
    source = ", ".join(given + ([] if len(given) == 3 else [rest]))
    return batching, count, source


def resolve_token(token: str | None, token_file: str | os.PathLike[str] | None) -> str | None:
    """The token from the argument, the token file or $EDGE_CLOUD_TOKEN (in that order)."""
    if token is None and token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise UsageError("the bearer token is empty")
    return token


def serve_forever(split: str | os.PathLike[str], options: ServeOptions) -> int:
    """Serve the tails of ``split`` in this process until SIGINT/SIGTERM."""
    _check_auth(options)
    only_regular_files(Path(split), "split folder")
    for port in (options.port, options.grpc_port):
        _check_listen(options.host, port)
    engine = load_engine(options.engine)  # not before: MLServer's gRPC messages
    with tempfile.TemporaryDirectory(prefix="edge-serve-") as tmp:
        repository = Path(split)
        if is_repository(repository):
            repository = servable(repository, Path(tmp))
        else:
            repository = Path(tmp) / "models"
            served = export_repository(split, repository, options.batching, _threads(options))
            _say_batching(served, options)
        engine.serve(ServeConfig(repository=repository, host=options.host, port=options.port,
                                 grpc_port=options.grpc_port, limits=_limits(options),
                                 workers=options.workers, metrics_port=options.metrics_port,
                                 verbose=options.verbose, processes=options.processes))
    return 0


def _threads(options: ServeOptions) -> int:
    """onnxruntime threads per inference: asked, else the cores shared by the processes."""
    if options.threads or options.processes <= 1:
        return options.threads
    return max(1, (os.cpu_count() or 1) // options.processes)


def export_repository(split: str | os.PathLike[str], out: str | os.PathLike[str],
                      batching: Batching | None = None, threads: int = 0) -> list[ServedTail]:
    """Write the model repository of every tail (see :mod:`edge.flows.cloud.repository`)."""
    only_regular_files(Path(split), "split folder")
    try:
        tails = resolve_tails(split)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    for name, path in tails.items():
        _refuse_unservable(name, path)
    return write_repository(tails, Path(out), batching or Batching(), threads)


def _refuse_unservable(name: str, path: Path) -> None:
    """A tail ONNX Runtime cannot load, or with a tensor KServe v2 cannot carry, is refused
    before anything is written."""
    odd = ort_refusal(path)
    if odd is None:
        try:
            tensor_specs(onnx.load(str(path), load_external_data=False))
        except ValueError as exc:
            odd = str(exc)
    if odd:
        raise UsageError(f"tail {name!r} ({path}): {odd}")


def resolve_tail(path: str | os.PathLike[str]) -> Path:
    """The tail ONNX of a split directory, or the ONNX file itself."""
    p = Path(path)
    p = p / "tail.onnx" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"no tail model at {p}")
    return p


def resolve_tails(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Served name -> tail ONNX: every cut of a split directory ("tail" is the chosen one)."""
    p = Path(path)
    tails = {MODEL_NAME: resolve_tail(p)} if not p.is_dir() or (p / "tail.onnx").is_file() else {}
    if p.is_dir() and (p / "split.yaml").is_file():
        for cut in read_split_yaml(p).cuts:
            if cut.model and cut.split.tail is not None:
                tails.setdefault(cut.model, cut.split.tail)
    if not tails:
        raise FileNotFoundError(f"no tail model in {p}")
    return tails


def _check_listen(host: str, port: int) -> None:
    """One line (exit 2) when ``host:port`` cannot be listened on: in use, or not this host's
    address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot listen on {host}:{port}: {why}; choose another --port, "
                         "--grpc-port or --bind") from None


def _check_auth(options: ServeOptions) -> None:
    if options.token is None and not options.insecure_no_auth:
        raise UsageError(f"no token configured (--token-file or ${TOKEN_ENV}); pass "
                         "--insecure-no-auth to serve without authentication")
    if options.token is None:
        print("WARNING: serving WITHOUT authentication (--insecure-no-auth)", file=sys.stderr)


def _say_batching(served: list[ServedTail], options: ServeOptions) -> None:
    print(f"batching up to {options.batching.max_batch}, {options.batching.max_delay_ms:g} ms; "
          f"{options.processes} process{'es' if options.processes > 1 else ''} "
          f"({options.source})", file=sys.stderr)
    for tail in served:
        if tail.max_batch > 1:
            print(f"{tail.name}: dynamic batching up to {tail.max_batch}, waiting at most "
                  f"{options.batching.max_delay_ms:g} ms", file=sys.stderr)
        else:
            print(f"{tail.name}: unbatched ({tail.note})", file=sys.stderr)


def _limits(options: ServeOptions) -> Any:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    connections = max(16, min(soft - 64, 65536) if soft > 0 else 65536)
    return Limits(token=options.token, max_body=options.max_body,
                  max_json=min(options.max_json, options.max_body),
                  max_inflight=options.max_inflight, header_timeout_s=options.header_timeout_s,
                  read_timeout_s=options.read_timeout_s, max_connections=connections)


# ---------------------------------------------------------------- in a child process


@dataclass(frozen=True, slots=True)
class EdgeCloudServer:
    """A serve-cloud child process: its address and ports, and how to stop it."""

    process: subprocess.Popen[str]
    host: str
    port: int
    grpc_port: int
    token: str | None

    @property
    def url(self) -> str:
        """host:port of the REST side, as tritonclient expects it."""
        return f"{self.host}:{self.port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC side."""
        return f"{self.host}:{self.grpc_port}"

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def serve(split: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0, *,
          token: str | None = None, token_file: str | os.PathLike[str] | None = None,
          insecure_no_auth: bool = False, max_body: int = DEFAULT_MAX_BODY,
          threads: int = 0, grpc_port: int = 0, batching: Batching | None = None,
          startup_s: float = 120.0, preexec: Any = None, **options: Any) -> EdgeCloudServer:
    """Start serve-cloud in a child process (``python -m edge.flows.serve_cloud``); wait until
    ready."""
    chosen = ServeOptions(host=host, port=port, grpc_port=grpc_port,
                          token=resolve_token(token, token_file),
                          insecure_no_auth=insecure_no_auth, max_body=max_body, threads=threads,
                          batching=batching or Batching(), **options)
    _check_auth(chosen)
    if not Path(split).exists():
        raise UsageError(f"no tail model in {split}")
    child = subprocess.Popen([sys.executable, "-m", "edge.flows.serve_cloud"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    assert child.stdin is not None
    child.stdin.write(json.dumps({"split": str(split), **asdict(chosen)}) + "\n")
    child.stdin.flush()  # stdin stays open: the child stops when it closes (we exit or die)
    return _wait_ready(child, chosen.token, startup_s)


def _wait_ready(child: subprocess.Popen[str], token: str | None,
                startup_s: float) -> EdgeCloudServer:
    found: list[re.Match[str]] = []
    lines: list[str] = []

    def read() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.append(line)
            if not found and (match := _READY.search(line)):
                found.append(match)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(0)
    deadline = time.monotonic() + startup_s
    while not found and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not found:
        child.kill()
        raise RuntimeError(f"serve-cloud did not start: {''.join(lines)[-2000:]}")
    m = found[0]
    return EdgeCloudServer(child, m["host"], int(m["port"]), int(m["grpc"]), token)


def main() -> int:
    """The child's entry point: options as one JSON line on stdin; stop when stdin closes."""
    doc = json.loads(sys.stdin.readline())

    def watch() -> None:
        sys.stdin.read()
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=watch, daemon=True).start()
    split = doc.pop("split")
    doc["batching"] = Batching(**doc["batching"])
    return serve_forever(split, ServeOptions(**doc))


if __name__ == "__main__":
    sys.exit(main())
