"""The serving engine's seam: an ``Engine`` serves a model repository (written by
:mod:`.repository`) behind edge's front layer until SIGINT/SIGTERM.

``ENGINES`` names each implementation's module, imported only when serving: an engine's
framework (MLServer for the first, :mod:`edge.flows.cloud.mlserver`) is imported in its own
folder and nowhere else (an import-linter contract), so serve-cloud's options, the repository
export and ``edge --help`` never load it (``edge serve-cloud`` still asks for the whole
``cloud`` extra up front: its front layer needs uvicorn and orjson either way). Another engine
(Triton, OpenVINO Model Server, Ray Serve) is one more folder exposing ``ENGINE`` and one more
entry here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edge.core.errors import UsageError

__all__ = ["DEFAULT_ENGINE", "ENGINES", "Engine", "Limits", "ServeConfig", "load_engine"]

#: engine name -> the module that holds its ``ENGINE``
ENGINES = {"mlserver": "edge.flows.cloud.mlserver"}
DEFAULT_ENGINE = "mlserver"


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """The front layer's limits (see :mod:`edge.flows.cloud.guard`)."""

    token: str | None
    max_body: int = 64 * 2**20
    max_json: int = 16 * 2**20
    max_inflight: int = 256
    header_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    max_connections: int = 960
    max_buffered: int = 192 * 2**20  # bodies held at once (503 beyond): memory stays bounded


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeConfig:
    """Where and how an engine serves a repository."""

    repository: Path
    host: str
    port: int
    grpc_port: int
    limits: Limits
    workers: int = 0
    metrics_port: int | None = None
    verbose: bool = False
    processes: int = 1  # servers sharing the ports (SO_REUSEPORT)
    ready: Any = None  # a multiprocessing Event a server process sets instead of announcing


class Engine(Protocol):
    """Serves every model of a repository over KServe v2 REST and gRPC, behind the limits."""

    name: str

    def serve(self, config: ServeConfig) -> None:
        """Serve until SIGINT/SIGTERM; announce ``serving ... on http://HOST:PORT/v2 and grpc
        HOST:PORT`` on stderr once ready."""
        ...


def load_engine(name: str = DEFAULT_ENGINE) -> Engine:
    """The engine called ``name`` (its framework imported now, not before)."""
    if name not in ENGINES:
        raise UsageError(f"unknown serving engine {name!r}; use one of {', '.join(ENGINES)}")
    engine: Engine = importlib.import_module(ENGINES[name]).ENGINE
    return engine
