"""gRPC limits: the server advertises its concurrent-stream limit in its HTTP/2 SETTINGS (read here
from the raw connection preface, so the test does not depend on a client's stream scheduling)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from servelab.config.settings import ControlMode, LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry
from servelab.frontends.grpc import bound_port, start_grpc_server
from servelab.repository import ModelRepository

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME = 0x4
MAX_CONCURRENT_STREAMS = 0x3


async def _server_settings(port: int) -> dict[int, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + struct.pack(">I", 0)[1:] + bytes([SETTINGS_FRAME, 0]) + struct.pack(">I", 0))
        await writer.drain()
        while True:  # the server's first frame is its SETTINGS; skip anything else defensively
            header = await asyncio.wait_for(reader.readexactly(9), timeout=30)
            length = int.from_bytes(header[:3], "big")
            payload = await reader.readexactly(length)
            if header[3] == SETTINGS_FRAME and not header[4] & 0x1:  # not an ACK
                return {key: value for key, value in struct.iter_unpack(">HI", payload)}
    finally:
        writer.close()


def test_the_grpc_server_advertises_its_stream_limit(tmp_path: Path) -> None:
    dataplane = DataPlane(ModelRegistry(ModelRepository([tmp_path]), ControlMode.EXPLICIT))

    async def run() -> dict[int, int]:
        server = await start_grpc_server(dataplane, "127.0.0.1", 0, limits=LimitSettings(grpc_max_concurrent_streams=7))
        try:
            return await _server_settings(bound_port(server))
        finally:
            await server.stop(0)

    try:
        settings = asyncio.run(run())
    finally:
        dataplane.close()
    assert settings.get(MAX_CONCURRENT_STREAMS) == 7, settings
