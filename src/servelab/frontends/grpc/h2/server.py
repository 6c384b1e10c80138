"""Start the HTTP/2 door: the same services and interceptors as ``start_grpc_server``, on asyncio directly.

``server = await start_h2_server(dataplane, "127.0.0.1", 0)``; ``server.port`` is the port bound;
``await server.stop(grace)`` (as grpc.aio.Server.stop) sends GOAWAY to every connection and closes them after ``grace`` seconds.
``ssl`` (an SSLContext with ALPN h2, ``auth.tls.grpc_ssl_context``) serves TLS.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from ssl import SSLContext

import grpc.aio

from servelab.config.settings import LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.grpc.h2.calls import MethodTable
from servelab.frontends.grpc.h2.connection import H2Connection
from servelab.frontends.grpc.rollout_servicer import RolloutServicer
from servelab.frontends.grpc.servicer import HealthServicer, InferenceServicer
from servelab.frontends.grpc.tfserving_servicer import ModelServicer, PredictionServicer
from servelab.frontends.shared_memory import SharedMemory
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2_grpc, rollout_pb2_grpc
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving import TfServingRepository

__all__ = ["H2Server", "start_h2_server"]


class H2Server:
    """A listening HTTP/2 gRPC door and its open connections."""

    def __init__(self, server: asyncio.Server, connections: set[H2Connection]) -> None:
        self._server = server
        self._connections = connections
        self.port = int(server.sockets[0].getsockname()[1])

    async def stop(self, grace: float | None = None) -> None:
        self._server.close()
        for connection in list(self._connections):
            connection.close()
        if grace:
            await asyncio.sleep(0)
            deadline = asyncio.get_running_loop().time() + grace
            while any(c.transport and not c.transport.is_closing() for c in self._connections):
                if asyncio.get_running_loop().time() >= deadline:
                    break
                await asyncio.sleep(0.01)
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.abort()
        await self._server.wait_closed()


async def start_h2_server(
    dataplane: DataPlane,
    host: str,
    port: int,
    *,
    max_message_bytes: int = 64 * 1024 * 1024,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    limits: LimitSettings | None = None,
    tfserving: TfServingRepository | None = None,
    shared_memory: SharedMemory | None = None,
    reuse_port: bool = False,
    ssl: SSLContext | None = None,
) -> H2Server:
    """Bind ``host:port`` (0 picks a free port) and serve the gRPC services there. OSError when it cannot bind."""
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be positive; got {max_message_bytes}")
    limits = limits if limits is not None else LimitSettings()
    table = MethodTable(interceptors)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceServicer(dataplane, limits=limits, shared_memory=shared_memory), table)
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(dataplane), table)
    rollout_pb2_grpc.add_RolloutServiceServicer_to_server(RolloutServicer(dataplane), table)
    tfs.prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(dataplane, max_elements=max_message_bytes), table)
    tfs.model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(dataplane, tfserving), table)
    connections: set[H2Connection] = set()

    def protocol() -> H2Connection:
        connection = _Tracked(table, connections, max_message_bytes=max_message_bytes,
                              max_concurrent_streams=limits.grpc_max_concurrent_streams)  # fmt: skip
        return connection

    server = await asyncio.get_running_loop().create_server(
        protocol, host, port, reuse_port=reuse_port or None, family=socket.AF_UNSPEC, ssl=ssl)
    return H2Server(server, connections)


class _Tracked(H2Connection):
    """A connection that keeps itself in its server's set while open."""

    def __init__(self, table: MethodTable, connections: set[H2Connection], **kwargs: int) -> None:
        super().__init__(table, **kwargs)
        self._connections = connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        super().connection_lost(exc)
