"""How servelab's HTTP protocol puts a response on the wire: the head of a fixed-length response goes out
in the same write as its body (one segment, one wake-up of the client), while a streamed (chunked)
response still shows its head at once. A real uvicorn server on 127.0.0.1 with the configured protocol
class, a tiny ASGI app that pauses between ``http.response.start`` and the body, raw socket reads."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

from servelab.config.settings import LimitSettings
from servelab.frontends.http_protocol import bounded_protocol

PAUSE_S = 0.5
BODY = b"the body, after a pause"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    headers = [(b"content-type", b"text/plain")]
    if path != "/stream":
        headers.append((b"content-length", str(len(BODY)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await asyncio.sleep(PAUSE_S)
    if path == "/fail":
        raise RuntimeError("the app failed after starting its response")
    await send({"type": "http.response.body", "body": BODY})


async def _first_read_and_rest(port: int, method: str, path: str) -> tuple[bytes, bytes]:
    """(the first bytes the client receives, everything after them until the response is whole or closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    first = await asyncio.wait_for(reader.read(65536), 10)
    rest = b""
    while method != "HEAD" and BODY not in first + rest and not (rest and rest.endswith(b"0\r\n\r\n")):
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        if not chunk:
            break
        rest += chunk
    writer.close()
    return first, rest


async def _serve_and(check: Any) -> None:
    protocol, cap = bounded_protocol(LimitSettings(), 1)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=protocol, limit_concurrency=cap, log_level="critical", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        await check(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def test_a_fixed_length_head_goes_out_with_its_body() -> None:
    async def check(port: int) -> None:
        first, rest = await _first_read_and_rest(port, "GET", "/")
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(BODY), first  # one write, not two
        assert rest == b""

    asyncio.run(_serve_and(check))


def test_a_streamed_head_is_not_held_for_the_body() -> None:
    async def check(port: int) -> None:
        first, rest = await _first_read_and_rest(port, "GET", "/stream")
        assert b"transfer-encoding: chunked" in first and BODY not in first, first  # sent before the pause
        assert BODY in rest

    asyncio.run(_serve_and(check))


def test_a_head_request_still_gets_its_head() -> None:
    async def check(port: int) -> None:
        first, _ = await _first_read_and_rest(port, "HEAD", "/")
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\n") and BODY not in first

    asyncio.run(_serve_and(check))


def test_an_app_failing_after_its_start_sends_the_head_then_closes() -> None:
    async def check(port: int) -> None:
        first, rest = await _first_read_and_rest(port, "GET", "/fail")
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and BODY not in first + rest  # as uvicorn alone does
        assert b"content-length: %d" % len(BODY) in first

    asyncio.run(_serve_and(check))
