"""MLServer, started with edge's front layer: REST behind the guard, gRPC behind the token.

MLServer's own pieces do the serving: its model registry loads edge's :class:`TailRuntime` from
the repository's model-settings.json, its data plane runs inference with adaptive batching (and
parallel workers when asked), its FastAPI app answers health, metadata and the repository API,
its gRPC servicer the same over gRPC. edge replaces two things: the uvicorn configuration (the
guarded protocol, the guard as the outer ASGI app, sockets bound here so port 0 works) and the
gRPC server's interceptors, options and ``ModelInfer`` (binary tensors, see :mod:`.rpc`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

import uvicorn
import uvloop
from grpc import aio
from mlserver import MLServer
from mlserver.grpc.dataplane_pb2_grpc import add_GRPCInferenceServiceServicer_to_server
from mlserver.grpc.model_repository import ModelRepositoryServicer
from mlserver.grpc.model_repository_pb2_grpc import add_ModelRepositoryServiceServicer_to_server
from mlserver.grpc.server import GRPCServer
from mlserver.rest.server import RESTServer
from mlserver.settings import Settings

from edge.flows.cloud.engine import ServeConfig
from edge.flows.cloud.guard import Guard, protocol
from edge.flows.cloud.mlserver.batching import Arrivals, eager
from edge.flows.cloud.mlserver.dataplane import Inferencer
from edge.flows.cloud.mlserver.rpc import EdgeServicer, TokenInterceptor


class _Rest(RESTServer):
    """MLServer's REST server on a socket bound here, behind the guard and guarded protocol."""

    def __init__(self, engine: ServeConfig, inferencer: Inferencer, grpc_port: int,
                 arrivals: Arrivals, *args: Any) -> None:
        super().__init__(*args)
        self.socket = _bind(engine.host, engine.port, reuse_port=engine.processes > 1)
        self.port = int(self.socket.getsockname()[1])
        guard = Guard(self._app, inferencer.rest, engine.limits, grpc_port, arrivals)
        config = uvicorn.Config(guard, http=protocol(engine.limits), lifespan="off",
                                log_level="info" if engine.verbose else "warning",
                                access_log=engine.verbose, timeout_keep_alive=5, backlog=4096,
                                proxy_headers=False, server_header=False)
        self._server = uvicorn.Server(config)

    async def start(self) -> None:
        await self._server.serve(sockets=[self.socket])


class _Grpc(GRPCServer):
    """MLServer's gRPC server with the token interceptor and edge's ``ModelInfer``."""

    def __init__(self, engine: ServeConfig, inferencer: Inferencer, *args: Any) -> None:
        super().__init__(*args)
        self._engine, self._inferencer = engine, inferencer
        self.port = 0

    def _create_server(self) -> Any:
        limits = self._engine.limits
        interceptors = [TokenInterceptor(limits.token)] if limits.token else []
        size = limits.max_body
        self._server = aio.server(interceptors=interceptors,
                                  maximum_concurrent_rpcs=limits.max_inflight,
                                  options=[("grpc.max_receive_message_length", size),
                                           ("grpc.max_send_message_length", size)])
        add_GRPCInferenceServiceServicer_to_server(
            EdgeServicer(self._data_plane, self._model_repository_handlers, self._inferencer),
            self._server)
        add_ModelRepositoryServiceServicer_to_server(
            ModelRepositoryServicer(self._model_repository_handlers), self._server)
        self.port = self._server.add_insecure_port(f"{self._engine.host}:"
                                                   f"{self._engine.grpc_port}")
        return self._server

    async def start(self) -> None:
        await self._server.start()
        await self._server.wait_for_termination()


class EdgeMLServer(MLServer):
    """MLServer whose REST and gRPC servers are edge's subclasses."""

    def __init__(self, settings: Settings, engine: ServeConfig) -> None:
        self._engine = engine
        self._arrivals = Arrivals()
        super().__init__(settings)

    def _create_model_registry(self) -> Any:
        registry = super()._create_model_registry()
        registry._on_model_load.append(eager(self._arrivals))  # after load_batching
        return registry

    def _create_servers(self) -> None:
        inferencer = Inferencer(self._data_plane)
        common = (self._settings, self._data_plane, self._model_repository_handlers)
        self._grpc_server = _Grpc(self._engine, inferencer, *common)
        self._grpc_server._create_server()
        self._rest_server = _Rest(self._engine, inferencer, self._grpc_server.port,
                                  self._arrivals, *common)
        self._kafka_server = None

    async def start(self, models_settings: list[Any] | None = None) -> None:
        """Load the repository's models, then serve (the ready line goes to stderr)."""
        models = await self._model_repository.list()
        for model in models:
            await self._model_registry.load(model)
        servers = [self._rest_server.start(), self._grpc_server.start()]
        if self._metrics_server:
            servers.append(self._metrics_server.start())
        running = asyncio.gather(*servers)
        await self._announce(sorted(m.name for m in models))
        await running

    async def _announce(self, names: list[str]) -> None:
        server = self._rest_server._server
        while not server.started:
            await asyncio.sleep(0.01)
        if self._engine.ready is not None:
            self._engine.ready.set()
            return
        host = self._engine.host
        print(f"serving {', '.join(repr(n) for n in names)} on http://{host}:"
              f"{self._rest_server.port}/v2 and grpc {host}:{self._grpc_server.port}",
              file=sys.stderr, flush=True)


def _bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def settings(engine: ServeConfig) -> Settings:
    """MLServer's server settings for ``engine``."""
    return Settings(debug=False, host=engine.host, http_port=engine.port,
                    grpc_port=engine.grpc_port, parallel_workers=engine.workers,
                    metrics_endpoint="/metrics" if engine.metrics_port else None,
                    metrics_port=engine.metrics_port or 8082,
                    model_repository_root=str(engine.repository),
                    load_models_at_startup=True, server_name="edge-cloud",
                    grpc_max_message_length=engine.limits.max_body)


async def _serve(engine: ServeConfig) -> None:
    server = EdgeMLServer(settings(engine), engine)
    # MLServer warns at every load that batching skips streaming inference (edge's is unary)
    quiet = {"mlserver": logging.ERROR, "uvicorn": logging.WARNING,
             "uvicorn.error": logging.WARNING}
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(logging.INFO if engine.verbose else level)
    await server.start()


def serve_here(engine: ServeConfig) -> None:
    """Serve in this process."""
    uvloop.run(_serve(engine))
