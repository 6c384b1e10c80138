"""HTTP connection limits on a private server: header-read timeout (slowloris), keep-alive timeout,
header size, the open-connection cap (503 past it) and the hard ceiling (closed at once past twice it).

Raw sockets play the hostile clients; every wait is bounded by a socket timeout well past the limit
under test, so a loaded machine slows the test down but does not fail it.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.servers import HOST, ServerProcess, stopping

HEADER_TIMEOUT_S = 1.0
KEEP_ALIVE_S = 2
MAX_CONNECTIONS = 4
MAX_HEADER_BYTES = 4096
#: how long a test waits for the server to act on a limit of about a second
PATIENCE_S = 20.0
READY = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def limited(server_factory: Any) -> Iterator[ServerProcess]:
    with stopping(server_factory(
        "http-limits",
        "--http-header-timeout-s", str(HEADER_TIMEOUT_S),
        "--http-keep-alive-timeout-s", str(KEEP_ALIVE_S),
        "--http-max-connections", str(MAX_CONNECTIONS),
        "--http-max-header-bytes", str(MAX_HEADER_BYTES),
    )) as server:
        yield server


def _connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection((HOST, server.http_port), timeout=PATIENCE_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the socket timeout bounds the wait)."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _answer(sock: socket.socket, request: bytes = READY) -> bytes:
    """Send one request on a kept-alive connection and read its (small) response."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a response"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_client_trickling_headers_is_cut_off_with_408(limited: ServerProcess) -> None:
    with _connect(limited) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        started = time.monotonic()
        answer = b""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while time.monotonic() - started < PATIENCE_S:  # one header byte at a time, never finishing
                sock.sendall(b"X")
                sock.settimeout(0.2)
                with contextlib.suppress(TimeoutError):
                    answer = sock.recv(65536)
                    break
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert elapsed >= HEADER_TIMEOUT_S * 0.9
        sock.settimeout(PATIENCE_S)
        _read_until_closed(sock)  # the rest of the 408, then the close (bounded by the socket timeout)
    assert httpx.get(f"{limited.http_url}/v2/health/live", timeout=10).status_code == 200


def test_a_silent_connection_is_closed_after_the_header_timeout(limited: ServerProcess) -> None:
    with _connect(limited) as sock:
        started = time.monotonic()
        answer = _read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408")
        assert HEADER_TIMEOUT_S * 0.9 <= time.monotonic() - started < PATIENCE_S


def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout(limited: ServerProcess) -> None:
    with _connect(limited) as sock:
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert _read_until_closed(sock) == b""  # closed without a word: it was idle, not mid-request
        assert KEEP_ALIVE_S * 0.9 <= time.monotonic() - started < PATIENCE_S


def test_headers_past_the_size_limit_get_431(limited: ServerProcess) -> None:
    with _connect(limited) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * MAX_HEADER_BYTES) + b"\r\n\r\n")
        assert _read_until_closed(sock).startswith(b"HTTP/1.1 431")


def test_requests_past_the_connection_cap_get_503_and_the_cap_frees_up(limited: ServerProcess) -> None:
    held = [_connect(limited) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:
            assert _answer(sock).startswith(b"HTTP/1.1 200")  # established and counted
        with _connect(limited) as extra:
            assert _answer(extra).startswith(b"HTTP/1.1 503")
        held.pop().close()
        deadline = time.monotonic() + PATIENCE_S
        while True:  # the server notices the close on its next loop turn
            with _connect(limited) as sock:
                if _answer(sock).startswith(b"HTTP/1.1 200"):
                    break
            assert time.monotonic() < deadline, "the freed connection slot never came back"
    finally:
        for sock in held:
            sock.close()


@pytest.fixture
def patient(server_factory: Any) -> Iterator[ServerProcess]:
    """The same cap with a long header timeout, so that silent connections stay open while the test runs."""
    with stopping(server_factory("http-flood", "--http-max-connections", str(MAX_CONNECTIONS),
                                 "--http-header-timeout-s", str(PATIENCE_S * 3))) as server:
        yield server


def test_connections_past_twice_the_cap_are_closed_at_once(patient: ServerProcess) -> None:
    """A flood of silent connections does not hold descriptors until the header timer fires."""
    held = [_connect(patient) for _ in range(2 * MAX_CONNECTIONS)]
    try:
        with _connect(patient) as extra:
            started = time.monotonic()
            assert _read_until_closed(extra) == b""
            assert time.monotonic() - started < PATIENCE_S  # long before the header timer (3x that)
        # the silent ones were kept open: each is answered, 503 while more than the cap are open (each
        # 503 closes its connection, so later ones may get 200)
        statuses = [_answer(sock).split(b" ")[1] for sock in held]
        assert statuses[0] == b"503" and set(statuses) <= {b"200", b"503"}, statuses
    finally:
        for sock in held:
            sock.close()


def test_pipelined_requests_100_continue_and_connection_close_get_whole_answers(limited: ServerProcess) -> None:
    """The protocol sends each turn's writes as one: answers still arrive whole, in order, before a close."""
    with _connect(limited) as sock:
        sock.sendall(READY + READY)  # two requests in one segment: two answers, in order
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before both answers"
            data += chunk
        body = b'{"inputs": []}'
        sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        sock.sendall(body)
        rest = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
        while b"\r\n\r\n" not in rest:
            rest += sock.recv(65536)
        assert rest.startswith(b"HTTP/1.1 400"), rest  # no inputs: the server says what it expected
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"HTTP/1.1 200" in _read_until_closed(sock)
