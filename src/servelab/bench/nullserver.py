"""A null endpoint: answers every HTTP request (or gRPC ModelInfer) at once with a constant body
(model metadata for ``GET /v2/models/...``, server metadata for ``GET /v2``).

Its ``main()`` (``--protocol http|grpc``) binds 127.0.0.1 port 0 and
prints ``PORT <n>``. ``NullServer`` starts it in its own process, polls its readiness and stops it by
PID. The bench measures its own ceiling against it: whatever rate the generator reaches here is the
most it can offer any real server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.request

__all__ = ["NULL_INFER_BODY", "NullServer"]

NULL_INFER_BODY = b'{"model_name":"null","model_version":"1","outputs":[]}'
_MODEL_METADATA = (
    b'{"name":"null","versions":["1"],"platform":"null","inputs":[{"name":"INPUT0","datatype":"FP32",'
    b'"shape":[-1,4]}],"outputs":[]}'
)
_SERVER_METADATA = b'{"name":"null","version":"0","extensions":[]}'


def _response(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
    return head + b"\r\n\r\n" + body


_RESPONSE = _response(NULL_INFER_BODY)
_GET_RESPONSES = {b"/v2": _response(_SERVER_METADATA)}
_GET_MODEL_RESPONSE = _response(_MODEL_METADATA)


def _reply_for(request_line: bytes) -> bytes:
    """Infer body for every POST; metadata for ``GET /v2`` and ``GET /v2/models/...``."""
    if not request_line.startswith(b"GET "):
        return _RESPONSE
    path = request_line.split(b" ", 2)[1]
    if path.startswith(b"/v2/models/") and not path.endswith((b"/ready", b"/stats")):
        return _GET_MODEL_RESPONSE
    return _GET_RESPONSES.get(path, _RESPONSE)


class _NullHttp(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive: read headers and Content-Length body, answer the constant."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buf += data
        replies: list[bytes] = []
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                break
            length = 0
            lines = bytes(self._buf[:end]).split(b"\r\n")
            for line in lines[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value.strip() or 0)
            if len(self._buf) < end + 4 + length:
                break
            del self._buf[: end + 4 + length]
            replies.append(_reply_for(lines[0]))
        if replies and self._transport is not None:
            self._transport.write(b"".join(replies))


async def _serve_http() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_NullHttp, "127.0.0.1", 0, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


async def _serve_grpc() -> None:
    import grpc
    import grpc.aio

    from servelab.protocol import grpc_service_pb2

    reply = grpc_service_pb2.ModelInferResponse(model_name="null", model_version="1").SerializeToString()

    async def infer(_request: bytes, _context: object) -> bytes:
        return reply

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService",
        {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"PORT {port}", flush=True)
    await server.wait_for_termination()


class NullServer:
    """Context manager: a null endpoint in a child process; ``url`` once entered."""

    def __init__(self, protocol: str = "http", start_timeout_s: float = 20.0) -> None:
        if protocol not in ("http", "grpc"):
            raise ValueError(f"null server protocol must be 'http' or 'grpc', got {protocol!r}")
        self.protocol = protocol
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> NullServer:
        cmd = [
            sys.executable,
            "-c",
            "from servelab.bench.nullserver import main; main()",
            "--protocol",
            self.protocol,
        ]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.__exit__(None, None, None)
            raise RuntimeError(f"null server did not start (printed {line!r})")
        port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{port}" if self.protocol == "http" else f"127.0.0.1:{port}"
        self._wait_ready(port)
        return self

    def _wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            try:
                if self.protocol == "http":
                    with urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=1.0) as resp:
                        if resp.status == 200:
                            return
                else:
                    import grpc

                    with grpc.insecure_channel(self.url) as ch:
                        grpc.channel_ready_future(ch).result(timeout=1.0)
                        return
            except Exception:
                time.sleep(0.02)  # poll interval while the child binds; readiness is the check above
        raise RuntimeError(
            f"null {self.protocol} server on port {port} not ready in {self.start_timeout_s} s"
        )

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5.0)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_http() if args.protocol == "http" else _serve_grpc())


if __name__ == "__main__":
    main()
