"""The gRPC front-end in this process: DataPlane + ``start_grpc_server`` on 127.0.0.1 port 0, its event
loop in a background thread. For tests of the server object itself (``stop(grace)``, the bound port,
a servicer's error path, the message limit); tests of the protocol use the real ``servelab serve``
subprocess (harness.servers) instead.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from servelab.config.settings import ControlMode
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry
from servelab.frontends.grpc import bound_port, start_grpc_server
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.repository import ModelRepository

__all__ = ["GrpcTestServer", "make_dataplane", "running_grpc_server", "wait_grpc_ready"]


def make_dataplane(repo: Path, mode: ControlMode = ControlMode.EXPLICIT, load: list[str] | None = None) -> DataPlane:
    """A DataPlane over ``repo`` with ``load`` (default: every model) loaded, one core."""
    dataplane = DataPlane(ModelRegistry(ModelRepository([repo]), mode, cores=1))
    dataplane.startup(["*"] if load is None else load)
    return dataplane



class GrpcTestServer:
    """DataPlane + start_grpc_server in a background event loop; ``address`` is ``127.0.0.1:<port>``."""

    def __init__(
        self,
        repo: Path,
        *,
        mode: ControlMode = ControlMode.EXPLICIT,
        load: list[str] | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.dataplane = make_dataplane(repo, mode, load)
        self.max_message_bytes = max_message_bytes
        self.loop = asyncio.new_event_loop()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-test-server", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> GrpcTestServer:
        self._thread.start()
        if os.environ.get("SERVELAB_GRPC_DOOR", "h2") == "h2":  # the default door; SERVELAB_GRPC_DOOR=grpcio for the other
            from servelab.frontends.grpc.h2.server import start_h2_server

            door = asyncio.run_coroutine_threadsafe(
                start_h2_server(self.dataplane, "127.0.0.1", 0, max_message_bytes=self.max_message_bytes), self.loop
            ).result(timeout=30)
            self.server, self.port = door, door.port  # type: ignore[assignment]
        else:
            future = asyncio.run_coroutine_threadsafe(
                start_grpc_server(self.dataplane, "127.0.0.1", 0, max_message_bytes=self.max_message_bytes),
                self.loop,
            )
            self.server = future.result(timeout=30)
            self.port = bound_port(self.server)
        wait_grpc_ready(self.address)
        return self

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()
        self.dataplane.close()


def wait_grpc_ready(address: str, timeout_s: float = 30.0) -> None:
    """Wait for the channel to connect (gRPC's own connectivity event), then ServerReady must be true."""
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
        ready = pb_grpc.GRPCInferenceServiceStub(channel).ServerReady(pb.ServerReadyRequest(), timeout=timeout_s)
    if not ready.ready:
        raise RuntimeError(f"gRPC server at {address} is up but not ready")


@contextmanager
def running_grpc_server(repo: Path, **kwargs: object) -> Iterator[GrpcTestServer]:
    """A started :class:`GrpcTestServer` (keyword arguments as its constructor's), stopped on exit."""
    server = GrpcTestServer(repo, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
