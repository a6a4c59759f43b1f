#!/usr/bin/env python
"""Many edge clients against serve-cloud: the engine (MLServer + edge's front layer) with dynamic
batching off and on, over REST and gRPC, and the hand-written server it replaced as a baseline.

    python bench/serve_load.py [--seconds 20] [--rounds 2] [--clients 1,8,32,64]
                               [--models digits,cnn] [--processes 0] [--max-batch 16]
                               [--baseline a328948] [--out bench/results/serve_load.json]

Models: the digits tail (`edge partition sample:digits`, the chosen or all-cloud cut) and a CNN
tail, the back half of a MobileNetV2 (random weights; inverted-residual stages from 32x28x28 on,
~150M MACs). The baseline server is the tree at ``--baseline`` (git archive into a temporary
folder, ``python -m edge.flows.serve_cloud``), REST only. Every server runs with a token, in its own
process(es), on loopback, all at once; the runs are interleaved round by round and the table
gives medians (the machine is shared). The clients (bench/serve_loadgen.py) run in this process.
Prints a markdown table; writes JSON with the machine under "provenance".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import provenance  # noqa: E402  (bench/ is this script's directory)
import serve_loadgen  # noqa: E402

TOKEN = "bench-token-not-secret"
BASELINE = "a328948cfb02ee3dad361992b114cd5eea1536ca"  # the last hand-written server
EDGE = str(Path(sys.executable).with_name("edge"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def digits_split(work: Path) -> Path:
    out = work / "digits-split"
    done = subprocess.run([EDGE, "partition", "sample:digits", "--profile", "rpi4", "--cloud",
                           "cloud-t4", "--bandwidth", "1000", "--rtt", "1", "-o", str(out)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"edge partition failed: {done.stderr}")
    return out


def cnn_tail(work: Path) -> Path:
    """The back half of a MobileNetV2 (stages 64..320 + head) as tail.onnx, batch 1."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int, t: int) -> nn.Module:
        hidden = cin * t
        layers = [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
                  nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                  nn.BatchNorm2d(hidden), nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False),
                  nn.BatchNorm2d(cout)]
        return _Residual(nn.Sequential(*layers), stride == 1 and cin == cout)

    class _Residual(nn.Module):
        def __init__(self, body: nn.Module, skip: bool) -> None:
            super().__init__()
            self.body, self.skip = body, skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.body(x) if self.skip else self.body(x)

    torch.manual_seed(0)
    stages, cin = [], 32
    for t, c, n, s in [(6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stages.append(block(cin, c, s if i == 0 else 1, t))
            cin = c
    model = nn.Sequential(*stages, nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280),
                          nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(1280, 1000)).eval()
    out = work / "cnn-split"
    out.mkdir()
    torch.onnx.export(model, torch.zeros(1, 32, 28, 28), str(out / "tail.onnx"),
                      input_names=["features"], output_names=["logits"], opset_version=17,
                      dynamo=False)
    return out


def _target(split: Path) -> tuple[str, Path]:
    """The served name clients call and its ONNX (the chosen tail, else the all-cloud cut)."""
    if (split / "tail.onnx").is_file():
        return "tail", split / "tail.onnx"
    from partition.split import read_split_yaml

    cut = next(c for c in read_split_yaml(split).cuts if c.kind == "all-cloud")
    assert cut.split.tail is not None
    return cut.model, cut.split.tail


def _feeds(onnx_path: Path) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        dtype = np.float32 if arg.type == "tensor(float)" else np.uint8
        feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


class Server:
    """One server process: the engine (``edge serve-cloud``) or the baseline tree."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.port, self.grpc_port = _free_port(), _free_port()
        argv = [a.replace("{port}", str(self.port)).replace("{grpc}", str(self.grpc_port))
                for a in argv]
        self.process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, cwd=cwd,
                                        stdout=subprocess.DEVNULL, text=True)
        assert self.process.stderr is not None
        seen = []
        for line in self.process.stderr:
            seen.append(line)
            if re.search(r"^serving ", line):
                break
        else:
            raise SystemExit(f"server did not start: {argv}\n{''.join(seen)[-3000:]}")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


def _engine(split: Path, token_file: Path, max_batch: int, delay_ms: float,
            processes: int) -> Server:
    """serve-cloud; ``processes`` 0: its own default (this host's cores)."""
    chosen = ["--processes", str(processes)] if processes else []
    return Server([EDGE, "serve-cloud", str(split), "--port", "{port}", "--grpc-port", "{grpc}",
                   "--token-file", str(token_file), "--max-batch", str(max_batch),
                   "--max-delay", str(delay_ms), *chosen], dict(os.environ))


def _baseline(tree: Path, split: Path, token_file: Path) -> Server:
    env = dict(os.environ, PYTHONPATH=str(tree))  # run from the tree: -m puts cwd first
    return Server([sys.executable, "-m", "edge.flows.serve_cloud", str(split), "--port", "{port}",
                   "--token-file", str(token_file)], env, cwd=tree)


def _baseline_tree(sha: str, work: Path) -> Path:
    tree = work / f"baseline-{sha[:7]}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _servers(args: argparse.Namespace, tree: Path, split: Path,
             token_file: Path) -> list[tuple[str, int, Server]]:
    """(kind, max batch, server) for the baseline, batching off and on, all running at once."""
    return [("baseline", 0, _baseline(tree, split, token_file)),
            ("engine", 1, _engine(split, token_file, 1, args.max_delay, args.processes)),
            ("engine", args.max_batch, _engine(split, token_file, args.max_batch,
                                               args.max_delay, args.processes))]


def measure(args: argparse.Namespace, work: Path,
            scaling: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The load table; ``scaling`` gets each tail's runtime batch scaling (no server running)."""
    token_file = work / "token"
    token_file.write_text(TOKEN)
    tree = _baseline_tree(args.baseline, work)
    splits = {"digits": digits_split, "cnn": cnn_tail}
    rows = []
    for name in args.models.split(","):
        split = splits[name](work)
        model, onnx_path = _target(split)
        scaling.extend(runtime_scaling(name, onnx_path, args.rounds))
        servers = _servers(args, tree, split, token_file)
        try:
            rows += _sweep(args, servers, name, model, _feeds(onnx_path))
        finally:
            for _, _, server in servers:
                server.close()
    return rows


BATCHES = (1, 8, 16, 32)


def runtime_scaling(name: str, onnx_path: Path, rounds: int) -> list[dict[str, Any]]:
    """onnxruntime alone, the tail made batch-dynamic: ms per sample at each batch size, 1 and
    all threads, interleaved rounds, medians — the most batching can gain on this CPU."""
    import statistics

    sessions = {t: _session(_dynamic(onnx_path), t) for t in (1, os.cpu_count() or 1)}
    feeds = _feeds(onnx_path)
    times: dict[tuple[int, int], list[float]] = {}
    for _ in range(max(3, rounds)):
        for (threads, session), batch in ((s, b) for s in sessions.items() for b in BATCHES):
            times.setdefault((threads, batch), []).append(_per_sample(session, feeds, batch))
    rows = [{"model": name, "threads": t, "batch": b,
             "per_sample_ms": round(statistics.median(v), 4)} for (t, b), v in times.items()]
    one = {r["threads"]: r["per_sample_ms"] for r in rows if r["batch"] == 1}
    for row in rows:
        row["gain_vs_batch_1"] = round(one[row["threads"]] / row["per_sample_ms"], 3)
        print(f"runtime {name}: {row['threads']} threads, batch {row['batch']}: "
              f"{row['per_sample_ms']} ms/sample ({row['gain_vs_batch_1']}x)", flush=True)
    return rows


def _dynamic(onnx_path: Path) -> bytes:
    import onnx

    model = onnx.load(str(onnx_path))
    del model.graph.value_info[:]  # inferred shapes hold the fixed batch
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model.SerializeToString()


def _session(model: bytes, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _per_sample(session: Any, feeds: dict[str, np.ndarray], batch: int) -> float:
    """Median ms per sample over ~64 samples' worth of runs at ``batch``."""
    import statistics

    batched = {k: np.repeat(v, batch, axis=0) for k, v in feeds.items()}
    session.run(None, batched)
    runs = []
    for _ in range(max(5, 64 // batch)):
        start = time.perf_counter()
        session.run(None, batched)
        runs.append((time.perf_counter() - start) * 1e3 / batch)
    return statistics.median(runs)


def _sweep(args: argparse.Namespace, servers: list[tuple[str, int, Server]], name: str,
           model: str, feeds: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Every client count; within it ``--rounds`` rounds of every server and protocol, in
    turn (the machine is shared: interleaved, medians reported)."""
    combos = [(kind, batch, server, protocol) for kind, batch, server in servers
              for protocol in (["http"] if kind == "baseline" else ["http", "grpc"])]
    rows = []
    for clients in (int(c) for c in args.clients.split(",")):
        runs: dict[int, list[dict[str, Any]]] = {k: [] for k in range(len(combos))}
        for _ in range(args.rounds):
            for k, (_, _, server, protocol) in enumerate(combos):
                runs[k].append(_one(args, server, model, feeds, protocol, clients))
        for k, (kind, batch, _, protocol) in enumerate(combos):
            row = {"model": name, "server": kind, "batching": batch if kind == "engine" else 0,
                   "protocol": protocol, "clients": clients, **_median(runs[k])}
            print(_line(row), flush=True)
            rows.append(row)
    return rows


def _one(args: argparse.Namespace, server: Server, model: str, feeds: dict[str, np.ndarray],
         protocol: str, clients: int) -> dict[str, Any]:
    if protocol == "http":
        request = serve_loadgen.http_request("127.0.0.1", server.port, model, feeds, TOKEN)
        target = ("127.0.0.1", server.port)
    else:
        request = serve_loadgen.grpc_request(model, feeds)
        target = ("127.0.0.1", server.grpc_port)
    got = serve_loadgen.load(protocol, target, request, TOKEN, clients, args.warmup,
                             args.seconds)
    time.sleep(0.3)
    return got


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median throughput and latency over the rounds; errors and resets summed."""
    import statistics

    out = {key: statistics.median(r[key] for r in runs)
           for key in ("throughput_rps", "p50_ms", "p99_ms")}
    out |= {key: sum(r[key] for r in runs) for key in ("requests", "errors", "resets")}
    return out | {"rounds": [r["throughput_rps"] for r in runs]}


HEADER = ("| model | server | max batch | protocol | clients | req/s | p50 ms | p99 ms | errors "
          "| resets |\n|---|---|---|---|---|---|---|---|---|---|")


def _line(row: dict[str, Any]) -> str:
    batch = {0: "-", 1: "off"}.get(row["batching"], str(row["batching"]))
    return (f"| {row['model']} | {row['server']} | {batch} | {row['protocol']} | "
            f"{row['clients']} | {row['throughput_rps']:,.0f} | {row['p50_ms']} | "
            f"{row['p99_ms']} | {row['errors']} | {row['resets']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--models", default="digits,cnn")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-delay", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=0,
                        help="engine server processes (0: serve-cloud's default)")
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/serve_load.json")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    print(HEADER)
    scaling: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        rows = measure(args, Path(tmp), scaling)
    doc = {"provenance": provenance.record("bench/serve_load.py", argv), "baseline": args.baseline,
           "seconds": args.seconds, "max_delay_ms": args.max_delay,
           "processes": args.processes or "serve-cloud's default", "rounds": args.rounds,
           "rows": rows, "runtime_batching": scaling}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
