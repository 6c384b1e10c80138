"""What a script needs to start servers and reach them: free ports on 127.0.0.1, a readiness wait and
one-shot HTTP calls. Blocking and standard library only; the peer launchers and benchmarks/ use them.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from servelab.errors import Unavailable

__all__ = ["HOST", "free_port", "free_ports", "http_status", "wait_until"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (bind port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (sockets held open together so the kernel cannot repeat one)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def http_status(
    url: str, method: str = "GET", body: bytes | None = None, timeout_s: float = 2.0
) -> tuple[int, bytes]:
    """(status, body) of one request; (0, b"") when nothing answers."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def wait_until(
    ready: Callable[[], bool], timeout_s: float, what: str, alive: Callable[[], str | None]
) -> None:
    """Poll ``ready`` (every 50 ms, backing off to 0.5 s) until it holds; fail early if the process died."""
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while time.monotonic() < deadline:
        dead = alive()
        if dead is not None:
            raise Unavailable(f"{what} exited before it was ready: {dead}")
        if ready():
            return
        time.sleep(pause)
        pause = min(pause * 1.5, 0.5)
    raise Unavailable(f"{what} was not ready after {timeout_s:.0f} s")
