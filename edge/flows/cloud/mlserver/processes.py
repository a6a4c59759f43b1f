"""Several server processes on the same ports: the engine's answer to one Python process using
one core.

Each process is a whole engine (its models, batcher, REST and gRPC servers) listening with
SO_REUSEPORT, so the kernel spreads connections over them; onnxruntime threads are split between
them. This parent reserves the ports (a bound, not listening, SO_REUSEPORT socket each), starts
the processes (spawned: gRPC does not survive fork), announces once every one is ready, and
stops them all on SIGTERM/SIGINT or when one dies.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import time
from dataclasses import replace
from typing import Any

from edge.flows.cloud.engine import ServeConfig
from edge.flows.cloud.mlserver.server import serve_here


def run(engine: ServeConfig) -> None:
    """Serve until SIGINT/SIGTERM: here, or in ``engine.processes`` processes."""
    if engine.processes > 1:
        return run_many(engine)
    serve_here(engine)


def run_many(engine: ServeConfig) -> None:
    """Run ``engine.processes`` engines on one REST and one gRPC port until told to stop."""
    rest, grpc = _reserve(engine.host, engine.port), _reserve(engine.host, engine.grpc_port)
    ports = rest.getsockname()[1], grpc.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    events = [context.Event() for _ in range(engine.processes)]
    children = [context.Process(target=serve_here, daemon=True, args=(
        replace(engine, port=ports[0], grpc_port=ports[1], ready=event),))
        for event in events]
    stop = _stopper(children)
    for child in children:
        child.start()
    try:
        _wait_ready(children, events)
        names = sorted(p.parent.name for p in engine.repository.glob("*/model-settings.json"))
        print(f"serving {', '.join(repr(n) for n in names)} on http://{engine.host}:{ports[0]}"
              f"/v2 and grpc {engine.host}:{ports[1]} ({engine.processes} processes)",
              file=sys.stderr, flush=True)
        while all(child.is_alive() for child in children) and not stop:
            time.sleep(0.2)
    finally:
        _stop(children)
        rest.close()
        grpc.close()


def _reserve(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _stopper(children: list[Any]) -> list[int]:
    """A list that gets the signal number when SIGTERM/SIGINT arrives."""
    got: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return got


def _wait_ready(children: list[Any], events: list[Any]) -> None:
    while not all(event.is_set() for event in events):
        if not all(child.is_alive() for child in children):
            raise RuntimeError("a server process exited while starting")
        time.sleep(0.05)


def _stop(children: list[Any]) -> None:
    for child in children:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    for child in children:
        child.join(timeout=15)
        if child.is_alive():
            child.kill()
