"""uvicorn's httptools protocol with the limits uvicorn lacks: header-read time, header size, a hard
connection ceiling; and the open-file budget those connections are sized against.

- **Header-read timeout** (slowloris): a timer runs from the moment a connection opens, or from the
  first byte of a request on an idle keep-alive connection, until that request's headers are complete.
  A client still sending headers when it fires gets ``408 Request Timeout`` and is disconnected.
- **Header size**: request line plus headers past ``http_max_header_bytes`` get ``431`` and a close.
- **Connections**: ``limit_concurrency`` (uvicorn's own check, counting open connections and running
  requests) answers 503 past ``http_max_connections``. That answer needs the request's headers; past
  twice the cap a new connection is closed at once, so a flood of silent connections cannot use up
  the process's file descriptors before the header timer frees them.

``bounded_protocol(limits, ports)`` returns the class for ``uvicorn.Config(http=...)`` and the cap in
force: the soft RLIMIT_NOFILE is raised to the hard one first, and the cap lowered (with a warning) when
``ports`` HTTP servers at twice the cap would not fit in it beside ``FD_RESERVE`` other descriptors.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from servelab.config.settings import LimitSettings

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux
    resource = None  # type: ignore[assignment]

__all__ = ["FD_RESERVE", "BoundedHttpToolsProtocol", "bounded_protocol", "connection_cap", "raise_open_file_limit"]

log = logging.getLogger("servelab.server")

#: descriptors kept for everything but HTTP connections (model files, gRPC, workers, logs)
FD_RESERVE = 256


class _HeadersTooLarge(Exception):
    pass


class _OnePer10s(logging.Filter):
    """uvicorn logs "Exceeded concurrency limit." for every refused request: under a flood, one line per
    10 s (with how many were refused) keeps the log, and the loop writing it, out of the flood."""

    def __init__(self) -> None:
        super().__init__()
        self._last = 0.0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Exceeded concurrency limit.":
            return True
        now = time.monotonic()
        if now - self._last < 10.0:
            self._dropped += 1
            return False
        if self._dropped:
            record.msg = f"Exceeded concurrency limit ({self._dropped + 1} requests answered 503 in 10 s)."
        self._last, self._dropped = now, 0
        return True


class _HeadWithBody:
    """One response's transport: the status line and headers, which uvicorn writes on its own as soon as
    ``http.response.start`` arrives, are held and go out in the same ``write()`` as the first body bytes.

    Two writes cost two send() calls and, on loopback, two wake-ups of the client: in a py-spy profile of
    the loop under perf_analyzer (add_sub, c=1) the two writes were a third of its samples; held together,
    inline add_sub at c=16 answered ~10% more (RESULTS.md, vs_triton commentary of 2026-12-07). Held only
    for a response with a content-length and a body to come; a chunked or empty one, or the answer to HEAD
    (uvicorn writes no body for it), goes out as uvicorn writes it. Once the head is out the cycle gets the
    plain transport back.
    """

    __slots__ = ("_cycle", "_head", "_transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._transport = transport
        self._head = b""

    def write(self, data: bytes) -> None:
        cycle = self._cycle
        if self._head:
            data, self._head = self._head + data, b""
            cycle.transport = self._transport
        elif cycle.response_started:  # the head (a ``100 Continue`` comes before the response starts)
            if not cycle.chunked_encoding and cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD":
                self._head = data
                return
            cycle.transport = self._transport
        self._transport.write(data)

    def close(self) -> None:
        if self._head:  # the app failed between start and body: what uvicorn would have sent, then close
            self._transport.write(self._head)
            self._head = b""
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol plus the header timer, header size cap and hard connection ceiling."""

    header_timeout_s: float = 10.0
    max_header_bytes: int = 64 * 1024
    #: connections past this are closed without an answer (twice the 503 cap)
    hard_connection_cap: int = 2000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._headers_too_large = False

    # ----- connection -----
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.hard_connection_cap:
            log.warning("HTTP connection refused: %d open, the ceiling is %d", len(self.connections),
                        self.hard_connection_cap)
            self.connections.discard(self)
            transport.abort()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_timer()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)

    # ----- parser callbacks -----
    def on_message_begin(self) -> None:
        self._header_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a request to answer (not one refused with a 503 here)
            self.cycle.transport = _HeadWithBody(self.cycle, self.transport)  # type: ignore[assignment]

    def send_400_response(self, msg: str) -> None:
        if self._headers_too_large:
            self._close_with(431, f"request headers are larger than {self.max_header_bytes} bytes")
        else:
            super().send_400_response(msg)

    # ----- helpers -----
    def _count_header_bytes(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.max_header_bytes:
            self._headers_too_large = True
            raise _HeadersTooLarge  # httptools turns it into HttpParserError: send_400_response answers

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        log.info("HTTP client %s sent no complete request headers within %.0f s: disconnected", self.client,
                 self.header_timeout_s)
        self._close_with(408, f"request headers not received within {self.header_timeout_s:g} s")

    def _close_with(self, status: int, message: str) -> None:
        body = message.encode()
        head = b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        self.transport.write(STATUS_LINE[status] + head % len(body) + body)
        self.transport.close()


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit where allowed; return the soft limit in force."""
    if resource is None:  # pragma: no cover
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(configured: int, ports: int, open_files: int) -> int:
    """``configured``, lowered so that ``ports`` servers at twice the cap fit beside FD_RESERVE."""
    fitting = max(1, (open_files - FD_RESERVE) // (2 * ports))
    return min(configured, fitting)


def bounded_protocol(limits: LimitSettings, ports: int) -> tuple[type[BoundedHttpToolsProtocol], int]:
    """(protocol class for ``uvicorn.Config(http=...)``, connection cap per port for ``limit_concurrency``)."""
    return _bounded(limits.http_header_timeout_s, limits.http_max_header_bytes, limits.http_max_connections, ports)


@functools.cache  # one class and one warning per configuration, however many ports ask
def _bounded(
    header_timeout_s: float, max_header_bytes: int, max_connections: int, ports: int
) -> tuple[type[BoundedHttpToolsProtocol], int]:
    open_files = raise_open_file_limit()
    logging.getLogger("uvicorn.error").addFilter(_OnePer10s())
    cap = connection_cap(max_connections, ports, open_files)
    if cap < max_connections:
        log.warning(
            "limits.http_max_connections %d lowered to %d per HTTP port: the open-file limit is %d "
            "(raise it with ulimit -n)", max_connections, cap, open_files,
        )
    attributes = {"header_timeout_s": header_timeout_s, "max_header_bytes": max_header_bytes,
                  "hard_connection_cap": 2 * cap}
    return type("ConfiguredHttpToolsProtocol", (BoundedHttpToolsProtocol,), attributes), cap
